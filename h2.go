package rally

// WebSockets over HTTP/2 (RFC 8441), server side: an extended CONNECT
// stream with :protocol websocket becomes a Conn. The stream is wrapped as
// a net.Conn (h2Stream) and runs the same engine as a TLS connection does;
// only the opening handshake and the way the stream ends differ.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrHTTP2Disabled is CheckHTTP2's error: the servers of this process do
// not advertise extended CONNECT, so no client can open a WebSocket over
// HTTP/2 with them.
var ErrHTTP2Disabled = errors.New("rally: WebSockets over HTTP/2 are off: net/http advertises extended CONNECT (RFC 8441) only when the process starts with GODEBUG=http2xconnect=1 in its environment")

// xconnect is what net/http decided when it initialised: it reads the
// environment's GODEBUG once, in its init, and looks for this substring
// (it is not a registered setting, so a //go:debug line cannot set it).
// rally imports net/http, so net/http's init ran just before this one.
var xconnect = strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1")

// CheckHTTP2 reports whether the net/http servers of this process accept
// WebSockets over HTTP/2: nil when they advertise extended CONNECT
// (SETTINGS_ENABLE_CONNECT_PROTOCOL), ErrHTTP2Disabled when they do not.
// net/http (Go 1.26) turns it on only when the process starts with
// GODEBUG=http2xconnect=1 in its environment; setting the variable from
// the program itself is too late. The client side (DialOptions.HTTP2)
// does not depend on it.
func CheckHTTP2() error {
	if !xconnect {
		return ErrHTTP2Disabled
	}
	return nil
}

// warnedHTTP2Off makes the log line about the missing setting appear once
// per process.
var warnedHTTP2Off atomic.Bool

// acceptH2 is Accept for an HTTP/2 request (RFC 8441 sections 4 and 5):
// an extended CONNECT with :protocol websocket, Sec-WebSocket-Version 13,
// subprotocols and extensions negotiated as over HTTP/1.1, no key and no
// accept header, and 200 instead of 101. The stream's DATA frames carry
// the WebSocket's bytes.
func acceptH2(w http.ResponseWriter, r *http.Request, opts *AcceptOptions) (*Conn, error) {
	q := upgradeRequestOf(r)
	n, rf := opts.negotiate(r, &q, w.Header(), q.checkExtendedConnect(opts, r.URL.Path))
	if rf != nil {
		refuseH2(w, rf)
		return nil, opts.refused(r, &HandshakeError{Status: rf.status, Reason: rf.reason}, rf)
	}

	// The stream is charged before it is held; the charge goes back
	// when the stream closes (the Conn ends, or the TCP connection under
	// it goes away).
	budget := opts.MemoryBudget
	conn := h2ConnKeyOf(r)
	if !budget.charge(MemoryStreams, h2StreamCost) {
		rf := memoryBusy()
		refuseH2(w, rf)
		return nil, opts.refused(r, &HandshakeError{Status: rf.status, Reason: rf.reason}, rf)
	}
	if !budget.openH2Stream(conn, h2ConnCost(r)) {
		budget.release(MemoryStreams, h2StreamCost)
		rf := memoryBusy()
		refuseH2(w, rf)
		return nil, opts.refused(r, &HandshakeError{Status: rf.status, Reason: rf.reason}, rf)
	}
	rc := http.NewResponseController(w)
	// Server.ReadTimeout and WriteTimeout apply to each HTTP/2 stream, and
	// a write deadline that fires resets the stream: a long-lived
	// WebSocket must not have them.
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	for name := range responseManaged {
		delete(h, name)
	}
	if n.subprotocol != "" {
		h.Set("Sec-WebSocket-Protocol", n.subprotocol)
	}
	if n.ext != "" {
		h.Set("Sec-WebSocket-Extensions", n.ext)
	}
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		budget.release(MemoryStreams, h2StreamCost)
		budget.closeH2Stream(conn)
		return nil, opts.handshakeFailed(r, fmt.Errorf("rally: accept: sending the 200 response: %w", err))
	}
	s := newH2Stream(r.Body, w, rc, localAddrOf(r), remoteAddrOf(r))
	s.budget, s.conn = budget, conn
	c := startConn(s, nil, true, n.subprotocol, &opts.ConnOptions)
	// A Server reads on the handler's goroutine and never sets a read
	// deadline (it ends a connection by closing it): its streams read the
	// body directly, without the goroutine and the buffer of the pump.
	s.r.direct = c.driven
	s.r.onPump = s.chargePump
	if n.ext != "" {
		c.enableCompression(opts.Compression, n.params)
	}
	c.setData(n.data)
	return c, nil
}

// h2StreamCost is what one WebSocket over an HTTP/2 stream served by a
// Server makes the process hold, whatever it carries, measured (a loaded
// 2-core amd64 machine, Go 1.26): about 20 KiB for an idle stream, its
// Conn, net/http's stream state and the stack of the handler goroutine
// that reads it included; and, while a write waits for the peer's window
// (a stream that does not read), the stack of the goroutine that writes
// and net/http's 4 KiB response buffer. It is charged to MemoryStreams.
// What its send queue holds is charged as every queue is
// (MemorySendQueues).
const h2StreamCost = 32 << 10

// h2PumpCost is what a stream read through the pump holds on top (a
// stream a Server does not drive, read with Conn.Read and a context):
// the pump's goroutine and its 16 KiB buffer. It is charged to
// MemoryStreams when the pump starts.
const h2PumpCost = 24 << 10

// h2ConnBase is what net/http holds for an HTTP/2 connection besides its
// frame buffer and its receive window: its two goroutines, its state and
// header tables. Measured (rally serve --h2c, Go 1.26, amd64): 1,000
// connections of one idle WebSocket each grew the server's RSS by 43.5
// KiB a stream, 10 connections of 100 by 16.7; about 27 KiB a connection.
const h2ConnBase = 32 << 10

// h2ConnCost is what one HTTP/2 connection may make net/http hold, read
// from the configuration of the http.Server that serves r: h2ConnBase,
// the frame buffer (it grows to the largest frame the client sent, up to
// HTTP2Config.MaxReadFrameSize, and stays), and the receive window
// (HTTP2Config.MaxReceiveBufferPerConnection: what the client may send
// that no handler has read yet). net/http's defaults are 1 MiB each.
func h2ConnCost(r *http.Request) int64 {
	frame, window := int64(1<<20), int64(1<<20)
	if hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && hs.HTTP2 != nil {
		// Out of range, net/http uses its default.
		if n := hs.HTTP2.MaxReadFrameSize; n >= 16<<10 && n < 1<<24 {
			frame = int64(n)
		}
		if n := hs.HTTP2.MaxReceiveBufferPerConnection; n >= 65535 && n <= 1<<31-1 {
			window = int64(n)
		}
	}
	return h2ConnBase + frame + window
}

// h2ConnKey names an HTTP/2 connection. net/http puts the connection's
// local address in each of its requests' context, the value the
// connection returned: a *net.TCPAddr (or *net.UnixAddr) made for that
// connection alone, the same for all its streams, which no client can
// forge (r.RemoteAddr can be rewritten from a header by a middleware
// before Accept, differently for each stream). A listener whose
// connections return addresses of another type is told apart by the two
// addresses' text.
type h2ConnKey struct {
	id            net.Addr // the local address as a pointer, or nil
	local, remote string   // when id is nil
}

func h2ConnKeyOf(r *http.Request) h2ConnKey {
	switch a := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return h2ConnKey{id: a}
	case *net.UnixAddr:
		return h2ConnKey{id: a}
	case net.Addr:
		return h2ConnKey{local: a.String(), remote: r.RemoteAddr}
	}
	return h2ConnKey{remote: r.RemoteAddr}
}

// h2ConnCharge is one HTTP/2 connection's share of a budget: charged when
// its first WebSocket stream opens, given back when its last one closes.
type h2ConnCharge struct {
	streams int
	cost    int64
}

// openH2Stream counts a WebSocket stream of the connection k, charging
// cost to MemoryStreams if it is the connection's first. It reports
// whether the budget had room.
func (b *MemoryBudget) openH2Stream(k h2ConnKey, cost int64) bool {
	if b == nil {
		return true
	}
	if b.addH2Stream(k) {
		return true
	}
	if !b.charge(MemoryStreams, cost) {
		return false
	}
	b.h2mu.Lock()
	c, ok := b.h2conns.Get(k)
	if !ok {
		b.h2conns.Set(k, &h2ConnCharge{streams: 1, cost: cost})
	} else {
		c.streams++ // another stream of k was charged meanwhile
	}
	b.h2mu.Unlock()
	if ok {
		b.release(MemoryStreams, cost)
	}
	return true
}

// addH2Stream counts a stream of a connection already charged.
func (b *MemoryBudget) addH2Stream(k h2ConnKey) bool {
	b.h2mu.Lock()
	defer b.h2mu.Unlock()
	c, ok := b.h2conns.Get(k)
	if ok {
		c.streams++
	}
	return ok
}

// closeH2Stream ends a stream that openH2Stream counted, giving the
// connection's charge back with its last one.
func (b *MemoryBudget) closeH2Stream(k h2ConnKey) {
	if b == nil {
		return
	}
	b.h2mu.Lock()
	c, ok := b.h2conns.Get(k)
	var cost int64
	if ok {
		if c.streams--; c.streams == 0 {
			b.h2conns.Delete(k)
			cost = c.cost
		}
	}
	b.h2mu.Unlock()
	b.release(MemoryStreams, cost)
}

// checkExtendedConnect applies the rules of RFC 8441 section 5 to an
// HTTP/2 request, in this order, and returns the first one broken:
//
//	400 the process does not advertise extended CONNECT (a client could
//	    not have sent one; see CheckHTTP2)
//	405 the method is not CONNECT
//	400 :protocol is not websocket
//	426 Sec-WebSocket-Version is missing or not 13
//	403 the origin policy refuses the Origin
//	500 an origin pattern is malformed
func (q *upgradeRequest) checkExtendedConnect(o *AcceptOptions, path string) *refusal {
	if !xconnect {
		if !warnedHTTP2Off.Swap(true) {
			logger := o.Logger
			if logger == nil {
				logger = slog.Default()
			}
			logger.Warn("rally: an HTTP/2 request reached a WebSocket endpoint, but WebSockets over HTTP/2 are off: start the process with GODEBUG=http2xconnect=1", "path", path)
		}
		return &refusal{status: http.StatusBadRequest, reason: "WebSockets over HTTP/2 are off on this server (it was started without GODEBUG=http2xconnect=1); use HTTP/1.1"}
	}
	if q.method != http.MethodConnect {
		return &refusal{status: http.StatusMethodNotAllowed, reason: fmt.Sprintf("method %q is not CONNECT (RFC 8441)", q.method), headers: allowCONNECT}
	}
	if len(q.h2protocol) != 1 || q.h2protocol[0] != "websocket" {
		return &refusal{status: http.StatusBadRequest, reason: "CONNECT without :protocol websocket"}
	}
	return q.checkVersionAndOrigin(o)
}

// h2RefusalTimeout bounds how long a refused stream's answer may wait for
// the client's window.
const h2RefusalTimeout = 5 * time.Second

// RFC 9110 15.5.6: a 405 lists the allowed methods.
var allowCONNECT = []string{"Allow", "CONNECT"}

// refuseH2 answers a declined extended CONNECT. The headers of an
// HTTP/1.1 refusal that are about the connection are dropped: HTTP/2
// forbids them, and refusing one stream leaves the connection open. A
// client that does not take the body within h2RefusalTimeout (its window
// is 0) has the stream reset: otherwise net/http's handler goroutine
// would wait on the window for as long as the client keeps the
// connection.
func refuseH2(w http.ResponseWriter, rf *refusal) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h2RefusalTimeout))
	h := w.Header()
	rf.setHeader(h)
	h.Del("Connection")
	h.Del("Upgrade")
	w.WriteHeader(rf.status)
	io.WriteString(w, rf.text())
}

// localAddrOf returns the local address net/http recorded for r's
// connection, or an empty TCP address.
func localAddrOf(r *http.Request) net.Addr {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a
	}
	return &net.TCPAddr{}
}

// remoteAddrOf parses r.RemoteAddr, which net/http fills from the
// connection's address.
func remoteAddrOf(r *http.Request) net.Addr {
	if ap, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		return ap
	}
	return &net.TCPAddr{}
}

// h2Stream is the server's side of an HTTP/2 stream as a net.Conn: Read
// takes the request body's DATA, Write sends DATA and flushes it, Close
// ends the stream. net/http's stream deadlines are not used: a read
// deadline that fires closes the request body for good, and a write
// deadline that fires resets the stream. Deadlines are kept here instead,
// so that a context that ends interrupts a read without harm; a blocked
// write can only be interrupted by resetting the stream (RST_STREAM
// INTERNAL_ERROR), which a connection whose write was cut mid-frame
// needs anyway.
//
// The handler that accepted the stream must not return before Close:
// the ResponseWriter is not usable after that. Close waits for a write in
// progress to end (resetting the stream if it is blocked), so that
// nothing writes once the handler may return.
type h2Stream struct {
	r      streamReader
	w      http.ResponseWriter
	rc     *http.ResponseController
	body   io.Closer
	local  net.Addr
	remote net.Addr

	wmu     sync.Mutex // held for a write and its flush
	wclosed bool       // guarded by wmu
	wdl     deadline
	writing atomic.Bool
	once    sync.Once
	budget  *MemoryBudget // h2StreamCost is charged to it until Close
	conn    h2ConnKey     // the HTTP/2 connection, whose charge the stream shares until Close
	pump    atomic.Int32  // pumpCharged once h2PumpCost is, pumpClosed after Close
}

const (
	pumpCharged = 1
	pumpClosed  = 2
)

// chargePump charges h2PumpCost when the pump starts; Close gives it back,
// or it goes back at once if Close came first.
func (s *h2Stream) chargePump() {
	s.budget.forceCharge(MemoryStreams, h2PumpCost)
	if !s.pump.CompareAndSwap(0, pumpCharged) {
		s.budget.release(MemoryStreams, h2PumpCost)
	}
}

func newH2Stream(body io.ReadCloser, w http.ResponseWriter, rc *http.ResponseController, local, remote net.Addr) *h2Stream {
	s := &h2Stream{w: w, rc: rc, body: body, local: local, remote: remote}
	s.r.start(body)
	s.wdl.onExpire = s.writeDeadlinePassed
	s.r.dl.onExpire = s.readDeadlinePassed
	return s
}

func (s *h2Stream) Read(p []byte) (int, error) { return s.r.Read(p) }

// Write sends p in DATA frames and flushes them: it returns once net/http
// has handed them to the connection, within the stream's flow-control
// window.
func (s *h2Stream) Write(p []byte) (n int, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wclosed {
		return 0, net.ErrClosed
	}
	if s.wdl.expired() {
		return 0, os.ErrDeadlineExceeded
	}
	s.writing.Store(true)
	defer s.writing.Store(false)
	defer func() {
		// net/http panics on a write after the handler returned; that is
		// the application's bug (see Accept), but it must fail this
		// connection, not the process.
		if v := recover(); v != nil {
			err = fmt.Errorf("rally: write on an HTTP/2 stream whose handler returned: %v", v)
		}
	}()
	n, err = s.w.Write(p)
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil && s.wdl.expired() {
		err = fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, err)
	}
	return n, err
}

// writeDeadlinePassed interrupts a write in progress when the write
// deadline passes; the only way to do so resets the stream.
func (s *h2Stream) writeDeadlinePassed() {
	if s.writing.Load() && s.wdl.expired() {
		s.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// readDeadlinePassed interrupts a direct read in progress when the read
// deadline passes; the only way to do so fails the body's reads for good,
// which is why only a Server's streams, which never set one, read
// directly.
func (s *h2Stream) readDeadlinePassed() {
	if s.r.reading.Load() && s.r.dl.expired() {
		s.rc.SetReadDeadline(time.Unix(1, 0))
	}
}

// Close ends the stream: reads and writes fail from now on, and once the
// handler returns, net/http sends END_STREAM (and RST_STREAM NO_ERROR if
// the client has not ended its side yet). A write still blocked is cut by
// resetting the stream.
func (s *h2Stream) Close() error {
	s.once.Do(func() {
		s.r.close()
		s.body.Close()
		if !s.wmu.TryLock() {
			s.rc.SetWriteDeadline(time.Unix(1, 0))
			s.wmu.Lock()
		}
		s.wclosed = true
		s.wmu.Unlock()
		s.wdl.stop()
		s.budget.release(MemoryStreams, h2StreamCost)
		s.budget.closeH2Stream(s.conn)
		if s.pump.Swap(pumpClosed) == pumpCharged {
			s.budget.release(MemoryStreams, h2PumpCost)
		}
	})
	return nil
}

func (s *h2Stream) LocalAddr() net.Addr  { return s.local }
func (s *h2Stream) RemoteAddr() net.Addr { return s.remote }

func (s *h2Stream) SetDeadline(t time.Time) error {
	s.r.dl.set(t)
	s.wdl.set(t)
	return nil
}
func (s *h2Stream) SetReadDeadline(t time.Time) error  { s.r.dl.set(t); return nil }
func (s *h2Stream) SetWriteDeadline(t time.Time) error { s.wdl.set(t); return nil }

// streamReader reads an HTTP/2 body. A read that a deadline may have to
// interrupt goes through a goroutine of its own, the pump, so that it can
// give up at the deadline without closing the body (which is all net/http
// offers). The pump reads one chunk at a time into its buffer and waits
// until Read has taken all of it, so flow control still reflects what
// the application consumed. A reader that will never set a deadline
// (direct reports true at the first Read: a Server's stream) reads the
// body itself, and neither the pump nor its buffer exists.
type streamReader struct {
	src     io.Reader
	direct  func() bool   // nil: always the pump
	onPump  func()        // called when the pump starts, if set
	mode    int8          // 0 not decided, 1 direct, 2 pump; the reader's
	reading atomic.Bool   // a direct read is in progress
	data    chan []byte   // a chunk read; closed at the end, with perr set
	ack     chan struct{} // the chunk was consumed
	closed  chan struct{}
	perr    error  // the body's error, set before data is closed
	pending []byte // the rest of the current chunk
	err     error
	dl      deadline
	once    sync.Once
}

// h2ReadChunk is the size of one read from the body: an HTTP/2 DATA
// frame carries at most 16 KiB unless the peer allows more.
const h2ReadChunk = 16 << 10

func (s *streamReader) start(src io.Reader) {
	s.src = src
	s.closed = make(chan struct{})
}

// startPump starts the pump, once, at the first Read of a reader that
// does not read directly.
func (s *streamReader) startPump() {
	s.mode = 2
	if s.onPump != nil {
		s.onPump()
	}
	s.data = make(chan []byte)
	s.ack = make(chan struct{}, 1)
	go s.pump(s.src)
}

func (s *streamReader) pump(src io.Reader) {
	buf := make([]byte, h2ReadChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case s.data <- buf[:n]:
			case <-s.closed:
				return
			}
			select {
			case <-s.ack:
			case <-s.closed:
				return
			}
		}
		if err != nil {
			s.perr = err
			close(s.data)
			return
		}
	}
}

// Read is for one goroutine at a time (the Conn's reader).
func (s *streamReader) Read(p []byte) (int, error) {
	if s.mode == 0 {
		if s.direct != nil && s.direct() {
			s.mode = 1
		} else {
			s.startPump()
		}
	}
	if s.mode == 1 {
		return s.readDirect(p)
	}
	if len(s.pending) > 0 {
		return s.take(p), nil
	}
	if s.err != nil {
		return 0, s.err
	}
	if s.dl.expired() {
		return 0, os.ErrDeadlineExceeded
	}
	select {
	case chunk, ok := <-s.data:
		if !ok {
			s.err = s.perr
			return 0, s.err
		}
		s.pending = chunk
		return s.take(p), nil
	case <-s.dl.wait():
		return 0, os.ErrDeadlineExceeded
	case <-s.closed:
		return 0, net.ErrClosed
	}
}

// readDirect reads the body on the caller's goroutine. Close wakes it (it
// closes the body); a deadline that passes during it fails the body's
// reads for good (see h2Stream.readDeadlinePassed).
func (s *streamReader) readDirect(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if isClosed(s.closed) {
		return 0, net.ErrClosed
	}
	s.reading.Store(true) // before the check: a deadline passing after it sees the read
	if s.dl.expired() {
		s.reading.Store(false)
		return 0, os.ErrDeadlineExceeded
	}
	n, err := s.src.Read(p)
	s.reading.Store(false)
	if err != nil {
		switch {
		case isClosed(s.closed):
			err = net.ErrClosed
		case s.dl.expired():
			err = os.ErrDeadlineExceeded
		}
		s.err = err
	}
	return n, err
}

func (s *streamReader) take(p []byte) int {
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.ack <- struct{}{}
	}
	return n
}

// close stops the pump, if any (once its body read returns), and fails
// reads.
func (s *streamReader) close() {
	s.once.Do(func() {
		close(s.closed)
		s.dl.stop()
	})
}

// deadline is a net.Conn deadline kept outside the stream: a channel
// closed when it passes, and a function run then.
type deadline struct {
	mu       sync.Mutex
	t        time.Time
	timer    *time.Timer
	ch       chan struct{} // closed once t has passed
	onExpire func()
}

// set moves the deadline to t (zero: none). A deadline in the past
// expires now.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.t = t
	if d.ch == nil || isClosed(d.ch) {
		d.ch = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.expireLocked()
		return
	}
	ch := d.ch
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.ch == ch && !isClosed(ch) {
			d.expireLocked()
		}
	})
}

func (d *deadline) expireLocked() {
	close(d.ch)
	if d.onExpire != nil {
		go d.onExpire()
	}
}

// wait returns a channel closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

func (d *deadline) expired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch != nil && isClosed(d.ch)
}

func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// HTTP2 reports whether c is a stream of an HTTP/2 connection (RFC 8441)
// rather than a connection of its own.
func (c *Conn) HTTP2() bool {
	switch c.netConn().(type) {
	case *h2Stream, *h2ClientStream:
		return true
	}
	return false
}
