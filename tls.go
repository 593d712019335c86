package rally

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rallyws/rally/internal/bufpool"
)

// TLS over rally's own non-blocking socket. crypto/tls writes through the
// net.Conn beneath it with a blocking Write and treats any write error as
// fatal, so a tls.Conn over a plain socket cannot say "the kernel took
// nothing now" without blocking the sender. rally therefore puts a
// tlsSocket between a tls.Conn and its TCP connection: during the TLS and
// HTTP handshakes it is the plain blocking socket; once the connection is a
// WebSocket, rally switches it to engine mode, where its Write never blocks
// and never fails (ciphertext the kernel does not take waits in the socket's
// backlog) and its Read returns a temporary error when no bytes are there,
// which crypto/tls does not latch (its partial record stays buffered). The
// tlsTransport then keeps the transport contract over TLS: a frame counts
// as taken only once all of its ciphertext is in the kernel.
//
// Dial uses it for wss:// URLs; a server gets it from NewTLSListener.
// With Server.EventLoop (Linux), the loops take such a connection once its
// handshakes are done and drive the same socket (loop_tls_linux.go).
// A tls.Conn made otherwise (http.ListenAndServeTLS) has a plain socket
// beneath it and takes the stream transport.

// errWouldBlock is a tlsSocket's read with no bytes there: temporary, so
// crypto/tls keeps its state and can be called again.
var errWouldBlock net.Error = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "rally: tls socket would block" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// NewTLSListener is tls.NewListener for servers whose connections rally
// upgrades: each accepted connection is a *tls.Conn as usual (net/http
// serves HTTP/1.1 over it, and r.TLS is set), but over a socket rally can
// drive without blocking, so WebSockets over it keep the send contract: a
// Send reports Sent when the kernel took the bytes and Queued only under
// backpressure, and no goroutine is started per flush. A Server with
// EventLoop (Linux) serves them on its event loops once their handshakes
// are done. Connections that are not plain TCP are wrapped by tls.Server
// as they are.
func NewTLSListener(inner net.Listener, config *tls.Config) net.Listener {
	return &tlsListener{Listener: inner, config: config}
}

type tlsListener struct {
	net.Listener
	config *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(newTLSSocket(nc), l.config), nil
}

// newTLSSocket wraps a TCP connection for a tls.Conn; other connections
// are returned as they are.
func newTLSSocket(nc net.Conn) net.Conn {
	rc := rawConnOf(nc)
	if rc == nil {
		return nc
	}
	s := &tlsSocket{Conn: nc, rc: rc}
	s.flushNowFn = s.doFlushNow
	s.flushWaitFn = s.doFlushWait
	return s
}

// tlsSocket is the net.Conn beneath a tls.Conn that rally drives.
type tlsSocket struct {
	net.Conn
	rc     syscall.RawConn
	engine atomic.Bool

	// Engine mode's read: the fd of the RawConn.Read callback rally's
	// reader runs crypto/tls inside.
	fd uintptr

	mu          sync.Mutex // guards what follows: tls writes from the reader (alerts, KeyUpdate) and the writers
	out         *[]byte    // ciphertext the kernel has not taken
	off         int        // bytes of out taken
	produced    uint64     // ciphertext bytes written by crypto/tls, ever
	taken       uint64     // of those, bytes the kernel took
	err         error      // the socket's write error, once one happened
	flushNowFn  func(fd uintptr) bool
	flushWaitFn func(fd uintptr) bool
	iov         [2]iovec
}

// Read is the socket's own in blocking mode. In engine mode it runs inside
// the reader's RawConn.Read callback and never waits.
func (s *tlsSocket) Read(p []byte) (int, error) {
	if !s.engine.Load() {
		return s.Conn.Read(p)
	}
	n, err := readFd(s.fd, p, false)
	if err == errAgain {
		return 0, errWouldBlock
	}
	if err != nil {
		return 0, err
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Write is the socket's own in blocking mode. In engine mode it takes every
// byte: what the kernel does not take at once waits in the backlog.
func (s *tlsSocket) Write(p []byte) (int, error) {
	if !s.engine.Load() {
		return s.Conn.Write(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.produced += uint64(len(p))
	if s.out == nil {
		s.out = bufpool.Get(len(p))
	}
	*s.out = append(*s.out, p...)
	return len(p), nil
}

// backlog is how many ciphertext bytes wait for the kernel.
func (s *tlsSocket) backlogLocked() int {
	if s.out == nil {
		return 0
	}
	return len(*s.out) - s.off
}

// flush writes the backlog without waiting (wait false), or until it is
// empty or the socket fails (wait true; an expired write deadline ends the
// wait with its error). s.mu is taken inside the RawConn callback, never
// held across the wait: crypto/tls may write (an alert) meanwhile.
func (s *tlsSocket) flush(wait bool) error {
	s.mu.Lock()
	empty, err := s.backlogLocked() == 0, s.err
	s.mu.Unlock()
	if err != nil || empty {
		return err
	}
	fn := s.flushNowFn
	if wait {
		fn = s.flushWaitFn
	}
	if err := s.rc.Write(fn); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *tlsSocket) doFlushNow(fd uintptr) bool  { return s.doFlush(fd, false) }
func (s *tlsSocket) doFlushWait(fd uintptr) bool { return s.doFlush(fd, true) }

// doFlush runs inside RawConn.Write: it writes what the kernel takes, and
// asks to wait for writability (false) while bytes remain, if told to.
func (s *tlsSocket) doFlush(fd uintptr, wait bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.backlogLocked() > 0 {
		n, err := writeFd(fd, &s.iov, (*s.out)[s.off:], nil, false)
		if err == errAgain {
			return !wait
		}
		if err != nil {
			s.err = err
			return true
		}
		s.off += n
		s.taken += uint64(n)
	}
	bufpool.Put(s.out)
	s.out, s.off = nil, 0
	return true
}

// backlogged reports whether ciphertext waits for the kernel.
func (s *tlsSocket) backlogged() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backlogLocked() > 0
}

// Close closes the socket at once. In engine mode what waits in the
// backlog (a close_notify alert, in particular) is dropped: a flush could
// wait behind a flusher blocked on a peer that stopped reading, and the
// WebSocket close handshake has already ended the conversation.
func (s *tlsSocket) Close() error { return s.Conn.Close() }

// tlsTransport is the transport of a tls.Conn over a tlsSocket.
type tlsTransport struct {
	tc *tls.Conn
	s  *tlsSocket

	// Plaintext handed to crypto/tls whose ciphertext is not all in the
	// kernel yet: ahead bytes, as marks in the order written.
	ahead   int
	marks   []tlsMark
	scratch *[]byte

	rbuf  *[]byte
	rn    int
	rerr  error
	readF func(fd uintptr) bool
	yield readYield
}

// tlsMark: once the kernel has taken cipherEnd bytes, plain more bytes of
// plaintext have left.
type tlsMark struct {
	cipherEnd uint64
	plain     int
}

// tlsTransportOf returns the TLS transport for nc when it is a tls.Conn
// over a tlsSocket, switching the socket to engine mode; else nil.
func tlsTransportOf(nc net.Conn) transport {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return nil
	}
	s, ok := tc.NetConn().(*tlsSocket)
	if !ok {
		return nil
	}
	s.engine.Store(true)
	t := &tlsTransport{tc: tc, s: s}
	t.readF = t.doRead
	return t
}

// skip drops from a and b the plaintext crypto/tls already has.
func (t *tlsTransport) skip(a, b []byte) ([]byte, []byte) {
	k := t.ahead
	if k >= len(a) {
		k -= len(a)
		a = nil
	} else {
		a = a[k:]
		k = 0
	}
	if k >= len(b) {
		b = nil
	} else {
		b = b[k:]
	}
	return a, b
}

// encrypt hands a then b to crypto/tls (whose records land in the
// socket's backlog) and marks where their ciphertext ends.
func (t *tlsTransport) encrypt(a, b []byte) error {
	n := len(a) + len(b)
	if n == 0 {
		return nil
	}
	if len(a) > 0 && len(b) > 0 && n <= 16<<10 {
		// One record for a small frame's header and payload.
		if t.scratch == nil {
			t.scratch = bufpool.Get(16 << 10)
		}
		buf := append(append((*t.scratch)[:0], a...), b...)
		if _, err := t.tc.Write(buf); err != nil {
			return err
		}
	} else {
		for _, p := range [2][]byte{a, b} {
			if len(p) > 0 {
				if _, err := t.tc.Write(p); err != nil {
					return err
				}
			}
		}
	}
	t.s.mu.Lock()
	end := t.s.produced
	t.s.mu.Unlock()
	t.ahead += n
	t.marks = append(t.marks, tlsMark{cipherEnd: end, plain: n})
	return nil
}

// confirm returns how many more plaintext bytes have all their ciphertext
// in the kernel.
func (t *tlsTransport) confirm() int {
	t.s.mu.Lock()
	taken := t.s.taken
	t.s.mu.Unlock()
	n, i := 0, 0
	for ; i < len(t.marks) && t.marks[i].cipherEnd <= taken; i++ {
		n += t.marks[i].plain
	}
	t.marks = t.marks[:copy(t.marks, t.marks[i:])]
	t.ahead -= n
	return n
}

func (t *tlsTransport) tryWrite(a, b []byte) (int, error) {
	if err := t.s.flush(false); err != nil {
		return 0, err
	}
	t.s.mu.Lock()
	idle := t.s.backlogLocked() == 0
	t.s.mu.Unlock()
	if idle {
		a, b = t.skip(a, b)
		if err := t.encrypt(a, b); err != nil {
			return 0, err
		}
		if err := t.s.flush(false); err != nil {
			return 0, err
		}
	}
	return t.confirm(), nil
}

// tlsBlocking is a tlsTransport's blocking write, the io.Writer of its
// flush: it returns once some of p is all in the kernel.
type tlsBlocking tlsTransport

func (b *tlsBlocking) Write(p []byte) (int, error) {
	t := (*tlsTransport)(b)
	for {
		t.s.mu.Lock()
		idle := t.s.backlogLocked() == 0
		t.s.mu.Unlock()
		if idle {
			rest, _ := t.skip(p, nil)
			if err := t.encrypt(rest, nil); err != nil {
				return 0, err
			}
		}
		if err := t.s.flush(true); err != nil {
			return 0, err
		}
		if n := t.confirm(); n > 0 || len(t.marks) == 0 {
			return n, nil
		}
	}
}

// flush writes one chunk of the queue with a blocking write (tlsBlocking),
// outside the lock.
func (t *tlsTransport) flush(lock *sync.Mutex, out outbox, wait bool) (bool, error) {
	if !wait {
		return false, nil
	}
	return false, writeSegment(lock, out, (*tlsBlocking)(t))
}

// tryWritev hands crypto/tls the first two slices: it encrypts what it is
// given into records, so a longer gather would save no system call.
func (t *tlsTransport) tryWritev(bufs [][]byte) (int, error) {
	switch len(bufs) {
	case 0:
		return 0, nil
	case 1:
		return t.tryWrite(bufs[0], nil)
	}
	return t.tryWrite(bufs[0], bufs[1])
}

func (t *tlsTransport) canTry() bool { return true }

func (t *tlsTransport) netConn() net.Conn { return t.tc }

// resumable: crypto/tls never saw the deadline (the socket's Write does not
// fail), so a cut wait leaves the stream whole.
func (t *tlsTransport) resumable() bool { return true }

// aheadOfKernel is plaintext crypto/tls has whose ciphertext is not all
// in the kernel: the queue treats those bytes as started.
func (t *tlsTransport) aheadOfKernel() int { return t.ahead }

// yieldInflating is false: a goroutine reads the connection (a
// loop's TLS socket answers as the loop does, see loopTLSTransport).
func (t *tlsTransport) yieldInflating(int) bool { return false }

// backlogged reports whether ciphertext waits for the kernel (see
// backlogWriter).
func (t *tlsTransport) backlogged() bool { return t.s.backlogged() }

// flushBacklog writes, without waiting, ciphertext that a read made
// crypto/tls produce (an alert, a KeyUpdate reply). The connection calls it
// when no flushing goroutine holds the socket's write side.
func (t *tlsTransport) flushBacklog() {
	if t.s.backlogged() {
		t.s.flush(false)
	}
}

func (t *tlsTransport) read(buf *[]byte, size int) (*[]byte, int, error) {
	t.rbuf = buf
	t.rn, t.rerr = 0, nil
	err := t.s.rc.Read(t.readF)
	buf = t.rbuf
	t.rbuf = nil
	if err == nil {
		err = t.rerr
	}
	if err != nil {
		bufpool.Put(buf)
		return nil, 0, err
	}
	t.yield.after(size, t.rn, t.rn == cap(*buf))
	return buf, t.rn, nil
}

// doRead runs crypto/tls's Read inside RawConn.Read: it borrows a buffer
// only when the socket has bytes, and waits for readability holding none.
func (t *tlsTransport) doRead(fd uintptr) bool {
	t.s.fd = fd
	if t.rbuf == nil {
		t.rbuf = bufpool.Get(streamReadBufferSize)
	}
	n, err := t.tc.Read((*t.rbuf)[:cap(*t.rbuf)])
	if n == 0 && errors.Is(err, errWouldBlock) {
		bufpool.Put(t.rbuf)
		t.rbuf = nil
		t.yield.waited()
		return false
	}
	if n > 0 {
		err = nil
	}
	t.rn, t.rerr = n, err
	return true
}
