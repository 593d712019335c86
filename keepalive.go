package rally

import (
	"time"

	"github.com/rallyws/rally/frame"
)

// startKeepalive arms the ping and idle timer when either is configured.
func (c *Conn) startKeepalive() {
	period := c.keepalivePeriod()
	if period <= 0 {
		return
	}
	c.rd.last.Store(time.Now().UnixNano())
	c.wr.mu.Lock()
	c.extras().keepalive = time.AfterFunc(period, c.tick)
	c.wr.mu.Unlock()
}

// keepalivePeriod is how often the ping and idle timer looks at the
// connection at most (0: neither is configured).
func (c *Conn) keepalivePeriod() time.Duration {
	period := c.opts.PingInterval
	if c.opts.IdleTimeout > 0 && (period <= 0 || c.opts.IdleTimeout < period) {
		period = c.opts.IdleTimeout
	}
	return max(period, 0)
}

// tick is the keepalive timer of a connection a goroutine reads.
func (c *Conn) tick() {
	next, ok := c.keepaliveDue(time.Now())
	if !ok {
		return
	}
	c.wr.mu.Lock()
	if x := c.x.Load(); x != nil && x.keepalive != nil { // nil: an event loop took over (see toLoop)
		x.keepalive.Reset(max(next, time.Millisecond))
	}
	c.wr.mu.Unlock()
}

// keepaliveDue pings a quiet peer and closes an idle one with 1001. It
// returns how long until it should look again, or false once the
// connection is closing or closed.
func (c *Conn) keepaliveDue(now time.Time) (time.Duration, bool) {
	if c.isDone() {
		return 0, false
	}
	idle := now.Sub(time.Unix(0, c.rd.last.Load()))
	if c.opts.IdleTimeout > 0 && idle >= c.opts.IdleTimeout {
		c.closeWithCode(frame.CloseGoingAway, "idle timeout")
		return 0, false
	}
	next := time.Duration(1<<63 - 1)
	if c.opts.IdleTimeout > 0 {
		next = c.opts.IdleTimeout - idle
	}
	c.wr.mu.Lock()
	if p := c.opts.PingInterval; p > 0 {
		if idle >= p && now.Sub(time.Unix(0, c.wr.lastPing)) >= p {
			c.wr.lastPing = now.UnixNano()
			if c.closedLocked() == nil {
				f := c.frameLocked(frame.OpPing, true, nil, CompressNever, false)
				c.enqueueLocked(&f, true, false)
			}
		}
		next = min(next, p-idle%p)
	}
	c.unlockWrite()
	return next, true
}
