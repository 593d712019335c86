package deflate

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/rallyws/rally/frame"
)

var (
	// ErrTooBig is returned by Inflate when the inflated message would be
	// larger than the limit. It is a *frame.ProtocolError with close code
	// 1009.
	ErrTooBig error = &frame.ProtocolError{Code: frame.CloseTooBig, Rule: "inflated message larger than the read limit"}
	// ErrCorrupt is wrapped, together with the DEFLATE decoder's own error,
	// by the error Inflate returns for a message that is not valid DEFLATE
	// data. It is a *frame.ProtocolError with close code 1007 (invalid
	// payload data), the code npm ws closes with on an inflate error.
	ErrCorrupt error = &frame.ProtocolError{Code: frame.CloseInvalidPayload, Rule: "compressed message is not valid deflate data"}
)

// corruptError wraps ErrCorrupt and the decoder's error.
type corruptError struct{ err error }

func (e *corruptError) Error() string   { return "deflate: corrupt message: " + e.err.Error() }
func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// readSize is the buffer the decoder inflates into. The decoder hands out
// at most its 32 KiB history per Read, so a larger buffer is always drained
// by one Read and the decoder never has output left over when the input
// ends: the next message continues its stream without a reset.
const readSize = 1<<15 + 1

// maxCopy is the largest payload copied, with its tail, into the inflater:
// klauspost/compress decodes from a *bytes.Reader two to three times as
// fast as from another io.ByteReader. Larger payloads are read in place,
// so that a huge message is not held twice.
const maxCopy = 64 << 10

// inflater is a flate decoder with its input and output buffers, about
// 150 KB. It is pooled and lent for one message, or, with context
// takeover, while the connection is busy.
type inflater struct {
	fr     io.ReadCloser
	copied bool         // fr reads from br (else from src)
	br     bytes.Reader // reads in
	in     []byte       // a payload up to maxCopy and its tail
	src    source       // a larger payload, in place
	buf    [readSize]byte
}

var inflaters sync.Pool

// getInflater lends an inflater; its stream must be restarted before use.
func getInflater() *inflater {
	if in, ok := inflaters.Get().(*inflater); ok {
		return in
	}
	in := &inflater{copied: true}
	in.fr = flate.NewReader(&in.br)
	return in
}

// restart starts a new DEFLATE stream with dict as history, reading from
// br when copied, else from src.
func (in *inflater) restart(dict []byte, copied bool) {
	var r io.Reader = &in.src
	if copied {
		r = &in.br
	}
	in.copied = copied
	// flate readers always implement Resetter, and Reset never fails.
	_ = in.fr.(flate.Resetter).Reset(r, dict)
}

// feed makes msg, then the tail RFC 7692 7.2.2 puts back, the input.
func (in *inflater) feed(msg []byte) {
	if in.copied {
		in.in = append(append(in.in[:0], msg...), tail[:]...)
		in.br.Reset(in.in)
	} else {
		in.src = source{msg: msg}
	}
}

// consumed reports whether the decoder has read all of the input.
func (in *inflater) consumed() bool {
	if in.copied {
		return in.br.Len() == 0
	}
	return in.src.i == len(in.src.msg) && in.src.t == len(tail)
}

func putInflater(in *inflater) {
	in.br.Reset(nil)
	in.src = source{}
	inflaters.Put(in)
}

// source reads a payload in place, then the tail.
type source struct {
	msg []byte
	i   int // next byte of msg
	t   int // next byte of tail
}

func (s *source) ReadByte() (byte, error) {
	if s.i < len(s.msg) {
		c := s.msg[s.i]
		s.i++
		return c, nil
	}
	if s.t < len(tail) {
		c := tail[s.t]
		s.t++
		return c, nil
	}
	return 0, io.EOF
}

func (s *source) Read(p []byte) (int, error) {
	n := copy(p, s.msg[s.i:])
	s.i += n
	k := copy(p[n:], tail[s.t:])
	s.t += k
	if n+k == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n + k, nil
}

// Decompressor inflates the messages of one direction of one connection,
// in the order they arrive. It is not safe for concurrent use: the
// connection's reader calls it.
//
// Memory: without context takeover, a Decompressor holds nothing between
// messages (a pooled decoder is lent for each message). With takeover, it
// holds a pooled decoder (about 150 KB) from its first message until Idle,
// and after Idle only the last 2^windowBits bytes it inflated, which start
// the next message's history.
type Decompressor struct {
	takeover bool
	in       *inflater // lent while busy, with takeover only
	restart  bool      // in's stream ended: start it again from win
	win      window    // with takeover: the last bytes inflated
}

// NewDecompressor returns a decompressor for a sender that uses a window of
// at most 2^windowBits bytes (8 to 15) and keeps context from one message
// to the next if takeover is true. It panics on a window out of range.
//
// zlib-based senders (browsers, npm ws) asked for 8 bits compress with 9,
// which zlib cannot avoid for raw DEFLATE; their matches still stay within
// 250 bytes (zlib never reaches further than the window less 262 bytes),
// so a 256-byte window holds them.
func NewDecompressor(windowBits int, takeover bool) *Decompressor {
	checkArgs(BestSpeed, windowBits)
	d := &Decompressor{takeover: takeover}
	if takeover {
		d.win = newWindow(1 << windowBits)
	}
	return d
}

// Inflate appends the inflated payload of one message to dst and returns
// the extended slice. msg is the whole compressed payload as received (the
// fragments joined, without the tail); it is not kept or changed.
//
// The inflated size is checked while inflating: when it would exceed limit
// (limit <= 0: no limit) Inflate stops with ErrTooBig, having grown dst by
// no more than the limit, so a zip bomb costs at most the limit. A message
// that is not valid DEFLATE data fails with an error that wraps ErrCorrupt
// and the decoder's error. On an error dst is returned at its original
// length, and the stream is broken: the connection must be failed (1009 or
// 1007), not read on.
//
// Like zlib, Inflate accepts a message whose data stops inside a DEFLATE
// block, delivering what it decoded. With enough capacity in dst it
// allocates nothing in steady state.
func (d *Decompressor) Inflate(dst, msg []byte, limit int64) ([]byte, error) {
	in := d.in
	if in == nil {
		in = getInflater()
		d.restart = true
	}
	copied := len(msg) <= maxCopy
	if d.restart || in.copied != copied {
		var dict []byte
		if d.takeover {
			dict = d.win.copyTo(in.buf[:]) // Reset copies it out at once
		}
		in.restart(dict, copied)
		d.restart = false
	}
	in.feed(msg)
	start := len(dst)
	for {
		n, err := in.fr.Read(in.buf[:])
		if n > 0 {
			if limit > 0 && int64(len(dst)-start+n) > limit {
				d.release(in)
				return dst[:start], ErrTooBig
			}
			dst = grow(dst, n, start, limit)
			dst = append(dst, in.buf[:n]...)
			if d.takeover {
				d.win.write(in.buf[:n])
			}
		}
		switch {
		case err == nil:
			if !in.consumed() {
				continue
			}
			// The input ended just after the decoder handed out what the
			// flush at the message's end released: it waits for the next
			// block, which the next message brings.
		case errors.Is(err, io.EOF):
			// A final block (RFC 7692 7.2.3.3): the next message starts a
			// new block stream on the same history.
			d.restart = true
		case errors.Is(err, io.ErrUnexpectedEOF) && in.consumed():
			// The decoder looked for another block past the end of the
			// message (or the data stopped inside a block, which zlib
			// accepts too).
			d.restart = true
		default:
			d.release(in)
			return dst[:start], &corruptError{err: err}
		}
		break
	}
	if d.takeover {
		d.in = in
	} else {
		putInflater(in)
	}
	return dst, nil
}

// release gives the decoder back after an error; the next Inflate starts a
// new stream.
func (d *Decompressor) release(in *inflater) {
	putInflater(in)
	d.in = nil
	d.restart = false
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

// Idle tells the decompressor that the connection went quiet: it gives its
// pooled decoder back and keeps only the last 2^windowBits bytes it
// inflated, which the next message copies into a lent decoder (a copy of
// at most 32 KiB). Without takeover it does nothing.
func (d *Decompressor) Idle() {
	if d.in == nil {
		return
	}
	putInflater(d.in)
	d.in = nil
	d.restart = false
}
