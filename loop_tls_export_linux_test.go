package rally

// ServedByLoopOverTLS reports whether c is a TLS connection an event loop
// owns and the caller runs on that loop's goroutine (call it from a
// callback).
func ServedByLoopOverTLS(c *Conn) bool {
	t, ok := c.t.(*loopTLSTransport)
	return ok && loopOfG(currentG()) == t.l
}
