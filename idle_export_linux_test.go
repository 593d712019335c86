package rally

// IdleHoldings lists the memory and timers c holds beyond its own state
// and its loop registration: what an idle connection an event loop drives
// must not hold (an empty list). Call it on c's loop goroutine (from a
// callback of another connection of the same loop), where c's read side
// may be looked at.
func IdleHoldings(c *Conn) []string {
	var held []string
	add := func(cond bool, what string) {
		if cond {
			held = append(held, what)
		}
	}
	t, ok := c.loopT()
	add(!ok, "a transport other than the loop's")
	add(c.rd.sem != nil, "a read semaphore")
	add(c.rd.buf != nil || len(c.rd.in) > 0, "a read buffer")
	add(c.rd.msg.buf != nil, "a message buffer")
	add(c.rd.p.ctl != nil, "a control frame buffer")
	c.wr.mu.Lock()
	add(c.wr.q.queueLane != nil || c.wr.q.held != nil, "a send queue lane or buffer")
	add(c.wr.more != nil && (c.wr.more.closeTimer != nil || c.wr.more.stall != nil), "a write-side timer")
	add(c.wr.corks != nil, "cork state")
	if ok {
		add(t.armed, "a wait for writability")
	}
	c.wr.mu.Unlock()
	x := c.x.Load()
	add(x != nil && x.keepalive != nil, "a keepalive timer")
	add(x != nil, "extras (subprotocol, reader, OnClose, keepalive)")
	add(c.dl.st.Load() != nil, "deadline watch state")
	add(c.cl.done.Load() != nil, "a Done channel")
	add(c.z != nil, "compression state")
	return held
}
