package deflate

import "github.com/rallyws/rally/frame"

var (
	// ErrTooBig is returned by Inflate when the inflated message would be
	// larger than the limit. It is a *frame.ProtocolError with close code
	// 1009.
	ErrTooBig error = &frame.ProtocolError{Code: frame.CloseTooBig, Rule: "inflated message larger than the read limit"}
	// ErrCorrupt is wrapped, together with a description of what is wrong,
	// by the error Inflate returns for a message that is not valid DEFLATE
	// data. It is a *frame.ProtocolError with close code 1007 (invalid
	// payload data), the code npm ws closes with on an inflate error.
	ErrCorrupt error = &frame.ProtocolError{Code: frame.CloseInvalidPayload, Rule: "compressed message is not valid deflate data"}
)

// corruptError wraps ErrCorrupt and the decoder's error.
type corruptError struct{ err error }

func (e *corruptError) Error() string   { return "deflate: corrupt message: " + e.err.Error() }
func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// Decompressor inflates the messages of one direction of one connection,
// in the order they arrive. It is not safe for concurrent use: the
// connection's reader calls it.
//
// A message is inflated either whole, with Inflate, or incrementally as
// its frames arrive, with Feed and Next: each chunk of compressed payload
// is fed as it is received and its output taken in pieces of at most
// MaxPiece bytes, so that the caller can check the running inflated size
// against its read limit and validate UTF-8 piece by piece, and stop a
// message at its first bad byte rather than after its last. Both decode
// with the same decoder and may be mixed from one message to the next.
//
// Memory: the decoder's state (about 40 KiB, a 32 KiB window and the
// Huffman tables) is pooled. Without context takeover it is lent from a
// message's first Feed to its end, and a Decompressor holds nothing
// between messages. With takeover it is lent from the first message until
// Idle, and after Idle the Decompressor keeps only the last 2^windowBits
// bytes it inflated, which start the next message's history. Idle between
// two chunks of one message gives nothing back: the state is the
// message's.
type Decompressor struct {
	takeover bool
	s        *stream // lent while busy
	inMsg    bool    // a message was fed and has not ended
	win      window  // with takeover, after Idle: the last bytes inflated
}

// MaxPiece is the most bytes Next returns at once.
const MaxPiece = histSize

// NewDecompressor returns a decompressor for a sender that uses a window of
// at most 2^windowBits bytes (8 to 15) and keeps context from one message
// to the next if takeover is true. It panics on a window out of range.
//
// zlib-based senders (browsers, npm ws) asked for 8 bits compress with 9,
// which zlib cannot avoid for raw DEFLATE; their matches still stay within
// 250 bytes (zlib never reaches further than the window less 262 bytes),
// so a 256-byte window holds them. Within a message, a match may reach as
// far back as the message and the kept window go.
func NewDecompressor(windowBits int, takeover bool) *Decompressor {
	checkArgs(BestSpeed, windowBits)
	d := &Decompressor{takeover: takeover}
	if takeover {
		d.win = newWindow(1 << windowBits)
	}
	return d
}

// Feed gives the decompressor the next chunk of the compressed payload of
// the message being received: a frame's payload as it arrives (unmasked,
// RSV1 already checked by the caller), or any part of one; last marks the
// chunk that ends the message (the payload of its FIN frame), after which
// the decompressor adds the 0x00 0x00 0xff 0xff tail that RFC 7692 7.2.2
// says the receiver appends. An empty chunk is valid (an empty final
// frame: Feed(nil, true)).
//
// Feed only keeps chunk: it inflates nothing and never fails. The caller
// then calls Next until it returns no piece, and must not change chunk
// until then. Feed panics when called before that (each chunk is taken
// whole, and a message ends when Next says so).
func (d *Decompressor) Feed(chunk []byte, last bool) {
	s := d.s
	if d.inMsg && (s.last || !s.consumed()) {
		panic("deflate: Feed before Next returned nil for the previous chunk")
	}
	if s == nil {
		s = getStream()
		if d.takeover {
			n := len(d.win.copyTo(s.hist[:]))
			s.wr, s.rd, s.have = n, n, n
		}
		d.s = s
	}
	s.in, s.last, s.tail = chunk, last, false
	d.inMsg = true
}

// Unread returns what Next has not taken yet of the chunk Feed gave (nil
// when none is left). With Rebase, a caller that stops calling Next
// before the chunk is used up can give the chunk's memory back.
func (d *Decompressor) Unread() []byte {
	if s := d.s; s != nil && d.inMsg && !s.tail {
		return s.in
	}
	return nil
}

// Rebase makes Next go on from rest, a copy of what Unread returned (the
// same bytes, in memory the caller keeps unchanged until Next has used it
// up), instead of the chunk Feed gave.
func (d *Decompressor) Rebase(rest []byte) {
	if s := d.s; s != nil && d.inMsg && !s.tail {
		if len(rest) != len(s.in) {
			panic("deflate: Rebase with other bytes than Unread returned")
		}
		s.in = rest
	}
}

// Next inflates from the chunk Feed gave and returns the next piece of
// the message: 1 to MaxPiece bytes, valid until the next call of Next,
// Feed, Inflate, Abort or Idle (it is the decoder's window; copy what must
// be kept). When the chunk is used up it returns nil, nil: then, after a
// chunk that was not the last, Feed the next one when it arrives; after
// the last, the message is complete.
//
// Data that is not valid DEFLATE fails with an error that wraps ErrCorrupt
// (a *frame.ProtocolError with code 1007) and a description; the decoder
// is then given back and the stream is broken: the connection must be
// failed. Like zlib, Next accepts a message whose data stops inside a
// DEFLATE block, and a message that ends with a final block (what follows
// that block in the message is ignored); the next message then starts a
// new block stream, on the same history with takeover.
//
// Next allocates nothing. It never buffers input: what it cannot decode
// yet (at most the 48 bits of one literal or match) waits in its bit
// buffer for the next chunk.
func (d *Decompressor) Next() ([]byte, error) {
	s := d.s
	if s == nil || !d.inMsg {
		return nil, nil
	}
	p, err := s.next()
	if err != nil {
		d.Abort()
		return nil, err
	}
	if p != nil || !s.last || !s.consumed() {
		return p, nil
	}
	// The message is complete. After its tail (an empty stored block)
	// the decoder waits at a block boundary, and the next message starts
	// at a byte boundary: bits left over are padding. A message that
	// stopped inside a block, or after a final one, leaves the next
	// message a new block stream.
	d.inMsg = false
	s.restart()
	if !d.takeover {
		putStream(s)
		d.s = nil
	}
	return nil, nil
}

// Abort abandons the message being inflated (the caller stopped it: the
// read limit was exceeded, a text message is not valid UTF-8) and gives
// the decoder back. With context takeover the stream is then broken: the
// connection must be failed, as it must after any error of Next.
func (d *Decompressor) Abort() {
	if d.s != nil {
		putStream(d.s)
		d.s = nil
	}
	d.inMsg = false
}

// Inflate appends the inflated payload of one message to dst and returns
// the extended slice. msg is the whole compressed payload as received (the
// fragments joined, without the tail); it is not kept or changed. It is
// Feed(msg, true) and Next until the message ends.
//
// The inflated size is checked while inflating: when it would exceed limit
// (limit <= 0: no limit) Inflate stops with ErrTooBig, having grown dst by
// no more than the limit, so a zip bomb costs at most the limit. A message
// that is not valid DEFLATE data fails with an error that wraps ErrCorrupt
// and a description. On an error dst is returned at its original length,
// and the stream is broken: the connection must be failed (1009 or 1007),
// not read on.
//
// With enough capacity in dst it allocates nothing in steady state.
func (d *Decompressor) Inflate(dst, msg []byte, limit int64) ([]byte, error) {
	start := len(dst)
	d.Feed(msg, true)
	for {
		p, err := d.Next()
		if err != nil {
			return dst[:start], err
		}
		if p == nil {
			return dst, nil
		}
		if limit > 0 && int64(len(dst)-start+len(p)) > limit {
			d.Abort()
			return dst[:start], ErrTooBig
		}
		dst = grow(dst, len(p), start, limit)
		dst = append(dst, p...)
	}
}

// grow makes room for n more bytes in dst, doubling but never past start+
// limit, so that no more than the limit is allocated for one message.
func grow(dst []byte, n, start int, limit int64) []byte {
	need := len(dst) + n
	if need <= cap(dst) {
		return dst
	}
	c := max(2*cap(dst), need, 512)
	if limit > 0 && int64(c-start) > limit {
		c = start + int(limit)
	}
	nd := make([]byte, len(dst), c)
	copy(nd, dst)
	return nd
}

// Idle tells the decompressor that the connection went quiet: between
// messages it gives its pooled decoder back and keeps only the last
// 2^windowBits bytes it inflated, which the next message copies into a
// lent decoder (a copy of at most 32 KiB). Without takeover, or in the
// middle of a message, it does nothing.
func (d *Decompressor) Idle() {
	if d.s == nil || d.inMsg {
		return
	}
	s := d.s
	n := min(s.have, d.win.size)
	d.win.reset()
	if n > s.wr {
		d.win.write(s.hist[histSize-(n-s.wr):])
		n = s.wr
	}
	d.win.write(s.hist[s.wr-n : s.wr])
	putStream(s)
	d.s = nil
}
