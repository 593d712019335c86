package deflate

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/flate"
)

// Compression levels. Higher levels compress more and run slower.
const (
	BestSpeed       = 1
	BestCompression = 9
	// DefaultLevel is the level used for 0: the fastest, which is what a
	// server that compresses every message can afford.
	DefaultLevel = BestSpeed
)

// primeSize is how much of what it sent a compressor with context takeover
// keeps when idle, and primes its next message with. The window may be
// larger, but a sender may use less of it than it could: on JSON feeds the
// first message after an idle period comes out about 3% larger than with a
// full 32 KiB window, for a quarter of the memory and of the priming work.
const primeSize = 8 << 10

// tail is what a sync flush ends with and what RFC 7692 7.2.1 takes off
// the end of each compressed message (and 7.2.2 puts back).
var tail = [4]byte{0x00, 0x00, 0xff, 0xff}

// writer is a flate compressor that appends to a slice. It is large (a few
// hundred KiB), so writers are pooled per level and window and lent only
// while a message is compressed, or, with context takeover, while the
// connection is busy.
type writer struct {
	fw   *flate.Writer
	out  sink
	pool int
}

// sink is the flate.Writer's destination: it appends to b.
type sink struct{ b []byte }

func (s *sink) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

// writerPools holds idle writers: index 1..9 for a 15-bit window at that
// level, 10..16 for windows of 8..14 bits.
var writerPools [BestCompression + 1 + MaxWindowBits - MinWindowBits]sync.Pool

func poolIndex(level, bits int) int {
	if bits == MaxWindowBits {
		return level
	}
	return BestCompression + 1 + bits - MinWindowBits
}

// getWriter lends a writer whose stream starts with dict as history.
func getWriter(level, bits int, dict []byte) *writer {
	i := poolIndex(level, bits)
	if w, ok := writerPools[i].Get().(*writer); ok {
		w.fw.ResetDict(&w.out, dict)
		return w
	}
	w := &writer{pool: i}
	var err error
	if bits == MaxWindowBits {
		w.fw, err = flate.NewWriter(&w.out, level)
	} else {
		// Below 32 KiB, klauspost/compress has one windowed encoder, which
		// keeps every match within the window; it has no levels.
		w.fw, err = flate.NewWriterWindow(&w.out, 1<<bits)
	}
	if err != nil {
		panic("deflate: " + err.Error()) // level and bits were checked
	}
	if len(dict) > 0 {
		w.fw.ResetDict(&w.out, dict)
	}
	return w
}

func putWriter(w *writer) {
	w.out.b = nil
	writerPools[w.pool].Put(w)
}

// compress appends msg compressed and flushed, without the tail.
func (w *writer) compress(dst, msg []byte) []byte {
	w.out.b = dst
	// The sink never fails, so neither do Write and Flush.
	_, _ = w.fw.Write(msg)
	_ = w.fw.Flush()
	out := w.out.b
	w.out.b = nil
	// RFC 7692 7.2.1: the flush ended the data with an empty stored block,
	// whose last 4 bytes are the tail; they are not sent.
	return out[:len(out)-len(tail)]
}

func checkArgs(level, windowBits int) int {
	if level == 0 {
		level = DefaultLevel
	}
	if level < BestSpeed || level > BestCompression {
		panic(fmt.Sprintf("deflate: level %d out of range, want 0 or %d to %d", level, BestSpeed, BestCompression))
	}
	if windowBits < MinWindowBits || windowBits > MaxWindowBits {
		panic(fmt.Sprintf("deflate: window bits %d out of range, want %d to %d", windowBits, MinWindowBits, MaxWindowBits))
	}
	return level
}

// Compressor compresses the messages of one direction of one connection,
// in the order they are sent. With context takeover the messages form one
// DEFLATE stream: each may refer back to the ones before it, so the peer
// must receive every compressed message, in order.
//
// A Compressor is not safe for concurrent use: the connection calls it
// under its send lock.
//
// Memory: without takeover, a Compressor holds nothing between messages
// (a pooled compressor, about 1 MB, is lent for each message). With
// takeover, it holds a pooled compressor from its first message until
// Idle, and after Idle only the last 8 KiB it sent (less with a smaller
// window), which the next message is primed with.
type Compressor struct {
	level    int
	bits     int
	takeover bool
	w        *writer // lent while busy, with takeover only
	win      window  // with takeover: the last bytes compressed, up to primeSize
	part     *writer // compressing a message piece by piece (CompressPart)
}

// NewCompressor returns a compressor at level (BestSpeed to
// BestCompression, 0 for DefaultLevel) that keeps every match within
// 2^windowBits bytes (8 to 15). Below 15 bits the level is ignored: the
// only windowed encoder of klauspost/compress runs at about level 5.
// takeover keeps context from one message to the next (the negotiated
// *_no_context_takeover is false). It panics on a level or window out of
// range.
func NewCompressor(level, windowBits int, takeover bool) *Compressor {
	level = checkArgs(level, windowBits)
	c := &Compressor{level: level, bits: windowBits, takeover: takeover}
	if takeover {
		c.win = newWindow(min(1<<windowBits, primeSize))
	}
	return c
}

// Compress appends msg, compressed as the payload of one message (RFC 7692
// 7.2.1: without the 00 00 ff ff tail), to dst and returns the extended
// slice. msg is not kept or changed. With enough capacity in dst it
// allocates nothing in steady state.
//
// With context takeover the output must be sent, even if it is larger than
// msg: the compressor's history now holds msg. Without takeover the caller
// may send msg uncompressed instead. Under either, a message the connection
// does not pass to Compress may go out uncompressed (RSV1 clear): it is not
// part of the stream. klauspost/compress stores inputs below about 17
// bytes as they are, 6 bytes larger, so such messages are best sent
// uncompressed even with takeover.
func (c *Compressor) Compress(dst, msg []byte) []byte {
	if !c.takeover {
		w := getWriter(c.level, c.bits, nil)
		dst = w.compress(dst, msg)
		putWriter(w)
		return dst
	}
	if c.w == nil {
		// Back from Idle: prime a lent compressor with what was sent.
		c.w = getWriter(c.level, c.bits, c.win.linear())
	}
	dst = c.w.compress(dst, msg)
	c.win.write(msg)
	return dst
}

// CompressPart appends part, compressed as one piece of a message sent in
// fragments (RFC 7692 6.1: the compressed message may be split at any
// point), to dst and returns the extended slice. Each piece ends with a
// sync flush, so the peer can inflate it as it arrives; final marks the
// message's last piece, whose output ends without the 00 00 ff ff tail
// (RFC 7692 7.2.1). Between the first and the final piece of a message no
// other message may be compressed. It allocates nothing in steady state.
func (c *Compressor) CompressPart(dst, part []byte, final bool) []byte {
	if c.part == nil {
		if c.takeover {
			if c.w == nil {
				c.w = getWriter(c.level, c.bits, c.win.linear())
			}
			c.part = c.w
		} else {
			c.part = getWriter(c.level, c.bits, nil)
		}
	}
	w := c.part
	start := len(dst)
	w.out.b = dst
	_, _ = w.fw.Write(part)
	_ = w.fw.Flush()
	out := w.out.b
	w.out.b = nil
	if c.takeover {
		c.win.write(part)
	}
	if final {
		if len(out)-start >= len(tail) && [4]byte(out[len(out)-len(tail):]) == tail {
			out = out[:len(out)-len(tail)]
		}
		if !c.takeover {
			putWriter(w)
		}
		c.part = nil
	}
	return out
}

// Idle tells the compressor that the connection went quiet: it gives its
// pooled compressor back and keeps only the last 8 KiB it sent. The next
// message primes a compressor with them, which costs about as much as
// compressing 8 KiB. So Idle trades CPU for memory: called after every
// message, a connection holds 8 KiB and each message pays the priming;
// called after a quiet period, a busy connection holds a whole compressor.
// Without takeover it does nothing.
func (c *Compressor) Idle() {
	if c.w == nil || c.part != nil {
		return
	}
	putWriter(c.w)
	c.w = nil
}

// CompressOnce compresses msg as the payload of one message that carries
// no context, and appends it to dst: the same bytes go to every receiver
// whose sender side negotiated no context takeover and a window of at
// least windowBits (RFC 7692 7.1.1.1), so a message published to many
// connections is compressed once. level and windowBits are as for
// NewCompressor, and it panics when they are out of range. It is safe for
// concurrent use and allocates nothing in steady state when dst has room.
func CompressOnce(dst, msg []byte, level, windowBits int) []byte {
	level = checkArgs(level, windowBits)
	w := getWriter(level, windowBits, nil)
	dst = w.compress(dst, msg)
	putWriter(w)
	return dst
}
