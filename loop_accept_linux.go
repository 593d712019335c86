//go:build linux

package rally

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rallyws/rally/internal/netpoll"
	"golang.org/x/sys/unix"
)

// Raw-listener handshakes in the event loops (Server.Serve with
// EventLoop). The goroutine that calls Serve accepts, as without loops,
// and hands each new socket to the least loaded loop at once: the socket
// is taken from the Go runtime (a duplicate descriptor, the net.Conn
// closed, as for a connection adopted after its handshake). The loop
// watches it in its epoll instance and feeds the request head to the
// resumable parser (requestParser) as its bytes arrive, with no goroutine
// and no buffer of its own: a read lands in the loop's buffer, and the
// parser keeps only the start of a line cut by the end of a read. The
// head's bounds are Upgrade's: its size (431 past it), its time (the
// loop's sweep gives up on heads that have not arrived, the defence
// against slowloris), and with a MemoryBudget its charge and the number
// of heads in progress. A complete head meets the same rules and hooks as
// in Upgrade (requestParser.answer) and a refused one gets the same
// answer, written by the loop, which then winds the socket down as
// lingerClose does. The 101 is written by the loop, the connection is
// built around the socket with a loopTransport and stays registered
// where it is, and the bytes read past the head are parsed first.
//
// Why Serve's goroutine accepts rather than a loop: Serve has to block
// until its listener is closed and return why, a loop runs only while it
// has connections, and a Go listener's descriptor cannot be waited on
// outside the Go runtime without a second owner for it. One accepting
// goroutine for all the loops costs nothing per connection; several
// listeners sharing a port with SO_REUSEPORT, one Serve each, spread
// accepting over cores.

// loopAccept is the head-reading state of one loop. Owned by the loop
// goroutine.
type loopAccept struct {
	byFd  []*loopHead // heads in progress (and lingering refusals) by descriptor
	order []*loopHead // the same, in the order they started, for the sweep
}

// loopHead is a socket whose request head a loop reads, or whose refusal
// it winds down. It is the net.Conn the handshake's request and the
// memory budget see: its addresses, and SetReadDeadline, with which the
// budget cuts the oldest head (the loop then answers it 503).
type loopHead struct {
	l    *loop
	srv  *Server
	opts *AcceptOptions
	fd   int
	tag  uint64

	local, remote net.Addr

	// Owned by the loop goroutine.
	p        requestParser
	timeout  time.Duration
	deadline int64 // unix ns: the head's, or the linger's
	pending  *pendingHead
	cost     int64
	charged  bool // counted by the budget: headDone not called yet
	started  bool
	linger   bool // answered with a refusal: dropping what the client still sends
	dropped  int
	closed   bool
}

// handshake hands nc, a connection Serve accepted, to the least loaded
// loop, which reads its request head and answers it. It reports false,
// leaving nc as it was, when nc is not a plain socket (a TLS listener's
// connection), no loop could be started, or the socket cannot be taken
// from the Go runtime: a goroutine then reads the head, as without loops.
// The handshake was counted in progress (set.begin).
func (grp *loopGroup) handshake(s *Server, nc net.Conn) bool {
	rc := rawConnOf(nc) // nil for a TLS connection
	if rc == nil {
		return false
	}
	grp.mu.Lock()
	l, err := grp.pick(s)
	if err != nil {
		grp.mu.Unlock()
		return false
	}
	l.n++ // the loop runs while the head is read
	grp.mu.Unlock()
	fd, err := netpoll.Take(rc)
	if err != nil {
		grp.mu.Lock()
		l.n--
		grp.mu.Unlock()
		l.wake() // a loop started for it stops again
		return false
	}
	opts := s.acceptOptions()
	if opts == nil {
		opts = &defaultAcceptOptions
	}
	h := &loopHead{l: l, srv: s, opts: opts, fd: fd, local: nc.LocalAddr(), remote: nc.RemoteAddr()}
	nc.Close() // the duplicate keeps the socket
	l.post(loopTask{h: h})
	return true
}

// defaultAcceptOptions are a nil Server.Options'.
var defaultAcceptOptions AcceptOptions

// headTask is a loop task about h: its start, or the budget cutting it.
func (l *loop) headTask(h *loopHead) {
	if !h.started {
		l.beginHead(h)
		return
	}
	if h.closed || h.linger || !h.charged {
		return // it ended meanwhile
	}
	if l.headEnded(h) {
		h.refuse(headsCut(), nil)
	}
}

// beginHead watches h's socket and reads what has arrived of its head.
func (l *loop) beginHead(h *loopHead) {
	h.started = true
	h.tag = uint64(l.gen.Add(1))<<32 | uint64(uint32(h.fd))
	acc := &l.acc
	for h.fd >= len(acc.byFd) {
		acc.byFd = append(acc.byFd, make([]*loopHead, max(64, len(acc.byFd)))...)
	}
	acc.byFd[h.fd] = h
	acc.order = append(acc.order, h)
	h.p.max = h.opts.MaxHeaderBytes
	if h.p.max <= 0 {
		h.p.max = DefaultMaxHeaderBytes
	}
	h.timeout = h.opts.HandshakeTimeout
	if h.timeout <= 0 {
		h.timeout = DefaultUpgradeTimeout
	}
	h.deadline = time.Now().Add(h.timeout).UnixNano()
	l.armSweep(h.timeout)
	if err := l.p.Add(h.fd, h.tag, false); err != nil {
		l.closeHead(h)
		h.opts.handshakeFailed(nil, fmt.Errorf("rally: accept: watching the socket: %w", err))
		return
	}
	// The head is charged at its largest: the loop reads it into its own
	// buffer, so what a head holds is what the parser keeps of it.
	h.cost = int64(h.p.max)
	budget := h.opts.MemoryBudget
	ph, rf := budget.admitHead(h, h.cost)
	if rf != nil {
		h.refuse(rf, nil)
		return
	}
	h.pending, h.charged = ph, budget != nil
	// A client sends its head right after connecting: it is most often
	// there already.
	l.readHead(h)
}

// headEnded gives back a head's charge to the budget and reports whether
// the budget had cut it (it must then be answered 503).
func (l *loop) headEnded(h *loopHead) (cut bool) {
	if !h.charged {
		return false
	}
	h.charged = false
	return h.opts.MemoryBudget.headDone(h.pending, h.cost)
}

// headEvent handles a readiness report for a head's socket.
func (l *loop) headEvent(h *loopHead) {
	if h.linger {
		l.dropRest(h)
		return
	}
	l.readHead(h)
}

// testHookHeadRead, when a test sets it, is told how many bytes of a head
// the loop has parsed after each read of it.
var testHookHeadRead atomic.Pointer[func(used int)]

// readHead feeds what the socket has to h's parser, and answers the head
// once it is complete or breaks a rule.
func (l *loop) readHead(h *loopHead) {
	for range loopReadsPerEvent {
		k, err := readFd(uintptr(h.fd), l.buf, loopRaw)
		if err == errAgain {
			return
		}
		if err == nil && k == 0 {
			err = io.EOF
		}
		if err != nil {
			if l.headEnded(h) {
				h.refuse(headsCut(), nil)
				return
			}
			l.closeHead(h)
			h.opts.handshakeFailed(nil, readRequestError(err, h.p.used, h.timeout))
			return
		}
		n, done, perr := h.p.feed(l.buf[:k])
		if hook := testHookHeadRead.Load(); hook != nil {
			(*hook)(h.p.used)
		}
		if perr != nil {
			l.headEnded(h)
			h.refuse(perr.(*refusalError).rf, nil)
			return
		}
		if done {
			l.answerHead(h, l.buf[n:k])
			return
		}
	}
}

// answerHead answers a complete head: a refusal, or the 101 and the
// connection, served by this loop from now on. rest is what followed the
// head in the loop's buffer.
func (l *loop) answerHead(h *loopHead, rest []byte) {
	if l.headEnded(h) {
		h.refuse(headsCut(), nil)
		return
	}
	opts := h.opts
	r, answer, n, rf := h.p.answer(h, opts)
	if rf != nil {
		h.refuse(rf, r)
		return
	}
	var iov [2]syscall.Iovec
	if k, err := writeFd(uintptr(h.fd), &iov, answer, nil, loopRaw); err != nil || k < len(answer) {
		// A new socket's send buffer takes a 101 whole: if it does not,
		// the client is gone or misbehaves.
		if err == nil || err == errAgain {
			err = io.ErrShortWrite
		}
		l.closeHead(h)
		opts.handshakeFailed(r, fmt.Errorf("rally: accept: writing the 101 response: %w", err))
		return
	}
	// The socket stays in epoll, under the same tag: it becomes the
	// connection's.
	l.acc.byFd[h.fd] = nil
	h.closed = true
	t := &loopTransport{fd: int32(h.fd), l: l, tag: h.tag, registered: true}
	t.setAddrs(l, h.local, h.remote)
	var buffered []byte
	if len(rest) > 0 {
		buffered = append([]byte(nil), rest...) // the loop's buffer is reused
	}
	c := startConn(t, buffered, true, n.subprotocol, &opts.ConnOptions)
	c.useLoopTransport(t)
	if n.ext != "" {
		c.enableCompression(opts.Compression, n.params)
	}
	c.setData(n.data)
	s := h.srv
	if !s.set.commit(c) {
		// Shutdown began during the handshake.
		c.closeWithCode(CloseGoingAway, "server shutting down")
	}
	l.register(t)
}

// useLoopTransport makes t, a socket this loop owns already, c's
// transport and net.Conn, as toLoop does for a connection handed over
// after its handshake.
func (c *Conn) useLoopTransport(t *loopTransport) {
	t.c = c
	c.t = t
	c.drive() // only the loop reads
	c.wr.mu.Lock()
	c.keepaliveToLoop(t)
	c.wr.mu.Unlock()
}

// refuse answers h with rf and winds the socket down as lingerClose
// does: the sending side is shut, and what the client still sends is
// dropped until it closes (bounded in bytes and time), so that the answer
// is not destroyed by a reset. The refusal is told to OnHandshakeError
// as Upgrade tells it (r is the request, if the head was well formed).
func (h *loopHead) refuse(rf *refusal, r *http.Request) {
	l := h.l
	b := appendRefusal(make([]byte, 0, 256), rf)
	var iov [2]syscall.Iovec
	writeFd(uintptr(h.fd), &iov, b, nil, loopRaw)
	if unix.Shutdown(h.fd, unix.SHUT_WR) != nil {
		l.closeHead(h)
	} else {
		h.linger = true
		h.deadline = time.Now().Add(lingerTime).UnixNano()
		l.dropRest(h)
	}
	h.opts.refused(r, &HandshakeError{Status: rf.status, Reason: rf.reason}, rf)
}

// dropRest reads and drops what a refused client still sends, until it
// closes or the bound is reached.
func (l *loop) dropRest(h *loopHead) {
	for range loopReadsPerEvent {
		k, err := readFd(uintptr(h.fd), l.buf, loopRaw)
		if err == errAgain {
			return
		}
		h.dropped += k
		if err != nil || k == 0 || h.dropped >= lingerBytes {
			l.closeHead(h)
			return
		}
	}
}

// closeHead closes the socket of a head that did not become a
// connection: the handshake is over.
func (l *loop) closeHead(h *loopHead) {
	if h.closed {
		return
	}
	h.closed = true
	l.p.Del(h.fd)
	unix.Close(h.fd)
	if h.fd < len(l.acc.byFd) && l.acc.byFd[h.fd] == h {
		l.acc.byFd[h.fd] = nil
	}
	l.headEnded(h)
	h.srv.set.commit(nil)
	l.grp.mu.Lock()
	l.n--
	l.grp.mu.Unlock()
}

// headOf returns the head a readiness report is about, or nil.
func (l *loop) headOf(fd int, tag uint64) *loopHead {
	if fd >= len(l.acc.byFd) {
		return nil
	}
	if h := l.acc.byFd[fd]; h != nil && h.tag == tag {
		return h
	}
	return nil
}

// sweepHeads gives up on the heads that have not arrived in time (and
// ends the refusals whose client did not close in time).
func (l *loop) sweepHeads(now time.Time) {
	acc := &l.acc
	if len(acc.order) == 0 {
		return
	}
	ns := now.UnixNano()
	keep := acc.order[:0]
	for _, h := range acc.order {
		if !h.closed && ns >= h.deadline {
			l.expireHead(h)
		}
		if !h.closed {
			keep = append(keep, h)
		}
	}
	clear(acc.order[len(keep):])
	acc.order = keep
}

// expireHead ends a head whose time is up.
func (l *loop) expireHead(h *loopHead) {
	if h.linger {
		l.closeHead(h)
		return
	}
	if l.headEnded(h) {
		h.refuse(headsCut(), nil)
		return
	}
	l.closeHead(h)
	h.opts.handshakeFailed(nil, readRequestError(os.ErrDeadlineExceeded, h.p.used, h.timeout))
}

// The net.Conn a head is to the handshake's rules and the budget.

func (h *loopHead) LocalAddr() net.Addr  { return h.local }
func (h *loopHead) RemoteAddr() net.Addr { return h.remote }

var errLoopHead = errors.New("rally: the event loop reads this connection's request head")

func (h *loopHead) Read([]byte) (int, error)    { return 0, errLoopHead }
func (h *loopHead) Write([]byte) (int, error)   { return 0, errLoopHead }
func (h *loopHead) Close() error                { return nil }
func (h *loopHead) SetDeadline(time.Time) error { return nil }
func (h *loopHead) SetWriteDeadline(time.Time) error {
	return nil
}

// SetReadDeadline is how the memory budget cuts the oldest head in
// progress (headQueue.start, from any goroutine): the loop answers it.
func (h *loopHead) SetReadDeadline(time.Time) error {
	h.l.post(loopTask{h: h})
	return nil
}
