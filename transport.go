package rally

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
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
// the socket's write lock inside RawConn.Write; a socket's flush takes them
// the other way round (the write lock inside the socket's callback, so
// that a pong can go in between queued frames while it waits). That is
// safe because only one of them runs at a time: tryWrite is called only
// while no flusher runs (writeSide.flushing, checked under the write
// lock), or from inside flush's own callback. A stream's blocking write
// runs with no lock, on bytes the queue keeps still (sendQueue invariant
// 8).
type transport interface {
	// tryWrite writes what the transport takes at once of a then b,
	// without blocking, and returns how many bytes it took: 0 with a nil
	// error when it takes nothing now (backpressure, or a transport that
	// cannot write without blocking: see canTry).
	tryWrite(a, b []byte) (int, error)

	// tryWritev is tryWrite for the slices of a gathered queue (at most
	// iovMax): one system call where the transport can make it.
	tryWritev(bufs [][]byte) (int, error)

	// canTry reports whether tryWrite really offers bytes to the kernel: a
	// transport that cannot write without possibly blocking (a stream)
	// takes nothing from it, which says nothing of backpressure.
	canTry() bool

	// flush has what out holds written once tryWrite took less than all
	// of it: the one way the queue's rest reaches the transport. Called
	// with lock (the connection's write lock) held; returns with it held.
	//
	// A transport whose owner writes the queue when it becomes writable
	// (an event loop's socket) arranges that and reports later, at once,
	// whatever wait says: no goroutine waits for it. Any other transport
	// needs a goroutine that may wait: without wait it does nothing and
	// reports later false (the caller then starts a flushing goroutine,
	// or writes on its own); with wait it writes on the calling goroutine,
	// releasing lock while it waits for the transport, until out says stop
	// (a socket: non-blocking attempts, out.flushStep, each time it is
	// writable) or one chunk has gone (a stream: a blocking write of
	// out.claimSegment).
	flush(lock *sync.Mutex, out outbox, wait bool) (later bool, err error)

	// resumable reports whether a write cut short by a deadline can be
	// resumed later (a socket: each system call is whole) or has left the
	// stream in an unknown state (TLS made elsewhere latches the error).
	resumable() bool

	// aheadOfKernel is how many bytes at the head of what the transport
	// was last given it holds without the kernel having taken them (TLS:
	// encrypted, not all sent; 0 for the others): they must be treated
	// as started.
	aheadOfKernel() int

	// read waits for bytes and returns them in buf, a buffer it borrowed
	// (or reused) for the caller; the caller gives it back with
	// bufpool.Put when it has used every byte. size is what the parser
	// would like to read at once (0: no wish; see readsize.go): a socket
	// reads that much; a TLS or stream transport, which reads 16 KiB at
	// most (a TLS record), learns from it only that large frames arrive
	// (see readYield); an event loop's reads into its own buffer. An idle
	// connection's socket transport holds no buffer while it waits. A
	// transport whose owner drives the reads (an event loop) returns
	// errLoopDry when what arrived is used up, instead of waiting. A
	// reading goroutine's read may let the other goroutines run first
	// (readYield).
	read(buf *[]byte, size int) (*[]byte, int, error)

	// yieldInflating is asked by the reader before each piece it inflates
	// of a compressed message, told the bytes the previous piece gave (0
	// after new input): it reports whether the reader stops here and
	// returns errLoopDry, to be read again later. A transport whose owner
	// shares its turn among connections (an event loop) says yes once the
	// connection has inflated its share, and keeps the input left for the
	// next read; one read by a goroutine of the connection's own never
	// yields (the scheduler shares the machine).
	yieldInflating(n int) bool

	// netConn is the connection the transport moves bytes over, as the
	// Conn's addresses, deadlines and Close see it.
	netConn() net.Conn
}

// outbox is a connection's send queue as its transport's flush sees it.
// Every method is called with the connection's write lock held.
type outbox interface {
	// flushStep writes what the transport takes now (tryWritev), and
	// reports whether to stop; false waits for the transport to become
	// writable.
	flushStep() bool

	// claimSegment returns the next bytes for a blocking write, kept
	// still until wroteSegment.
	claimSegment() []byte

	// wroteSegment records that the blocking write of the claimed bytes
	// took n of them, or failed with err, and returns the error to
	// report (nil if the queue failed meanwhile and the write is moot).
	wroteSegment(n int, err error) error
}

// backlogWriter is a transport that can produce bytes on its own while
// it reads (TLS: an alert, a KeyUpdate reply). The reader has them
// written when no flusher runs.
type backlogWriter interface {
	backlogged() bool
	flushBacklog()
}

// newTransport picks the transport for nc.
func newTransport(nc net.Conn) transport {
	if t := tlsTransportOf(nc); t != nil {
		return t
	}
	if rc := rawConnOf(nc); rc != nil {
		t := &socketTransport{rc: rc, nc: nc}
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
	nc net.Conn

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
	yield readYield

	// flush's, owned by the flushing goroutine. inFlush and ffd are
	// written under the connection's write lock: tryWritev called from
	// out.flushStep writes on the descriptor of flush's own callback
	// (RawConn.Write does not nest).
	flushFn func(fd uintptr) bool
	out     outbox
	flock   *sync.Mutex
	ffd     uintptr
	inFlush bool
}

// flush waits in RawConn.Write for writability and runs out.flushStep
// under lock each time the socket is writable.
func (t *socketTransport) flush(lock *sync.Mutex, out outbox, wait bool) (bool, error) {
	if !wait {
		return false, nil
	}
	t.out, t.flock = out, lock
	lock.Unlock()
	err := t.rc.Write(t.flushFn)
	lock.Lock()
	t.out, t.flock = nil, nil
	return false, err
}

func (t *socketTransport) doFlush(fd uintptr) bool {
	t.flock.Lock()
	t.ffd, t.inFlush = fd, true
	stop := t.out.flushStep()
	t.inFlush = false
	t.flock.Unlock()
	return stop
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
	if t.inFlush {
		n, err := writevFd(t.ffd, bufs, false)
		if err == errAgain {
			return 0, nil
		}
		return n, err
	}
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
		t.n, t.err = writevFd(fd, t.bufs, false)
		return true
	}
	t.n, t.err = writeFd(fd, &t.iov, t.a, t.b, false)
	return true
}

func (t *socketTransport) resumable() bool { return true }

func (t *socketTransport) canTry() bool { return true }

func (t *socketTransport) netConn() net.Conn { return t.nc }

func (t *socketTransport) aheadOfKernel() int { return 0 }

// yieldInflating is false: a goroutine reads the connection.
func (t *socketTransport) yieldInflating(int) bool { return false }

func (t *socketTransport) read(buf *[]byte, size int) (*[]byte, int, error) {
	size = t.yield.limit(size)
	t.rsize = size
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
	t.yield.after(t.rsize, t.rn, t.rn == t.rsize)
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
	n, err := readFd(fd, p, false)
	if err == errAgain {
		bufpool.Put(t.rbuf)
		t.rbuf = nil
		t.yield.waited()
		return false
	}
	t.rn, t.rerr = n, err
	return true
}

// readYield is when a reading goroutine (goroutine mode, whatever its
// transport) lets the others run. One whose peer streams large messages
// as fast as it can would read on without parking until the scheduler
// preempts it (10 ms): a thousand of them kept a fresh client's goroutine
// waiting for seconds. So a read that fills its buffer with large frames
// (the parser asked for more than readBufferSize, readsize.go) and follows
// another such read lets the others run first once the reads of that run
// have brought readAhead bytes since the goroutine last did, as an event
// loop shares out a turn (loopTurnBytes). A socket's reads of large frames
// take readAhead at once, so from the second on it yields before each; a
// stream's (TLS, HTTP/2) take 16 KiB at most, so it yields every sixteen,
// not at each: readers that took turns every 64 KiB grew every message at
// once, and the memory budget shed nearly all of them. Reads of small
// messages never yield: a peer that pipelines them fills every read, and
// yielding cost chat a third. Nor does a read that had to wait: the peer
// is not ahead.
type readYield struct {
	n      int32 // bytes the full reads of large frames in a row brought since the last yield
	full   bool  // the last read was one
	capped bool  // the read under way was capped at streamFirstShare (limit)
}

// streamFirstShare is what the first read of a large frame takes (the
// first after a read of small ones, or after waiting) while streamGate is
// full: other readers whose peers stream wait for their turn. It then
// takes its turn after them, as an event loop serves a connection's first
// delivery (loopFirstShare). Without it, a thousand clients that connect
// and stream at once were a thousand reads of 256 KiB ahead of a fresh
// client. When the gate has room, the first read takes what the parser
// asks, as before.
const streamFirstShare = 4 << 10

// limit is told the size of the next read, and returns what it may take.
func (y *readYield) limit(size int) int {
	if size > readBufferSize && !y.full && len(streamGate) == cap(streamGate) {
		y.capped = true
		if h := testHookStreamFirstShare.Load(); h != nil {
			(*h)()
		}
		return streamFirstShare
	}
	return size
}

// after is told of each read: the size the parser asked for, the bytes
// read, and whether they filled the buffer. It lets the others run
// (runtime.Gosched) when the rule says so.
func (y *readYield) after(size, n int, filled bool) {
	if y.capped {
		y.capped = false
		if filled {
			// Its peer is streaming: it waits for a turn before reading on.
			y.full = true
			y.turn()
			return
		}
		*y = readYield{}
		return
	}
	if size <= readBufferSize || !filled {
		*y = readYield{}
		return
	}
	y.n += int32(n)
	if y.full && y.n >= readAhead {
		y.turn()
	}
	y.full = true
}

// turn lets the others run: the goroutine waits for its next turn in the
// scheduler's run queue, once streamGate lets it in.
func (y *readYield) turn() {
	streamGate <- struct{}{}
	if h := testHookStreamYield.Load(); h != nil {
		(*h)()
	}
	runtime.Gosched()
	<-streamGate
	y.n = 0
}

// streamGate holds the readers that let the others run (readYield) and
// wait in the scheduler's run queue for their next turn: at most one a
// processor (GOMAXPROCS when the process started). The others wait to
// enter, parked, in order. A yielding goroutine goes to the back of the
// run queue all the processors share, which is also where the goroutines
// the network wakes go: a thousand readers whose peers streamed messages
// of 1 MiB − 1 were a thousand turns of 256 KiB ahead of a fresh client's
// accept, its request and its echo, each (0.3-0.7 s at p99 on 2 cores).
// Through the gate a woken goroutine waits behind a processor's worth of
// them at most. The gate is held only while the reader waits for its
// turn, never across a read or a callback, so a slow callback cannot
// keep the others out.
var streamGate = make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))

// waited is told that a read found no bytes and waits for them.
func (y *readYield) waited() { *y = readYield{} }

// testHookStreamYield, when a test sets it, is called each time a
// reading goroutine lets others run (readYield).
var testHookStreamYield atomic.Pointer[func()]

// testHookStreamFirstShare, when a test sets it, is called when a read
// is capped at streamFirstShare.
var testHookStreamFirstShare atomic.Pointer[func()]

// streamTransport is any net.Conn: TLS, a pipe.
type streamTransport struct {
	nc    net.Conn
	yield readYield
	busy  bool // the last read filled a large buffer: data keeps coming
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

func (t *streamTransport) resumable() bool { return false }

func (t *streamTransport) canTry() bool { return false }

func (t *streamTransport) netConn() net.Conn { return t.nc }

// flush writes one chunk of the queue with a blocking write, outside the
// lock.
func (t *streamTransport) flush(lock *sync.Mutex, out outbox, wait bool) (bool, error) {
	if !wait {
		return false, nil
	}
	return false, writeSegment(lock, out, t.nc)
}

// writeSegment is a blocking transport's flush: one segment of the queue,
// written to w with lock released.
func writeSegment(lock *sync.Mutex, out outbox, w io.Writer) error {
	p := out.claimSegment()
	lock.Unlock()
	n, err := w.Write(p)
	lock.Lock()
	return out.wroteSegment(n, err)
}

func (t *streamTransport) aheadOfKernel() int { return 0 }

// yieldInflating is false: a goroutine reads the connection.
func (t *streamTransport) yieldInflating(int) bool { return false }

func (t *streamTransport) read(buf *[]byte, size int) (*[]byte, int, error) {
	bufSize := smallReadBufferSize
	if t.busy {
		bufSize = streamReadBufferSize
	}
	if buf != nil && cap(*buf) != bufSize {
		bufpool.Put(buf)
		buf = nil
	}
	if buf == nil {
		buf = bufpool.Get(bufSize)
	}
	for {
		n, err := t.nc.Read((*buf)[:cap(*buf)])
		if n > 0 {
			if n == cap(*buf) {
				t.busy = true
			} else if n < smallReadBufferSize {
				t.busy = false
			}
			t.yield.after(size, n, n == cap(*buf))
			return buf, n, nil
		}
		if err != nil {
			bufpool.Put(buf)
			return nil, 0, err
		}
	}
}
