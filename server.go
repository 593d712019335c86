package rally

import (
	"net/http"
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

	set connSet
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
	c, err := Accept(w, r, opts)
	if err != nil {
		s.set.commit(nil)
		return
	}
	if s.Upgrade != nil {
		c.data = data
	}
	c.rd.served = true
	if !s.set.commit(c) {
		// Shutdown began during the handshake.
		c.closeWithCode(CloseGoingAway, "server shutting down")
	}
	if r.ProtoMajor == 2 {
		// An HTTP/2 stream lives as long as its handler (see Accept).
		c.serve(s)
		return
	}
	go c.serve(s)
}

// serve is a served connection's reading goroutine.
func (c *Conn) serve(s *Server) {
	c.rd.sem <- struct{}{}
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
	<-c.rd.sem
	<-c.cl.done
	if s.Close != nil {
		c.callClose(s.Close, c.cl.final)
	}
	s.set.remove(c)
}
