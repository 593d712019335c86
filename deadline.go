package rally

import (
	"context"
	"net"
	"sync"
	"time"
)

// deadlineWatch makes a read or write blocked in the transport return when
// its context ends, by moving the connection's read or write deadline into
// the past, and puts the deadline back afterwards. A context that can
// never end costs nothing.
type deadlineWatch struct {
	nc   net.Conn
	mu   sync.Mutex
	r, w watchSlot
}

type watchSlot struct {
	active, fired bool
	stop          func() bool
	interrupt     func() // made once per slot
}

// watch arms s for ctx and reports whether it did.
func (d *deadlineWatch) watch(ctx context.Context, s *watchSlot) bool {
	if ctx == nil || ctx.Done() == nil {
		return false
	}
	d.mu.Lock()
	s.active = true
	if s.interrupt == nil {
		s.interrupt = func() { d.interrupt(s) }
	}
	d.mu.Unlock()
	s.stop = context.AfterFunc(ctx, s.interrupt)
	return true
}

func (d *deadlineWatch) interrupt(s *watchSlot) {
	d.mu.Lock()
	if s.active {
		d.set(s, time.Unix(1, 0))
		s.fired = true
	}
	d.mu.Unlock()
}

// unwatch disarms s and clears the deadline if it fired.
func (d *deadlineWatch) unwatch(s *watchSlot) {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	d.mu.Lock()
	s.active = false
	if s.fired {
		s.fired = false
		d.set(s, time.Time{})
	}
	d.mu.Unlock()
}

func (d *deadlineWatch) set(s *watchSlot, t time.Time) {
	if s == &d.r {
		d.nc.SetReadDeadline(t)
	} else {
		d.nc.SetWriteDeadline(t)
	}
}
