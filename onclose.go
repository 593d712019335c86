package rally

// OnClose registers f to be called once the connection has ended, with how
// it ended. If it has already ended, f runs at once. f runs on whichever
// goroutine ended the connection and must not block; it is how packages
// built on rally (pubsub) learn that a connection is gone. A panic in f is
// recovered and logged.
func (c *Conn) OnClose(f func(*CloseError)) {
	c.wr.mu.Lock()
	if c.isDone() {
		c.wr.mu.Unlock()
		c.runOnClose(f, c.cl.final.Load())
		return
	}
	x := c.extras()
	if prev := x.onClose; prev != nil {
		// A function more runs after those before it, each recovered
		// on its own: connExtras keeps one function, not a slice, for
		// the one most connections have (pubsub's).
		x.onClose = func(ce *CloseError) {
			c.runOnClose(prev, ce)
			c.runOnClose(f, ce)
		}
	} else {
		x.onClose = f
	}
	c.wr.mu.Unlock()
}
