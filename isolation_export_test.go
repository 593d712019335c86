package rally

import "sync/atomic"

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

func (w *WriteCounter) writeNow(bufs [][]byte) (int, error) {
	w.calls.Add(1)
	n, err := w.transport.writeNow(bufs)
	w.count(n)
	return n, err
}

func (w *WriteCounter) write(p []byte) (int, error) {
	w.calls.Add(1)
	w.writing.Store(true)
	n, err := w.transport.write(p)
	w.writing.Store(false)
	w.count(n)
	return n, err
}
