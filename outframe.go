package rally

import (
	"math/rand/v2"

	"github.com/rallyws/rally/frame"
)

// Framing a message for the send queue: the header in the connection's
// array, the payload compressed (in send order) or masked on its way in.

// outFrame is one frame to send: a header and a payload (masked with key
// on the way into the queue when masked).
type outFrame struct {
	hdr, payload []byte
	masked       bool
	key          [4]byte
	keep         bool        // never withdrawn (sendQueue invariant 7)
	shared       bool        // payload is a PreparedMessage's frame: the queue may refer to it (sendQueue invariant 9)
	share        *frameShare // the shared frame's reference count, when shared
	done         func(error)
	join         bool    // a non-blocking send without a completion: may join the record before it (sendQueue invariant 10)
	zbuf         *[]byte // the compressed payload's buffer, given back after queuing
}

// frameLocked frames p as one frame with opcode op. A whole data message
// is compressed here, when permessage-deflate is on, under the write lock
// and so in send order (with context takeover, order is part of the
// compressed stream). The header is built in the connection's array: the
// frame must be queued or written before the lock is released.
func (c *Conn) frameLocked(op frame.Opcode, fin bool, p []byte, mode Compress, fragment bool) outFrame {
	h := frame.Header{Fin: fin, Opcode: op}
	var f outFrame
	f.keep = fragment
	switch {
	case fragment:
		if op != frame.OpContinuation {
			// A streamed message's first fragment decides for the whole
			// message: its size is known only if it is also the last;
			// otherwise it is at least a full writer buffer.
			size := len(p)
			if !fin {
				size = max(size, writerBufferSize)
			}
			c.wr.moreLocked().streamZ = c.z.wantsCompression(size, mode)
			if c.wr.more.streamZ {
				h.Rsv = frame.Rsv1 // RFC 7692 6.1: on the first frame only
			}
		}
		if c.wr.more.streamZ {
			f.zbuf = c.compressPartLocked(p, fin)
			p = *f.zbuf
		}
	case fin && (op == frame.OpText || op == frame.OpBinary):
		if c.wr.q.streaming && c.z != nil && c.z.takeover {
			// Held while a message streams: with context takeover the
			// compressed stream's order must be the wire's, and this one
			// leaves after a message not compressed yet.
			mode = CompressNever
		}
		if c.z.wantsCompression(len(p), mode) {
			f.zbuf = c.compressLocked(p)
			p = *f.zbuf
			h.Rsv = frame.Rsv1
			f.keep = c.z.takeover
		}
	}
	h.Length = int64(len(p))
	if !c.rd.p.server {
		h.Masked = true
		h.Mask = newMask()
	}
	n := frame.Put(c.wr.hdr[:], h)
	f.hdr, f.payload, f.masked, f.key = c.wr.hdr[:n], p, h.Masked, h.Mask
	return f
}

func newMask() [4]byte {
	v := rand.Uint32()
	return [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}
