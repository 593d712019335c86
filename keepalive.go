package rally

import (
	"time"

	"github.com/rallyws/rally/frame"
)

// startKeepalive arms the ping and idle timer when either is configured.
func (c *Conn) startKeepalive() {
	period := c.opts.PingInterval
	if c.opts.IdleTimeout > 0 && (period <= 0 || c.opts.IdleTimeout < period) {
		period = c.opts.IdleTimeout
	}
	if period <= 0 {
		return
	}
	c.rd.last.Store(time.Now().UnixNano())
	c.wr.mu.Lock()
	c.cl.keepalive = time.AfterFunc(period, c.tick)
	c.wr.mu.Unlock()
}

// tick pings a quiet peer and closes an idle one with 1001.
func (c *Conn) tick() {
	select {
	case <-c.cl.done:
		return
	default:
	}
	now := time.Now()
	idle := now.Sub(time.Unix(0, c.rd.last.Load()))
	if c.opts.IdleTimeout > 0 && idle >= c.opts.IdleTimeout {
		c.closeWithCode(frame.CloseGoingAway, "idle timeout")
		return
	}
	next := time.Duration(1<<63 - 1)
	if c.opts.IdleTimeout > 0 {
		next = c.opts.IdleTimeout - idle
	}
	c.wr.mu.Lock()
	if p := c.opts.PingInterval; p > 0 {
		if idle >= p && now.Sub(c.wr.lastPing) >= p {
			c.wr.lastPing = now
			if c.closedLocked() == nil {
				f := c.frameLocked(frame.OpPing, true, nil, CompressNever, false)
				c.enqueueLocked(&f, true, false)
			}
		}
		next = min(next, p-idle%p)
	}
	c.cl.keepalive.Reset(max(next, time.Millisecond))
	c.unlockWrite()
}
