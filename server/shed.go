package server

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// Until connections charge their send queues to the memory budget (and
// the budget sheds the largest itself), the server does it from the
// outside: it keeps its open connections, and once the memory held passes
// 80% of the limit (new handshakes get 503 from 90%) closes those with the
// most waiting to be sent, largest first, until their queues make up what
// is over 70%: slow readers give way before new clients are refused for
// long.

// minShedQueue is the smallest send queue worth closing a connection for.
const minShedQueue = 64 << 10

// maxShedPerTick bounds the connections closed in one quarter second.
const maxShedPerTick = 256

// openConns is the set of open WebSocket connections of a server.
type openConns struct {
	mu sync.Mutex
	m  shrinkmap.Map[*rally.Conn, struct{}] // gives back the room of a crowd that left
}

// trackConns makes the WebSocket endpoints keep openConns, and registers
// the counter of connections shed.
func (s *Server) trackConns() {
	for _, ws := range []*rally.Server{s.echo, s.ws, s.chat} {
		open, closed := ws.Open, ws.Close
		ws.Open = func(c *rally.Conn) {
			s.open.mu.Lock()
			s.open.m.Set(c, struct{}{})
			s.open.mu.Unlock()
			if open != nil {
				open(c)
			}
		}
		ws.Close = func(c *rally.Conn, ce *rally.CloseError) {
			s.open.mu.Lock()
			s.open.m.Delete(c)
			s.open.mu.Unlock()
			if closed != nil {
				closed(c, ce)
			}
		}
	}
	s.shedConns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rally_memory_shed_connections_total",
		Help: "Connections closed under high memory pressure because of what waited to be sent to them (largest first).",
	})
	s.m.reg.MustRegister(s.shedConns)
}

// shedSlowest closes the connections with the largest send queues while
// what clients hold, as charged to the budget, is over 70% of the limit,
// and returns how many it closed. Their peers do not read (their queue
// cannot drain), so a close frame would not reach them: the connection is
// cut. Memory the runtime holds beyond the charges (garbage not yet
// collected) does not count: cutting readers would not give it back, and
// a fast reader whose queue is large for a moment would be cut for it.
//
// A connection already ending (the budget is cutting it, or its close
// handshake is over) is left to end and not counted: CloseNow cuts only
// a connection nothing else is ending, so that one slow reader is counted
// once, here or in rally_memory_shed_queues_total. Its queue is on its
// way out all the same and counts towards the excess.
func (s *Server) shedSlowest() int {
	limit := s.budget.Limit()
	excess := s.budget.Used() - limit/10*7
	if limit <= 0 || excess <= 0 {
		return 0
	}
	type queued struct {
		c *rally.Conn
		n int
	}
	var big []queued
	s.open.mu.Lock()
	for c := range s.open.m.All() {
		if n := c.BufferedCost(); n >= minShedQueue {
			big = append(big, queued{c, n})
		}
	}
	s.open.mu.Unlock()
	slices.SortFunc(big, func(a, b queued) int { return b.n - a.n })
	shed := 0
	for _, q := range big {
		if excess <= 0 || shed == maxShedPerTick {
			break
		}
		if q.c.CloseNow() == nil {
			shed++
		}
		// A queue holds about twice what it counts (its capacity).
		excess -= 2 * int64(q.n)
	}
	s.shedConns.Add(float64(shed))
	return shed
}
