package rally

import (
	"time"

	"github.com/rallyws/rally/frame"
)

// controlBurst is how many seconds' worth of ConnOptions.ControlRate a
// peer may send at once.
const controlBurst = 10

// controlBucket is a token bucket over the ping and pong frames a peer
// sends (ConnOptions.ControlRate). The zero value is full.
type controlBucket struct {
	tokens float64
	last   int64 // when tokens were counted (unix ns); 0: never
}

// allowControl takes a token for a ping or pong that arrived, and
// reports false when none is left. The caller is the reader.
func (c *Conn) allowControl() bool {
	rate := c.opts.ControlRate
	if rate < 0 {
		return true
	}
	if rate == 0 {
		rate = DefaultControlRate
	}
	b := &c.extras().control
	burst := float64(rate * controlBurst)
	now := time.Now().UnixNano()
	if b.last == 0 {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+float64(now-b.last)*float64(rate)/float64(time.Second))
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// controlTooFast fails the connection whose peer sends control frames
// past ConnOptions.ControlRate: a 1008 close goes out, and the read side
// ends with ErrControlRate.
func (c *Conn) controlTooFast() error {
	const reason = "control frames too fast"
	c.closeWithCode(frame.ClosePolicyViolation, reason)
	return c.endRead(&CloseError{Code: frame.ClosePolicyViolation, Reason: reason, Err: ErrControlRate}, true)
}

// sendPong answers a ping without waiting. It goes between frames, ahead
// of data that waits; an unsent pong is replaced by the newer one only
// under backpressure (RFC 6455 5.5.3), so a flood of pings against a slow
// reader cannot grow the queue, while pings that arrive together are each
// answered.
func (c *Conn) sendPong(payload []byte) {
	var b [frame.MaxHeaderSize + frame.MaxControlPayload]byte
	h := frame.Header{Fin: true, Opcode: frame.OpPong, Length: int64(len(payload))}
	if !c.rd.p.server {
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
		c.wr.tookLocked(k)
		if k == len(f) {
			return
		}
		q.pushTaken(k, f[k:], nil, false, true, true, nil)
		q.setAhead(c.t.aheadOfKernel())
		q.blocked = c.t.canTry()
		c.startFlusher()
		return
	}
	q.pushPong(f)
	if direct && !c.wr.flushing {
		c.kickLocked(false)
	}
}
