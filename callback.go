package rally

import (
	"fmt"

	"github.com/rallyws/rally/frame"
)

// The callback invoker. Every user callback runs through it: Server
// callbacks (Open, Message, Ping, Pong, Drain, Close), the ConnOptions
// hooks (OnPing, OnPong, OnDrain), SendDone completions and OnClose
// functions. It keeps four promises:
//
//   - A panic is recovered, logged, and closes the connection with 1011.
//   - Callbacks that may run on different goroutines (OnDrain on the
//     flushing goroutine, the others on the reading goroutine) never run at
//     the same time: they hold cb.mu. Completions and OnClose functions do
//     not take it: they may run inside another callback (a send completed
//     at once on the callback's own goroutine).
//   - Nothing waits for itself: the reading goroutine is known (rd.g), and
//     OnDrain's cork says it is a callback's (corkCallback), so Close
//     called from a hook or OnDrain sends and returns; OnDrain never blocks on
//     cb.mu (it is run by whoever releases it); completions run with no
//     lock held and with the queue free to flush (a completion may Write
//     or Close).
//   - The automatic cork around a read batch gathers only the sends made
//     on the reading goroutine (see cork.go).

// enterCallback marks the start of a callback on this goroutine.
func (c *Conn) enterCallback() {
	c.cb.mu.Lock()
	c.cb.flags.Or(callbackRunning)
}

// exitCallback recovers a panic of the callback, ends it, and runs an
// OnDrain that came due meanwhile. It must be deferred.
func (c *Conn) exitCallback() {
	if v := recover(); v != nil {
		c.callbackPanicked(v)
	}
	c.cb.flags.And(^uint32(callbackRunning))
	c.cb.mu.Unlock()
	c.runPendingDrain()
}

func (c *Conn) callOpen(f func(*Conn)) {
	c.enterCallback()
	defer c.exitCallback()
	f(c)
}

func (c *Conn) callMessage(f func(*Conn, MessageType, []byte), typ MessageType, p []byte) {
	c.enterCallback()
	defer c.exitCallback()
	f(c, typ, p)
}

func (c *Conn) callClose(f func(*Conn, *CloseError), err *CloseError) {
	c.enterCallback()
	defer c.exitCallback()
	f(c, err)
}

// callHook runs a ping or pong hook. It reports whether it panicked.
func (c *Conn) callHook(f func(*Conn, []byte), p []byte) (panicked bool) {
	c.enterCallback()
	defer func() {
		if v := recover(); v != nil {
			c.callbackPanicked(v)
			panicked = true
		}
		c.cb.flags.And(^uint32(callbackRunning))
		c.cb.mu.Unlock()
		c.runPendingDrain()
	}()
	f(c, p)
	return false
}

// drained is told that the send queue emptied after a send was queued.
// OnDrain runs now if no other callback of the connection runs, else right
// after the one that does (it never waits for it: the flushing goroutine
// must not block on a callback that waits for the flush).
func (c *Conn) drained() {
	if c.opts.OnDrain == nil {
		return
	}
	c.cb.flags.Or(drainPending)
	c.runPendingDrain()
}

// runPendingDrain runs a pending OnDrain unless a callback holds cb.mu; its
// holder calls it again after releasing it, so none is lost (the flag is
// set before the attempt to take the lock).
func (c *Conn) runPendingDrain() {
	for c.cb.flags.Load()&drainPending != 0 {
		if !c.cb.mu.TryLock() {
			return
		}
		if c.cb.flags.And(^uint32(drainPending))&drainPending != 0 {
			c.cb.flags.Or(callbackRunning)
			c.corkCallback()
			c.callDrain(c.opts.OnDrain)
			c.corkEnd()
			c.cb.flags.And(^uint32(callbackRunning))
		}
		c.cb.mu.Unlock()
	}
}

func (c *Conn) callDrain(f func(*Conn)) {
	defer c.recoverCallback()
	f(c)
}

// runDones runs send completions, each with its panic recovered. No lock
// is held.
func (c *Conn) runDones(dones []doneCall) {
	for i := range dones {
		c.runDone(dones[i])
		dones[i] = doneCall{}
	}
}

func (c *Conn) runDone(d doneCall) {
	defer c.recoverCallback()
	d.f(d.err)
}

func (c *Conn) runOnClose(f func(*CloseError), ce *CloseError) {
	defer c.recoverCallback()
	f(ce)
}

func (c *Conn) recoverCallback() {
	if v := recover(); v != nil {
		c.callbackPanicked(v)
	}
}

// callbackPanicked logs a recovered panic and fails the connection with
// 1011, without waiting.
func (c *Conn) callbackPanicked(v any) {
	c.logger().Error("rally: panic in a connection callback; closing with 1011",
		"remote", c.netConn().RemoteAddr().String(), "panic", fmt.Sprint(v))
	c.closeWithCode(frame.CloseInternalError, "")
}

// onReadingGoroutine reports whether the caller is the goroutine that
// reads the connection (a hook or Server callback calling back in).
func (c *Conn) onReadingGoroutine() bool {
	if g := currentG(); g != 0 {
		return c.rd.g.Load() == g
	}
	return c.cb.flags.Load()&callbackRunning != 0
}
