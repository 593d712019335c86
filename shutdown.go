package rally

import (
	"context"
	"net/http"
	"sync"

	"github.com/rallyws/rally/internal/shrinkmap"
)

// connSet tracks a Server's open connections, and the handshakes in
// progress, for Shutdown.
type connSet struct {
	mu      sync.Mutex
	conns   shrinkmap.Map[*Conn, struct{}] // gives back the room of a crowd that left
	pending int                            // handshakes between ServeHTTP's start and the connection's registration
	closing bool
	empty   chan struct{} // closed when closing and nothing is left
}

// begin registers a handshake, or reports false once shutdown has begun.
func (s *connSet) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.pending++
	return true
}

// commit turns a handshake into an open connection (c nil: it failed). It
// reports false if shutdown began meanwhile: c must then be told to go.
func (s *connSet) commit(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if c != nil {
		s.conns.Set(c, struct{}{})
	}
	s.checkEmptyLocked()
	return !s.closing
}

// isClosing reports whether shutdown has begun.
func (s *connSet) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *connSet) remove(c *Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns.Delete(c)
	s.checkEmptyLocked()
}

func (s *connSet) checkEmptyLocked() {
	if s.closing && s.conns.Len() == 0 && s.pending == 0 && s.empty != nil {
		close(s.empty)
		s.empty = nil
	}
}

// Shutdown stops the Server gracefully: the listeners of Serve calls are
// closed, new upgrade requests are refused with 503, every open connection is sent a close frame with 1001 (going
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
	open := make([]*Conn, 0, set.conns.Len())
	for c := range set.conns.All() {
		open = append(open, c)
	}
	var empty chan struct{}
	if set.conns.Len() > 0 || set.pending > 0 {
		if set.empty == nil {
			set.empty = make(chan struct{})
		}
		empty = set.empty
	}
	set.mu.Unlock()
	s.closeListeners()
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
	// Cut everything still open, including what registered after the
	// snapshot (it was told to go when it did).
	set.mu.Lock()
	for c := range set.conns.All() {
		open = append(open, c)
	}
	set.mu.Unlock()
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
