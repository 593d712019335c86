package rally

import (
	"sync"
	"sync/atomic"
)

// WriteCounter counts the write attempts a connection makes on its
// transport: every non-blocking try, every gathered write of a flush, every
// blocking write of a stream.
type WriteCounter struct {
	transport
	calls   atomic.Int64
	written atomic.Int64
	writing atomic.Bool
}

// CountWritesForTest puts a WriteCounter between c and its transport. It
// must be called before c sends anything, from the goroutine that got c
// (a Server's Open, or right after ServerConnPairForTest).
func CountWritesForTest(c *Conn) *WriteCounter {
	w := &WriteCounter{transport: c.t}
	c.t = w
	return w
}

// Calls is the number of write attempts so far.
func (w *WriteCounter) Calls() int64 { return w.calls.Load() }

// Written is the number of bytes the transport took so far.
func (w *WriteCounter) Written() int64 { return w.written.Load() }

// Writing reports whether a blocking write is in progress.
func (w *WriteCounter) Writing() bool { return w.writing.Load() }

func (w *WriteCounter) count(n int) { w.written.Add(int64(n)) }

func (w *WriteCounter) tryWrite(a, b []byte) (int, error) {
	w.calls.Add(1)
	n, err := w.transport.tryWrite(a, b)
	w.count(n)
	return n, err
}

func (w *WriteCounter) tryWritev(bufs [][]byte) (int, error) {
	w.calls.Add(1)
	n, err := w.transport.tryWritev(bufs)
	w.count(n)
	return n, err
}

// flush counts the blocking writes of a transport that makes them (a
// stream); a socket's attempts inside it go through tryWritev.
func (w *WriteCounter) flush(lock *sync.Mutex, out outbox, wait bool) (bool, error) {
	return w.transport.flush(lock, countedOutbox{out, w}, wait)
}

type countedOutbox struct {
	outbox
	w *WriteCounter
}

func (o countedOutbox) claimSegment() []byte {
	o.w.calls.Add(1)
	o.w.writing.Store(true)
	return o.outbox.claimSegment()
}

func (o countedOutbox) wroteSegment(n int, err error) error {
	o.w.writing.Store(false)
	o.w.count(n)
	return o.outbox.wroteSegment(n, err)
}
