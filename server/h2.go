package server

// WebSockets over HTTP/2 (RFC 8441) in `rally serve`: the TLS listener
// offers h2 (net/http's default), Config.H2C adds HTTP/2 without TLS, the
// WebSocket endpoints answer extended CONNECT, and /metrics counts
// connections per protocol.

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rallyws/rally"
)

// h2MaxStreams is how many streams (WebSockets and requests) one HTTP/2
// connection may carry at once (net/http's default is 250): past it a new
// stream is refused (RST_STREAM), so that one TCP connection cannot hold
// more than its share of WebSockets. Each stream is also charged to the
// memory budget (rally.MemoryStreams), and refused with 503 past it.
const h2MaxStreams = 100

// h2MaxReadFrame is the largest HTTP/2 frame a client may send (the
// protocol's least, and what browsers send). net/http reads each frame
// into a buffer the size of the largest one the connection sent, and
// keeps it as long as the connection, up to its default of 1 MiB: a
// thousand connections that each sent one frame of 1 MiB held 1 GiB that
// no budget saw. (And, with http.Server.IdleTimeout set, Go 1.26 keeps
// a connection that ends with streams open that much longer, buffers
// included: its serving loop stops its idle timer, then closes the
// streams, and closing the last one starts the timer again. rally serve
// closes idle connections itself instead: see headGate.idleAfter.)
const h2MaxReadFrame = 16 << 10

// h2Window is how much a client may send on an HTTP/2 connection, and on
// each of its streams, before the handlers have read it (net/http's
// default is 1 MiB): what the connection may hold unread. Each HTTP/2
// connection carrying WebSockets is charged it (MemoryStreams), with its
// frame buffer. On a path of 20 ms it lets one connection bring 6 MB/s.
const h2Window = 128 << 10

// h2Metrics count WebSocket connections by the protocol that carries
// them: "http/1.1", "h2" (HTTP/2 over TLS) or "h2c" (HTTP/2 without TLS).
type h2Metrics struct {
	open  *prometheus.GaugeVec   // protocol
	total *prometheus.CounterVec // protocol
}

func newH2Metrics(reg *prometheus.Registry) h2Metrics {
	m := h2Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rally_connections_by_protocol", Help: "Open WebSocket connections, by the protocol that carries them (http/1.1, h2, h2c).",
		}, []string{"protocol"}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rally_connections_by_protocol_total", Help: "WebSocket connections opened, by the protocol that carries them (http/1.1, h2, h2c).",
		}, []string{"protocol"}),
	}
	reg.MustRegister(m.open, m.total)
	for _, p := range []string{"http/1.1", "h2", "h2c"} {
		m.open.WithLabelValues(p)
		m.total.WithLabelValues(p)
	}
	return m
}

// protocolOf names what carries c.
func (s *Server) protocolOf(c *rally.Conn) string {
	switch {
	case !c.HTTP2():
		return "http/1.1"
	case s.cfg.TLSCert != "":
		return "h2"
	}
	return "h2c"
}

func (s *Server) countOpened(c *rally.Conn) {
	p := s.protocolOf(c)
	s.h2m.open.WithLabelValues(p).Inc()
	s.h2m.total.WithLabelValues(p).Inc()
}

func (s *Server) countClosed(c *rally.Conn) {
	s.h2m.open.WithLabelValues(s.protocolOf(c)).Dec()
}

// configureHTTP2 lets hs carry WebSockets over HTTP/2: h2 over TLS (on by
// default in net/http), h2c when Config.H2C is set, at most h2MaxStreams
// streams per connection, frames of h2MaxReadFrame at most, windows of
// h2Window. Without GODEBUG=http2xconnect=1 in the environment the
// process started with, net/http does not advertise extended CONNECT:
// that is logged (cmd/rally arranges the setting).
func (s *Server) configureHTTP2(hs *http.Server) {
	hs.HTTP2 = &http.HTTP2Config{
		MaxConcurrentStreams:          h2MaxStreams,
		MaxReadFrameSize:              h2MaxReadFrame,
		MaxReceiveBufferPerConnection: h2Window,
		MaxReceiveBufferPerStream:     h2Window,
	}
	if s.cfg.H2C {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		hs.Protocols = p
	}
	if err := rally.CheckHTTP2(); err != nil {
		s.log.Warn("WebSockets over HTTP/2 are off", "err", err)
	}
}
