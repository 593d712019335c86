package rally

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is an http.Handler that accepts WebSocket connections and drives
// each one with callbacks, in the style of Bun.serve: no read loop to write.
//
// The callbacks of one connection never run concurrently; they run on that
// connection's reading goroutine. Message bytes are valid during the
// callback only (no copy is made): keep a copy if you need them later. A
// callback may call Write, Close or Ping on its connection (or any other)
// without deadlocking: Close from a callback sends the close frame and
// returns. A panic in a callback is recovered, logged, and closes that
// connection with 1011.
//
// With EventLoop set (on Linux), the connections are driven by a few event
// loops instead of a goroutine each: see EventLoop for what changes.
//
// A Server's fields must not change once it serves.
type Server struct {
	// Options configure the handshake and the connections. nil means the
	// defaults of AcceptOptions.
	Options *AcceptOptions

	// Upgrade, when set, runs before the handshake is answered. It may
	// refuse the request by writing a response itself and returning false;
	// otherwise the value it returns is attached to the connection
	// (Conn.Data), e.g. the authenticated user.
	Upgrade func(w http.ResponseWriter, r *http.Request) (data any, ok bool)

	// Open is called once the connection is open, before any message.
	Open func(c *Conn)

	// Message is called for every data message. p is valid during the call.
	Message func(c *Conn, typ MessageType, p []byte)

	// Ping and Pong are called for control frames from the peer; p is valid
	// during the call. Pings are answered automatically.
	Ping func(c *Conn, p []byte)
	Pong func(c *Conn, p []byte)

	// Drain is called when the send queue has emptied after a Send
	// returned Queued: the peer caught up, more may be sent.
	Drain func(c *Conn)

	// Close is called exactly once, when the connection has ended, with how
	// it ended (never nil).
	Close func(c *Conn, err *CloseError)

	// EventLoop, on Linux, drives the connections with a few event loops
	// (EventLoops of them) instead of a goroutine and a read buffer each:
	// an idle connection is a registered socket and its state, nothing
	// more, and what the callbacks of one loop turn send to a connection
	// leaves in one write after the turn, whatever the number of senders.
	// Elsewhere it is ignored (goroutine mode). Connections over TLS
	// terminated by NewTLSListener (through Serve or net/http) are served
	// by the loops too once their TLS and HTTP handshakes are done (those
	// run on a goroutine that ends with them); a tls.Conn made by net/http
	// over a plain socket (ListenAndServeTLS) and WebSockets over HTTP/2
	// stay in goroutine mode. Serve and ServeHTTP both hand connections to
	// the loops. ServeHTTP's handshake runs on net/http's goroutine;
	// Serve's runs in the loops, with no goroutine per connection (a TLS
	// listener's on a goroutine): there Options' Authorize,
	// SelectSubprotocol, ResponseHeader and OnHandshakeError run on the
	// loop goroutine, like the callbacks below, and must not block.
	//
	// The callbacks then run on the loop goroutine, which serves many
	// connections: a callback that blocks holds up all of them (the loop
	// logs a callback that blocks it for more than a second). So, on a
	// loop goroutine, Write, WriteCompress and Ping do not wait for the
	// kernel: they accept the frame, which leaves in order after the
	// turn, and return nil, or return the error that kept it out (see
	// Conn.Write); use SendDone to learn when a frame reached the
	// kernel, or that it never will. Close sends and returns, as from
	// any callback, with or without EventLoop. Read,
	// ReadAppend and Reader return an error on a connection a Server
	// reads, with or without EventLoop: its messages reach Message. A Writer
	// opened on the loop waits while another goroutine's Writer streams
	// on the same connection: do not stream from the loop to a
	// connection other goroutines stream to.
	//
	// On Linux it is the recommended setting for a Server (rally serve
	// uses it by default): less memory per idle connection and fewer
	// system calls per message. Goroutine mode remains for other systems
	// and for programs that read with a Read loop of their own.
	EventLoop bool

	// EventLoops is the number of event loops when EventLoop is set; 0
	// means half of runtime.GOMAXPROCS(0), rounded up (one on two
	// cores): the other Ps are left to handshakes, the garbage collector
	// and the program's goroutines, and fewer loops hand fewer sends over
	// between them, so a message costs less CPU. A server with cores of
	// its own whose load is mostly echoes may set runtime.GOMAXPROCS(0):
	// more loops use more cores at once. A loop's goroutine exists only
	// while the loop has connections.
	EventLoops int

	set   connSet
	loops loopGroup
	lnMu  sync.Mutex
	lns   map[net.Listener]struct{}
}

// ServeHTTP upgrades the request and serves the connection until it ends.
// The handshake failing is answered on w (see Accept) and logged at debug
// level.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.set.begin() {
		refuseShuttingDown(w)
		return
	}
	var data any
	if s.Upgrade != nil {
		d, ok := s.Upgrade(w, r)
		if !ok {
			s.set.commit(nil)
			return
		}
		data = d
	}
	c, err := Accept(w, r, s.acceptOptions())
	if err != nil {
		s.set.commit(nil)
		return
	}
	if s.Upgrade != nil {
		c.setData(data)
	}
	s.start(c, r.ProtoMajor == 2)
}

// acceptOptions are the Server's Options with its Ping, Pong and Drain
// callbacks as the connection's hooks.
func (s *Server) acceptOptions() *AcceptOptions {
	opts := s.Options
	if s.Ping != nil || s.Pong != nil || s.Drain != nil {
		o := AcceptOptions{}
		if opts != nil {
			o = *opts
		}
		if s.Ping != nil {
			o.OnPing = s.Ping
		}
		if s.Pong != nil {
			o.OnPong = s.Pong
		}
		if s.Drain != nil {
			o.OnDrain = s.Drain
		}
		opts = &o
	}
	return opts
}

// testEventLoop makes every Server use event loops, so that the package's
// tests run in both modes (set by the tests from RALLY_TEST_EVENT_LOOP).
var testEventLoop bool

// testEventLoops, when the tests set it, is the least number of loops of
// a Server that does not say, so that a run of every test on event loops
// also goes through the hand-overs between loops, which the default of
// one loop on two cores never takes.
var testEventLoops int

// start serves a connection whose handshake is done: on an event loop
// when the Server has them and the connection can be, else on a goroutine
// of its own (an HTTP/2 stream: on the handler's, which must not return
// before the stream ends).
func (s *Server) start(c *Conn, h2 bool) {
	c.drive()
	if !s.set.commit(c) {
		// Shutdown began during the handshake.
		c.closeWithCode(CloseGoingAway, "server shutting down")
	}
	if h2 {
		c.serve(s)
		return
	}
	if (s.EventLoop || testEventLoop) && s.loops.adopt(s, c) {
		return
	}
	go c.serve(s)
}

// Serve accepts connections on ln and serves them, without net/http: each
// opening handshake is read and answered as by Upgrade (Options'
// MaxHeaderBytes and HandshakeTimeout bound the request head), then the
// connection is served like those of ServeHTTP. With EventLoop (on
// Linux), the event loops read and answer the heads, with the same bounds
// and answers, and no goroutine per connection in its handshake: Serve's
// own goroutine accepts. Server.Upgrade, which
// needs net/http, cannot be used with Serve (Serve returns an error at
// once if it is set): decide on a request with Options.Authorize instead.
//
// Serve returns when ln.Accept fails for good: http.ErrServerClosed after
// Shutdown (which closes ln), else the listener's error. Temporary accept
// errors (too many open files) are retried after a pause.
func (s *Server) Serve(ln net.Listener) error {
	if s.Upgrade != nil {
		return errServeUpgrade
	}
	if !s.trackListener(ln, true) {
		ln.Close()
		return http.ErrServerClosed
	}
	defer s.trackListener(ln, false)
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.set.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAccept(err) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		if !s.set.begin() {
			nc.Close()
			continue
		}
		if (s.EventLoop || testEventLoop) && s.loops.handshake(s, nc) {
			continue // a loop reads the head (loop_accept_linux.go)
		}
		go s.handshake(nc)
	}
}

var errServeUpgrade = errors.New("rally: Server.Serve: Server.Upgrade needs net/http (use Options.Authorize, or serve with net/http)")

// handshake answers the opening handshake of a connection Serve accepted
// and serves it.
func (s *Server) handshake(nc net.Conn) {
	c, _, err := Upgrade(nc, s.acceptOptions())
	if err != nil {
		s.set.commit(nil)
		return
	}
	s.start(c, false)
}

// trackListener adds ln to (or removes it from) the listeners Shutdown
// closes; adding reports false once Shutdown has begun.
func (s *Server) trackListener(ln net.Listener, add bool) bool {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if !add {
		delete(s.lns, ln)
		return true
	}
	if s.set.isClosing() {
		return false
	}
	if s.lns == nil {
		s.lns = make(map[net.Listener]struct{})
	}
	s.lns[ln] = struct{}{}
	return true
}

// closeListeners closes the listeners of Serve calls (Shutdown).
func (s *Server) closeListeners() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	for ln := range s.lns {
		ln.Close()
	}
}

// serve is a served connection's reading goroutine.
func (c *Conn) serve(s *Server) {
	// A Server's goroutine reads the connection in batches, each corked
	// (an event loop's turn is a cork of its own).
	c.rd.corks = true
	c.rd.g.Store(currentG())
	if s.Open != nil {
		// What Open sends leaves in one write.
		c.corkBegin()
		c.callOpen(s.Open)
		c.corkEnd()
	}
	for c.rd.end == nil {
		typ, p, err := c.nextMessage(nil)
		if err != nil {
			break
		}
		if s.Message != nil {
			c.callMessage(s.Message, typ, p)
		}
	}
	if c.rd.msg.buf != nil {
		c.releaseMessage()
	}
	if c.rd.batch {
		c.rd.batch = false
		c.corkEnd()
	}
	if c.rd.linger {
		c.rd.linger = false
		c.linger()
	}
	c.releaseReadBuffer()
	c.rd.g.Store(0)
	<-c.Done()
	if s.Close != nil {
		c.callClose(s.Close, c.cl.final.Load())
	}
	s.set.remove(c)
}
