package rally

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// connSet tracks a Server's open connections for Shutdown.
type connSet struct {
	mu      sync.Mutex
	conns   map[*Conn]struct{}
	closing bool
	empty   chan struct{} // closed when closing and no connection is left
}

// add registers c, or reports false once shutdown has begun.
func (s *connSet) add(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*Conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *connSet) remove(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.closing && len(s.conns) == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

var errShuttingDown = errors.New("rally: server is shutting down")

// Shutdown stops the Server gracefully: new upgrade requests are refused
// with 503, every open connection is sent a close frame with 1001 (going
// away), and Shutdown waits for their close handshakes until ctx ends. Then
// it cuts what is left and returns ctx.Err(); it returns nil when every
// connection closed in time. Every queued send that did not go out is
// reported as usual (SendDone completions, Server.Close).
//
// net/http's Server.Shutdown does not know hijacked connections; call this
// too, for instance with http.Server.RegisterOnShutdown:
//
//	hs.RegisterOnShutdown(func() {
//		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//		defer cancel()
//		ws.Shutdown(ctx)
//	})
func (s *Server) Shutdown(ctx context.Context) error {
	set := &s.set
	set.mu.Lock()
	set.closing = true
	open := make([]*Conn, 0, len(set.conns))
	for c := range set.conns {
		open = append(open, c)
	}
	var empty chan struct{}
	if len(set.conns) > 0 {
		if set.empty == nil {
			set.empty = make(chan struct{})
		}
		empty = set.empty
	}
	set.mu.Unlock()
	if empty == nil {
		return nil
	}
	for _, c := range open {
		c.closeWithCode(CloseGoingAway, "server shutting down")
	}
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
	}
	for _, c := range open {
		c.CloseNow()
	}
	return ctx.Err()
}

// refuseShuttingDown answers an upgrade that arrives after Shutdown began.
func refuseShuttingDown(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
}
