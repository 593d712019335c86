package websocket

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// errDeadline and errAborted are what a deadline context's Err returns:
// its time passed, or a handler's error ended the read it bounds.
var (
	errDeadline = errors.New("websocket: deadline exceeded")
	errAborted  = errors.New("websocket: read aborted by a handler's error")
)

// deadline is a context whose end can move while an operation waits on it,
// as a net.Conn deadline can: gorilla programs extend the read deadline
// from the pong handler, which runs in the middle of a read. Its Done
// channel closes when the time set passes (or abort is called); a later
// set makes a fresh channel for the next operation. Until a deadline or a
// handler makes it needed (active), the connection reads and writes with
// context.Background, which costs nothing per message.
type deadline struct {
	active atomic.Bool
	pinned atomic.Bool // a handler may abort: stay active without a deadline

	mu     sync.Mutex
	at     time.Time
	timer  *time.Timer
	done   chan struct{}
	err    error // why done is closed: errDeadline or errAborted
	cause  error // the handler's error behind errAborted
	afters []afterFunc
	nextID uint64
}

type afterFunc struct {
	id uint64
	f  func()
}

// context returns the context that bounds the next operation.
func (d *deadline) context() context.Context {
	if !d.active.Load() {
		return context.Background()
	}
	return d
}

// set moves the deadline to t (zero: none).
func (d *deadline) set(t time.Time) {
	d.active.Store(!t.IsZero() || d.pinned.Load())
	d.mu.Lock()
	d.at = t
	if d.err == errDeadline {
		// The deadline passed; whether that broke anything was decided by
		// the operation that saw it. The next one starts afresh.
		d.err, d.done = nil, nil
	}
	if t.IsZero() {
		if d.timer != nil {
			d.timer.Stop()
		}
		d.mu.Unlock()
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.mu.Unlock()
		d.fire(errDeadline, nil)
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.expire)
	} else {
		d.timer.Reset(wait)
	}
	d.mu.Unlock()
}

// get returns the deadline set.
func (d *deadline) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// expire runs when the timer fires; the deadline may have moved since.
func (d *deadline) expire() {
	d.mu.Lock()
	passed := !d.at.IsZero() && !time.Now().Before(d.at)
	d.mu.Unlock()
	if passed {
		d.fire(errDeadline, nil)
	}
}

// abort ends the current operation because a handler returned cause.
func (d *deadline) abort(cause error) {
	d.fire(errAborted, cause)
}

// pin keeps the context in use without a deadline, for handlers that may
// abort the read in progress.
func (d *deadline) pin() {
	d.pinned.Store(true)
	d.active.Store(true)
}

// takeCause returns and forgets the handler error that aborted an
// operation, or nil.
func (d *deadline) takeCause() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cause := d.cause
	if d.err == errAborted {
		d.err, d.done, d.cause = nil, nil, nil
	}
	return cause
}

func (d *deadline) fire(err, cause error) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		return
	}
	d.err, d.cause = err, cause
	if d.done == nil {
		d.done = make(chan struct{})
	}
	close(d.done)
	fs := d.afters
	d.afters = nil
	d.mu.Unlock()
	for _, a := range fs {
		a.f()
	}
}

// Deadline reports no fixed deadline: the time may still move.
func (d *deadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns the channel closed when the current operation must end.
func (d *deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done == nil {
		d.done = make(chan struct{})
		if d.err != nil {
			close(d.done)
		}
	}
	return d.done
}

// Err returns errDeadline or errAborted once Done is closed, else nil.
func (d *deadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Value returns nil: the context carries no values.
func (d *deadline) Value(any) any { return nil }

// AfterFunc lets context.AfterFunc register f without a goroutine of its
// own waiting on Done.
func (d *deadline) AfterFunc(f func()) (stop func() bool) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	d.nextID++
	id := d.nextID
	d.afters = append(d.afters, afterFunc{id, f})
	d.mu.Unlock()
	return func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, a := range d.afters {
			if a.id == id {
				d.afters = append(d.afters[:i], d.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}
