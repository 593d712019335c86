package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// limit guards a WebSocket endpoint with the limits a public server needs:
// no handshake once shutdown began (503), at most HandshakeRate handshakes
// per second per client address (429), at most MaxConnections open (503).
// A handshake that passes holds a connection slot, which is given back
// when it is refused later (authorize, handshakeError) or when the
// connection ends (closed).
func (s *Server) limit(next http.Handler) http.Handler { return s.limitFull(next, false) }

// overCapacity marks the context of a handshake past MaxConnections that
// is let through to be refused in its protocol (limitFull).
type overCapacity struct{}

// limitFull is limit; with inBand, a handshake past MaxConnections is
// let through with overCapacity in its context, for the endpoint to
// refuse in its own protocol (Pusher's 4100), holding its slot until then.
func (s *Server) limitFull(next http.Handler, inBand bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			s.m.handshakeFails.WithLabelValues("shutting_down").Inc()
			http.Error(w, "server shutting down", http.StatusServiceUnavailable)
			return
		}
		if !s.admitMemory(w, r) {
			return
		}
		if client := s.proxies.clientAddr(r); !s.rate.allow(client, time.Now()) {
			s.m.refused("handshake_rate")
			s.log.Info("handshake refused: too many from this address", "remote", r.RemoteAddr, "client", client.String(), "path", r.URL.Path)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many handshakes from your address; retry later", http.StatusTooManyRequests)
			return
		}
		if n := s.conns.Add(1); s.cfg.MaxConnections > 0 && n > int64(s.cfg.MaxConnections) {
			if inBand {
				s.m.refused("connections")
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), overCapacity{}, true)))
				return
			}
			s.conns.Add(-1)
			s.m.refused("connections")
			s.log.Warn("handshake refused: connection limit reached", "remote", r.RemoteAddr, "limit", s.cfg.MaxConnections)
			w.Header().Set("Retry-After", "5")
			http.Error(w, "server full; retry later", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorize returns the Authorize hook of an endpoint: it checks the
// token and attaches what it grants to the connection.
func (s *Server) authorize(endpoint string) func(r *http.Request) (any, *rally.Rejection) {
	return func(r *http.Request) (any, *rally.Rejection) {
		g, err := authorize(r, s.secret)
		if err != nil {
			s.conns.Add(-1)
			s.m.handshakeFails.WithLabelValues("unauthorized").Inc()
			s.log.Info("handshake refused", "endpoint", endpoint, "remote", r.RemoteAddr, "reason", err.Error())
			return nil, &rally.Rejection{
				Status: http.StatusUnauthorized,
				Header: http.Header{"Www-Authenticate": {`Bearer realm="rally"`}},
				Body:   err.Error() + "\n",
			}
		}
		return &wsSession{grant: g}, nil
	}
}

// handshakeError counts a handshake that broke a rule (or failed on I/O)
// and gives back its connection slot.
func (s *Server) handshakeError(r *http.Request, err error) {
	s.conns.Add(-1)
	reason := "io"
	var he *rally.HandshakeError
	if errors.As(err, &he) {
		switch he.Status {
		case http.StatusForbidden:
			reason = "origin"
		case http.StatusUpgradeRequired:
			reason = "version"
		default:
			reason = "bad_request"
		}
	}
	s.m.handshakeFails.WithLabelValues(reason).Inc()
	path := ""
	if r != nil {
		path = r.URL.Path
	}
	// A refusal (a rule broken, such as a foreign Origin) is the client's
	// or an attacker's doing and worth seeing; an I/O failure is noise.
	level := slog.LevelInfo
	if reason == "io" {
		level = slog.LevelDebug
	}
	s.log.Log(context.Background(), level, "handshake refused", "path", path, "reason", reason, "err", err)
}

// opened and closed count the connections of an endpoint, and end each
// at its token's expiry.
func (s *Server) opened(endpoint string) func(*rally.Conn) {
	return func(c *rally.Conn) {
		s.m.connections.WithLabelValues(endpoint).Inc()
		s.m.connectionsTotal.WithLabelValues(endpoint).Inc()
		s.countOpened(c)
		ss := c.Data().(*wsSession)
		if g := ss.grant; !g.open {
			// RFC 6455 7.4.1: 1008 is for a message (here: a connection)
			// that violates policy.
			ss.more().expiry = time.AfterFunc(time.Until(g.expires), func() {
				c.Close(rally.ClosePolicyViolation, reasonTokenExpiry)
			})
		}
		s.log.Debug("connection open", "endpoint", endpoint, "remote", c.RemoteAddr().String(), "subject", ss.grant.subject)
	}
}

func (s *Server) closed(endpoint string) func(*rally.Conn, *rally.CloseError) {
	return func(c *rally.Conn, ce *rally.CloseError) {
		if x := c.Data().(*wsSession).x; x != nil && x.expiry != nil {
			x.expiry.Stop()
		}
		s.log.Debug("connection closed", "endpoint", endpoint, "remote", c.RemoteAddr().String(), "code", ce.Code)
		s.conns.Add(-1)
		s.m.closed(endpoint, ce.Code)
		s.countClosed(c)
		if s.closedHook != nil {
			s.closedHook()
		}
	}
}

// headWatch counts the connections that net/http closed because their
// first request did not arrive whole within the header read timeout: those
// closed before their first request was served, at least the timeout
// after they were opened. (A first request whose handler runs longer than
// the timeout and then closes the connection would be counted too; no
// endpoint here does that.)
type headWatch struct {
	mu     sync.Mutex
	opened shrinkmap.Map[net.Conn, time.Time] // gives back the room of a connect storm
}

func (h *headWatch) track(timeout time.Duration, m *metrics) func(net.Conn, http.ConnState) {
	return func(c net.Conn, st http.ConnState) {
		h.mu.Lock()
		defer h.mu.Unlock()
		switch st {
		case http.StateNew:
			h.opened.Set(c, time.Now())
		case http.StateIdle, http.StateHijacked:
			h.opened.Delete(c)
		case http.StateClosed:
			t, ok := h.opened.Get(c)
			if !ok {
				return
			}
			h.opened.Delete(c)
			if time.Since(t) >= timeout {
				m.refusals.WithLabelValues("header_timeout").Inc()
			}
		}
	}
}
