package rally

import "github.com/rallyws/rally/frame"

// sendPong answers a ping without waiting. It goes between frames, ahead
// of data that waits; an unsent pong is replaced by the newer one only
// under backpressure (RFC 6455 5.5.3), so a flood of pings against a slow
// reader cannot grow the queue, while pings that arrive together are each
// answered.
func (c *Conn) sendPong(payload []byte) {
	var b [frame.MaxHeaderSize + frame.MaxControlPayload]byte
	h := frame.Header{Fin: true, Opcode: frame.OpPong, Length: int64(len(payload))}
	if !c.server {
		h.Masked = true
		h.Mask = newMask()
	}
	n := frame.Put(b[:], h)
	n += copy(b[n:], payload)
	if h.Masked {
		frame.Mask(h.Mask, 0, b[n-len(payload):n])
	}
	f := b[:n]
	g := currentG()
	c.wr.mu.Lock()
	defer c.unlockWrite()
	q := &c.wr.q
	if c.wr.err != nil || q.closed {
		return
	}
	direct := !c.corkedLocked(g)
	if direct && !c.wr.flushing && q.queued() == 0 {
		k, err := c.t.tryWrite(f, nil)
		if err != nil {
			c.failWriteLocked(err)
			return
		}
		c.wr.taken += uint64(k)
		if k == len(f) {
			return
		}
		q.pushTaken(k, f[k:], nil, false, true, true, nil)
		q.ahead = c.t.aheadOfKernel()
		q.blocked = c.t.canTry()
		c.startFlusher()
		return
	}
	q.pushPong(f)
	if direct && !c.wr.flushing {
		c.kickLocked(false)
	}
}
