package rally

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/rallyws/rally/internal/bufpool"
)

// errAgain is a full socket buffer on write, or no data yet on read.
var errAgain = errors.New("rally: would block")

// transport is the one seam between a connection's engine and its bytes.
// The engine (parser, send queue, callbacks) is the same whatever sits
// below; a transport only moves bytes:
//
//   - socketTransport: a TCP or Unix socket rally reaches through
//     syscall.RawConn. Writes are non-blocking system calls from whichever
//     goroutine sends; reads wait for readability holding no buffer.
//   - tlsTransport: a tls.Conn over rally's own socket (tls.go): sends
//     keep the socket's contract, a frame taken once its ciphertext is in
//     the kernel.
//   - streamTransport: any other net.Conn (TLS made elsewhere, a pipe). It
//     cannot write without possibly blocking, so sends are queued and
//     written by a flushing goroutine; reads block in Read.
//   - loopTransport (loop_linux.go): a socket an event loop owns
//     (Server.EventLoop). Writes are non-blocking system calls; what the
//     kernel refuses is written by the loop when the socket is writable
//     (no flushing goroutine); reads are the loop's, into its buffer.
//     loopTLSTransport (loop_tls_linux.go) is the same with crypto/tls
//     between the loop's socket and the engine.
//
// Lock order: tryWrite runs under the connection's write lock and takes
// the socket's write lock inside RawConn.Write; flushQueue takes them the
// other way round (the write lock inside the socket's callback, so that a
// pong can go in between queued frames while it waits). That is safe
// because only one of them runs at a time: tryWrite is called only while
// no flusher runs (writeSide.flushing, checked under the write lock). A
// stream's write runs with no lock, on bytes the queue keeps still
// (sendQueue invariant 8).
type transport interface {
	// tryWrite writes what the transport takes at once of a then b,
	// without blocking, and returns how many bytes it took: 0 with a nil
	// error when it takes nothing now (backpressure, or a transport that
	// cannot try).
	tryWrite(a, b []byte) (int, error)

	// tryWritev is tryWrite for the slices of a gathered queue (at most
	// iovMax): one system call where the transport can make it.
	tryWritev(bufs [][]byte) (int, error)

	// write blocks until it has written some of p (all of it, for a
	// stream) or failed; it is used only where flushQueue reports false. An error caused by an expired write deadline
	// leaves the stream intact when resumable reports true.
	write(p []byte) (int, error)

	// canTry reports whether tryWrite really offers bytes to the kernel: a
	// transport that cannot write without possibly blocking takes nothing
	// from it, which says nothing of backpressure.
	canTry() bool

	// resumable reports whether a write cut short by a deadline can be
	// resumed later (a socket: each system call is whole) or has left the
	// stream in an unknown state (TLS latches the error).
	resumable() bool

	// flushQueue writes a queue as the transport becomes writable: it
	// calls step with lock held for each attempt (step writes with
	// writeNow and reports whether to stop; false waits for writability).
	// It reports false, doing nothing, when the transport has no
	// non-blocking write: the caller then uses write, outside the lock.
	flushQueue(lock *sync.Mutex, step func() bool) (bool, error)

	// writeNow is a non-blocking gathered write, valid only inside
	// flushQueue's step: (0, nil) when the kernel takes nothing now.
	writeNow(bufs [][]byte) (int, error)

	// aheadOfKernel is how many bytes at the head of what the transport
	// was last given it holds without the kernel having taken them (TLS:
	// encrypted, not all sent): they must be treated as started.
	aheadOfKernel() int

	// flushLater asks the transport to write the queue on its own once it
	// can take more, and reports whether it will: an event loop's socket
	// does, when the loop sees it writable; every other transport reports
	// false, and the queue is written by a flushing goroutine (or by the
	// sender). Called with the write lock held.
	flushLater() bool

	// flushBacklog writes without waiting what the transport produced on
	// its own (TLS alerts); called with no flushing goroutine running.
	flushBacklog()

	// read waits for bytes and returns them in buf, a buffer it borrowed
	// (or reused) for the caller; the caller gives it back with
	// bufpool.Put when it has used every byte. An idle connection's
	// socket transport holds no buffer while it waits.
	read(buf *[]byte) (*[]byte, int, error)
}

// newTransport picks the transport for nc.
func newTransport(nc net.Conn) transport {
	if t := tlsTransportOf(nc); t != nil {
		return t
	}
	if rc := rawConnOf(nc); rc != nil {
		t := &socketTransport{rc: rc}
		t.writeFn = t.doWrite
		t.readFn = t.doRead
		t.flushFn = t.doFlush
		return t
	}
	return &streamTransport{nc: nc}
}

// socketTransport does non-blocking system calls on a socket.
type socketTransport struct {
	rc syscall.RawConn

	// Arguments and results of the RawConn callbacks, kept here so that
	// the callbacks are made once and no call allocates.
	iov     [2]iovec
	a, b    []byte
	bufs    [][]byte // tryWritev's, instead of a and b
	n       int
	err     error
	writeFn func(fd uintptr) bool
	readFn  func(fd uintptr) bool

	// The read side's, owned by the reading goroutine.
	rbuf  *[]byte
	rsize int // bytes the next read asks for; 0: all of a readBufferSize buffer
	rn    int
	rerr  error

	// flushQueue's, owned by the flushing goroutine.
	flushFn func(fd uintptr) bool
	fstep   func() bool
	flock   *sync.Mutex
	ffd     uintptr
}

func (t *socketTransport) flushQueue(lock *sync.Mutex, step func() bool) (bool, error) {
	t.fstep, t.flock = step, lock
	err := t.rc.Write(t.flushFn)
	t.fstep, t.flock = nil, nil
	return true, err
}

func (t *socketTransport) doFlush(fd uintptr) bool {
	t.ffd = fd
	t.flock.Lock()
	stop := t.fstep()
	t.flock.Unlock()
	return stop
}

func (t *socketTransport) writeNow(bufs [][]byte) (int, error) {
	n, err := writevFd(t.ffd, bufs)
	if err == errAgain {
		return 0, nil
	}
	return n, err
}

func (t *socketTransport) tryWrite(a, b []byte) (int, error) {
	t.a, t.b = a, b
	err := t.rc.Write(t.writeFn)
	t.a, t.b = nil, nil
	if err != nil {
		return 0, err
	}
	if t.err == errAgain {
		return 0, nil
	}
	return t.n, t.err
}

func (t *socketTransport) tryWritev(bufs [][]byte) (int, error) {
	t.bufs = bufs
	err := t.rc.Write(t.writeFn)
	t.bufs = nil
	if err != nil {
		return 0, err
	}
	if t.err == errAgain {
		return 0, nil
	}
	return t.n, t.err
}

func (t *socketTransport) doWrite(fd uintptr) bool {
	if t.bufs != nil {
		t.n, t.err = writevFd(fd, t.bufs)
		return true
	}
	t.n, t.err = writeFd(fd, &t.iov, t.a, t.b)
	return true
}

// write is never called on a socket: it writes through flushQueue.
func (t *socketTransport) write([]byte) (int, error) {
	panic("rally: a socket transport writes through flushQueue")
}

func (t *socketTransport) resumable() bool { return true }

func (t *socketTransport) canTry() bool { return true }

func (t *socketTransport) aheadOfKernel() int { return 0 }

func (t *socketTransport) flushBacklog() {}

func (t *socketTransport) flushLater() bool { return false }

func (t *socketTransport) read(buf *[]byte) (*[]byte, int, error) {
	t.rbuf = buf
	t.rn, t.rerr = 0, nil
	err := t.rc.Read(t.readFn)
	buf = t.rbuf
	t.rbuf = nil
	if err == nil {
		err = t.rerr
	}
	if err != nil {
		bufpool.Put(buf)
		return nil, 0, err
	}
	if t.rn == 0 {
		bufpool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, t.rn, nil
}

// doRead borrows a buffer only once the socket has data, and gives it back
// before waiting.
func (t *socketTransport) doRead(fd uintptr) bool {
	if t.rbuf == nil || cap(*t.rbuf) < t.rsize {
		bufpool.Put(t.rbuf)
		t.rbuf = bufpool.Get(max(readBufferSize, t.rsize))
	}
	p := (*t.rbuf)[:cap(*t.rbuf)]
	if t.rsize > 0 {
		p = p[:t.rsize]
	}
	n, err := readFd(fd, p)
	if err == errAgain {
		bufpool.Put(t.rbuf)
		t.rbuf = nil
		return false
	}
	t.rn, t.rerr = n, err
	return true
}

// streamTransport is any net.Conn: TLS, a pipe.
type streamTransport struct {
	nc   net.Conn
	busy bool // the last read filled a large buffer: data keeps coming
}

// Read buffer sizes for a stream. A quiet connection waits with a small
// buffer; once reads fill it, the large one is kept until a read returns
// less than the small size again (no swapping on every read). A TLS record
// carries at most 16 KiB, so a larger buffer would never fill.
const (
	smallReadBufferSize  = 2 << 10
	streamReadBufferSize = 16 << 10
)

func (t *streamTransport) tryWrite(a, b []byte) (int, error) { return 0, nil }

func (t *streamTransport) tryWritev([][]byte) (int, error) { return 0, nil }

func (t *streamTransport) write(p []byte) (int, error) { return t.nc.Write(p) }

func (t *streamTransport) resumable() bool { return false }

func (t *streamTransport) canTry() bool { return false }

func (t *streamTransport) flushQueue(*sync.Mutex, func() bool) (bool, error) { return false, nil }

func (t *streamTransport) writeNow([][]byte) (int, error) { return 0, nil }

func (t *streamTransport) aheadOfKernel() int { return 0 }

func (t *streamTransport) flushBacklog() {}

func (t *streamTransport) flushLater() bool { return false }

func (t *streamTransport) read(buf *[]byte) (*[]byte, int, error) {
	size := smallReadBufferSize
	if t.busy {
		size = streamReadBufferSize
	}
	if buf != nil && cap(*buf) != size {
		bufpool.Put(buf)
		buf = nil
	}
	if buf == nil {
		buf = bufpool.Get(size)
	}
	for {
		n, err := t.nc.Read((*buf)[:cap(*buf)])
		if n > 0 {
			if n == cap(*buf) {
				t.busy = true
			} else if n < smallReadBufferSize {
				t.busy = false
			}
			return buf, n, nil
		}
		if err != nil {
			bufpool.Put(buf)
			return nil, 0, err
		}
	}
}
