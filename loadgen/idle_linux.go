//go:build linux

package loadgen

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rallyws/rally/internal/netpoll"
)

// pollHolder holds idle connections on one epoll instance, without a
// goroutine, a net.Conn or a read buffer each: what a connection costs
// the client is its socket, a descriptor and a few words here, so that
// one machine can hold as many connections to a server as the server
// holds (a goroutine blocked in a read costs several KiB of stack). It
// answers pings, counts pongs and reports data messages to the idle run
// as holdConn does. Its methods are safe concurrently.
type pollHolder struct {
	ir   *idleRun
	p    *netpoll.Poller
	done chan struct{} // closed when the loop has returned

	mu      sync.Mutex
	conns   []polledConn // by tag
	taken   map[net.Conn]struct{}
	closing bool
	buf     []byte // the loop's read buffer
}

// polledConn is one held connection.
type polledConn struct {
	fd   int  // -1 once closed
	got  bool // a data message arrived
	part []byte
	msg  []byte // a fragmented message's payload so far
	op   byte   // its opcode; 0 outside one
}

// newPollHolder starts a holder's loop; nil where epoll cannot be had
// (the run then holds a goroutine per connection).
func newPollHolder(ir *idleRun) *pollHolder {
	p, err := netpoll.New(256)
	if err != nil {
		return nil
	}
	h := &pollHolder{ir: ir, p: p, done: make(chan struct{}), taken: map[net.Conn]struct{}{}, buf: make([]byte, 64<<10)}
	go h.loop()
	return h
}

// take subscribes nc (if the run subscribes) and takes its socket over,
// closing nc; false (nc untouched) when nc is not a plain TCP connection
// (TLS, compression), which a goroutine then holds.
func (h *pollHolder) take(nc net.Conn, rest []byte) bool {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return false
	}
	rd := newReader(nc, smallBuffer, rest)
	rd.pongs, rd.pings = &h.ir.pongs, &h.ir.pings
	if !h.ir.subscribeOn(nc, rd) {
		return true // lost and counted; the run closes nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		h.ir.connLost(err)
		return true
	}
	fd, err := netpoll.Take(rc)
	if err != nil {
		h.ir.connLost(fmt.Errorf("taking the socket: %w", err))
		return true
	}
	nc.Close()
	// The WebSocket pings tell whether the peer is alive; the kernel's
	// keepalive probes (Go's dialer asks for one every 15 s) add a packet
	// each way per connection and interval, which at a million
	// connections overflows loopback's queue on a busy machine.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
	var part []byte
	if rd.w > rd.r {
		part = append(part, rd.buf[rd.r:rd.w]...)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.taken[nc] = struct{}{}
	if h.closing {
		unix.Close(fd)
		return true
	}
	tag := uint64(len(h.conns))
	h.conns = append(h.conns, polledConn{fd: fd, part: part})
	if err := h.p.Add(fd, tag, false); err != nil {
		unix.Close(fd)
		h.conns[tag].fd = -1
		h.ir.connLost(fmt.Errorf("epoll: %w", err))
		return true
	}
	if len(part) > 0 {
		h.consume(&h.conns[tag], nil)
	}
	return true
}

// forget drops from the run's list the connections taken over (closed
// already): the run holds no net.Conn for them.
func (h *pollHolder) forget(r *run) {
	h.mu.Lock()
	taken := h.taken
	h.taken = nil
	h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.conns[:0]
	for _, nc := range r.conns {
		if _, ok := taken[nc]; !ok {
			kept = append(kept, nc)
		}
	}
	clear(r.conns[len(kept):])
	r.conns = kept
}

// loop reads what arrives on the connections until close.
func (h *pollHolder) loop() {
	defer close(h.done)
	for {
		events, _, err := h.p.Wait(-1)
		h.mu.Lock()
		if h.closing || err != nil {
			h.mu.Unlock()
			return
		}
		for _, e := range events {
			if c := &h.conns[e.Tag]; c.fd >= 0 {
				h.read(c)
			}
		}
		h.mu.Unlock()
	}
}

// read reads what c's socket has and handles the frames complete in it.
func (h *pollHolder) read(c *polledConn) {
	n, err := unix.Read(c.fd, h.buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		h.lost(c, err)
		return
	case n == 0:
		h.lost(c, io.EOF)
		return
	}
	h.consume(c, h.buf[:n])
}

// consume handles c.part followed by b: every complete frame; what is
// left is kept in c.part for the next read. Called with h.mu held.
func (h *pollHolder) consume(c *polledConn, b []byte) {
	if len(c.part) > 0 {
		b = append(c.part, b...)
		c.part = nil
	}
	for len(b) > 0 {
		n, err := h.frame(c, b)
		if err != nil {
			h.lost(c, err)
			return
		}
		if n == 0 {
			c.part = append([]byte(nil), b...)
			return
		}
		b = b[n:]
	}
}

// frame handles the frame at the start of b and returns its length, or 0
// when b does not hold all of it yet.
func (h *pollHolder) frame(c *polledConn, b []byte) (int, error) {
	if len(b) < 2 {
		return 0, nil
	}
	b0, b1 := b[0], b[1]
	hlen, length := 2, uint64(b1&0x7F)
	switch length {
	case 126:
		hlen = 4
	case 127:
		hlen = 10
	}
	if len(b) < hlen {
		return 0, nil
	}
	switch length {
	case 126:
		length = uint64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		length = binary.BigEndian.Uint64(b[2:])
	}
	op, fin := b0&0x0F, b0&bitFin != 0
	switch {
	case b1&bitMask != 0:
		return 0, fmt.Errorf("%w: masked frame from the server", errProtocol)
	case b0&bitsRsv != 0:
		return 0, fmt.Errorf("%w: reserved bits %#x set on opcode %#x", errProtocol, b0&bitsRsv, op)
	case op >= opClose && (!fin || length > 125):
		return 0, fmt.Errorf("%w: control frame fragmented or longer than 125 bytes", errProtocol)
	case length > 1<<30:
		return 0, fmt.Errorf("%w: frame length %d", errProtocol, length)
	}
	end := hlen + int(length)
	if len(b) < end {
		return 0, nil
	}
	payload := b[hlen:end]
	switch op {
	case opPing:
		h.ir.pings.Add(1)
		// RFC 6455 5.5.2: answer with a pong carrying the same data.
		if _, err := unix.Write(c.fd, clientFrame(opPong, payload, [4]byte{})); err != nil && err != unix.EAGAIN {
			return 0, err
		}
	case opPong:
		h.ir.pongs.Add(1)
	case opClose:
		e := &closedError{}
		if len(payload) >= 2 {
			e.code = int(binary.BigEndian.Uint16(payload))
			e.reason = string(payload[2:])
		}
		return 0, e
	case opText, opBinary, opContinuation:
		switch {
		case op == opContinuation && c.op == 0:
			return 0, fmt.Errorf("%w: continuation frame outside a message", errProtocol)
		case op != opContinuation && c.op != 0:
			return 0, fmt.Errorf("%w: new message inside a fragmented one", errProtocol)
		case op != opContinuation && fin:
			h.ir.received(payload, &c.got)
		default:
			c.op = max(c.op, op)
			c.msg = append(c.msg, payload...)
			if fin {
				h.ir.received(c.msg, &c.got)
				c.op, c.msg = 0, nil
			}
		}
	default:
		return 0, fmt.Errorf("%w: reserved opcode %#x", errProtocol, op)
	}
	return end, nil
}

// lost closes c, counting it lost unless the run is ending.
func (h *pollHolder) lost(c *polledConn, err error) {
	h.p.Del(c.fd)
	unix.Close(c.fd)
	c.fd, c.part, c.msg = -1, nil, nil
	h.ir.connLost(err)
}

// ping sends frame on every slices-th connection from first.
func (h *pollHolder) ping(frame []byte, first, slices int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := first; i < len(h.conns); i += slices {
		if fd := h.conns[i].fd; fd >= 0 {
			unix.Write(fd, frame)
		}
	}
}

// close says goodbye (a close frame, code 1000, without waiting for the
// answer) on every connection, closes them and stops the loop.
func (h *pollHolder) close() {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return
	}
	h.closing = true
	for i := range h.conns {
		c := &h.conns[i]
		if c.fd >= 0 {
			unix.Write(c.fd, closeFrame)
			unix.Close(c.fd)
			c.fd = -1
		}
	}
	h.conns = nil
	h.mu.Unlock()
	h.p.Wake()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
	}
	h.p.Close()
}
