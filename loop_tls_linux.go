//go:build linux

package rally

import (
	"errors"
	"net"

	"github.com/rallyws/rally/internal/bufpool"
	"github.com/rallyws/rally/internal/netpoll"
)

// wss in the event loop (Server.EventLoop). A connection over rally's
// own TLS socket (NewTLSListener; Dial's wss://) keeps a tls.Conn, but
// once its handshakes are done the loop owns the socket beneath it, as it
// owns a plain one:
//
//   - The TLS and HTTP handshakes run where they run without loops: on
//     the goroutine Serve starts for a TLS listener's connection (or on
//     net/http's, for ServeHTTP), which ends once the 101 is written.
//     crypto/tls latches any error its handshake sees, a "would block"
//     included, so it cannot be driven a few bytes at a time by the loop;
//     a goroutine for the few round trips of a handshake costs nothing
//     once it is over, and the loop never waits for a slow client.
//   - Then the socket is taken from the Go runtime and registered in a
//     loop like any other (loopGroup.adopt). The tlsSocket beneath the
//     tls.Conn stays in engine mode, now over the loop's descriptor
//     (loopFd): its reads return errWouldBlock when the kernel has
//     nothing (which crypto/tls does not latch: a record cut by the end
//     of a read stays in its buffer), its writes go to its backlog.
//   - Reading: when the socket is readable the loop has crypto/tls
//     decrypt what arrived straight into the loop's buffer, records after
//     records, and runs the parser and callbacks over the plaintext as
//     over a plain socket's bytes. Records crypto/tls buffered before the
//     loop took the socket are delivered when it is registered.
//   - Writing: what a loop turn gathers for the connection is encrypted
//     (a small frame's header and payload in one record) and its
//     ciphertext written in one system call after the turn; a frame
//     counts as sent once all of its ciphertext is in the kernel
//     (tlsTransport's marks), and what the kernel refuses waits in the
//     socket's backlog until the loop sees the socket writable.
//
// An idle wss connection in a loop is thus its Conn, its loop
// registration and crypto/tls's own state (its record buffers and cipher
// states), with no goroutine and no rally buffer.

// loopTLSTransport is the transport of a TLS connection a loop owns: the
// loop's socket, with crypto/tls between it and the engine.
type loopTLSTransport struct {
	*loopTransport
	tt *tlsTransport
}

// loopFd is the syscall.RawConn of a loop-owned TLS socket: it calls
// back at once with the loop's descriptor and never waits (the loop does,
// in epoll). Callers hold the connection's write lock, or run on the loop.
type loopFd struct{ t *loopTransport }

func (r loopFd) Control(f func(fd uintptr)) error {
	if r.t.fd < 0 {
		return net.ErrClosed
	}
	f(uintptr(r.t.fd))
	return nil
}

func (r loopFd) Read(f func(fd uintptr) bool) error {
	return r.Control(func(fd uintptr) { f(fd) })
}

func (r loopFd) Write(f func(fd uintptr) bool) error {
	return r.Control(func(fd uintptr) { f(fd) })
}

// loopT returns c's loop transport, TLS or not, when a loop owns c.
func (c *Conn) loopT() (*loopTransport, bool) {
	switch t := c.t.(type) {
	case *loopTransport:
		return t, true
	case *loopTLSTransport:
		return t.loopTransport, true
	}
	return nil, false
}

// toLoopTLS moves c, a connection over rally's TLS socket, onto loop l,
// as toLoop does a plain one. It reports false, changing nothing, if a
// flushing goroutine writes already, ciphertext waits for the kernel, or
// the socket cannot be taken.
func (c *Conn) toLoopTLS(tt *tlsTransport, l *loop) bool {
	c.wr.mu.Lock()
	if c.wr.flushing || c.wr.err != nil || tt.ahead > 0 || tt.s.backlogged() {
		c.wr.mu.Unlock()
		return false
	}
	fd, err := netpoll.Take(tt.s.rc)
	if err != nil {
		c.wr.mu.Unlock()
		return false
	}
	orig := tt.s.Conn
	lt := &loopTransport{fd: int32(fd), c: c, l: l}
	lt.tag = uint64(l.gen.Add(1))<<32 | uint64(uint32(fd))
	lt.setAddrs(l, orig.LocalAddr(), orig.RemoteAddr())
	tt.s.rc = loopFd{lt}
	c.t = &loopTLSTransport{loopTransport: lt, tt: tt} // its netConn is lt: closing is the loop's, no close_notify, as tlsSocket.Close in engine mode
	c.drive()
	c.keepaliveToLoop(lt)
	c.wr.mu.Unlock()
	orig.Close() // the duplicate keeps the socket
	return true
}

// The transport methods. Writes are made under the connection's write
// lock; reads on the loop.

func (t *loopTLSTransport) tryWrite(a, b []byte) (int, error) {
	if t.fd < 0 {
		return 0, net.ErrClosed
	}
	t.l.writes.Add(1)
	n, err := t.tt.tryWrite(a, b)
	t.dropScratch()
	return n, err
}

func (t *loopTLSTransport) tryWritev(bufs [][]byte) (int, error) {
	if t.fd < 0 {
		return 0, net.ErrClosed
	}
	t.l.writes.Add(1)
	n, err := t.tt.tryWritev(bufs)
	t.dropScratch()
	return n, err
}

// dropScratch gives back the buffer a small frame was assembled in for
// its one record: an idle connection holds none.
func (t *loopTLSTransport) dropScratch() {
	if t.tt.scratch != nil {
		bufpool.Put(t.tt.scratch)
		t.tt.scratch = nil
	}
}

func (t *loopTLSTransport) aheadOfKernel() int { return t.tt.aheadOfKernel() }

// read decrypts what the socket has into the loop's buffer, as many
// records as fit, at most loopReadsPerEvent times per readiness event;
// errLoopDry says there is nothing more for now.
func (t *loopTLSTransport) read(*[]byte, int) (*[]byte, int, error) {
	lt := t.loopTransport
	lt.dropHeld() // see loopTransport.read
	if lt.reads == 0 || lt.fd < 0 || lt.l.left <= 0 {
		return nil, 0, errLoopDry
	}
	lt.writeCopies()
	lt.reads--
	t.tt.s.fd = uintptr(lt.fd)
	buf := lt.l.buf[:min(len(lt.l.buf), max(lt.l.left, lt.l.floor))] // the turn's share, as loopTransport.read
	n := 0
	var err error
	for n < len(buf) {
		var k int
		k, err = t.tt.tc.Read(buf[n:])
		n += k
		if err != nil {
			break
		}
	}
	t.flushReadBacklog()
	switch {
	case n > 0:
		// An error after the bytes is latched by crypto/tls (or is "would
		// block"): the next read returns it.
		lt.l.left -= n
		lt.l.read += n
		if n < len(buf) {
			lt.l.drained = true // the loop above ended with "would block"
		}
		if n == len(buf) && (lt.reads == 0 || lt.l.left <= 0) {
			// The event's share is used up with the buffer full:
			// crypto/tls may hold whole records the socket no longer
			// has, which epoll will not report. The loop resumes the
			// connection in its next turn.
			lt.yielded()
		}
		return &lt.l.buf, n, nil
	case errors.Is(err, errWouldBlock):
		lt.reads = 0
		lt.l.drained = true
		return nil, 0, errLoopDry
	}
	return nil, 0, err
}

// flushReadBacklog writes, without waiting, what a read made crypto/tls
// write (an alert, a KeyUpdate reply), unless the loop writes the queue
// already (it flushes the backlog first). What the kernel does not take
// now leaves before the next frame.
func (t *loopTLSTransport) flushReadBacklog() {
	if !t.tt.s.backlogged() {
		return
	}
	c := t.c
	c.wr.mu.Lock()
	if !c.wr.flushing && t.fd >= 0 {
		t.tt.flushBacklog()
	}
	c.wr.mu.Unlock()
}
