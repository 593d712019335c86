package rally

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineWatch makes a read or write blocked in the transport return when
// its context ends, by moving the connection's read or write deadline into
// the past, and puts the deadline back afterwards. A context that can
// never end costs nothing; the watch's state is made by the first context
// that can, so that a connection nobody reads or writes with such a
// context (an idle one, one driven by a Server) does not carry it.
type deadlineWatch struct {
	st atomic.Pointer[deadlineState]
}

// watchSlot names the read or the write deadline of a deadlineWatch.
type watchSlot uint8

const (
	readDeadline watchSlot = iota
	writeDeadline
)

type deadlineState struct {
	c    *Conn // whose net.Conn's deadlines it moves
	mu   sync.Mutex
	r, w slotState
}

type slotState struct {
	active, fired bool
	stop          func() bool
	interrupt     func() // made once per slot
}

// state returns the watch's state, making it on first use.
func (d *deadlineWatch) state(c *Conn) *deadlineState {
	if st := d.st.Load(); st != nil {
		return st
	}
	d.st.CompareAndSwap(nil, &deadlineState{c: c})
	return d.st.Load()
}

// slot returns the state of the deadline s names.
func (st *deadlineState) slot(s watchSlot) *slotState {
	if s == readDeadline {
		return &st.r
	}
	return &st.w
}

// watch arms c's deadline s for ctx and reports whether it did.
func (d *deadlineWatch) watch(c *Conn, ctx context.Context, s watchSlot) bool {
	if ctx == nil || ctx.Done() == nil {
		return false
	}
	st := d.state(c)
	ss := st.slot(s)
	st.mu.Lock()
	ss.active = true
	if ss.interrupt == nil {
		ss.interrupt = func() { st.interrupt(s) }
	}
	st.mu.Unlock()
	ss.stop = context.AfterFunc(ctx, ss.interrupt)
	return true
}

func (st *deadlineState) interrupt(s watchSlot) {
	ss := st.slot(s)
	st.mu.Lock()
	if ss.active {
		st.set(s, time.Unix(1, 0))
		ss.fired = true
	}
	st.mu.Unlock()
}

// unwatch disarms s (which watch armed) and clears the deadline if it
// fired.
func (d *deadlineWatch) unwatch(s watchSlot) {
	st := d.st.Load()
	ss := st.slot(s)
	if ss.stop != nil {
		ss.stop()
		ss.stop = nil
	}
	st.mu.Lock()
	ss.active = false
	if ss.fired {
		ss.fired = false
		st.set(s, time.Time{})
	}
	st.mu.Unlock()
}

func (st *deadlineState) set(s watchSlot, t time.Time) {
	if s == readDeadline {
		st.c.netConn().SetReadDeadline(t)
	} else {
		st.c.netConn().SetWriteDeadline(t)
	}
}
