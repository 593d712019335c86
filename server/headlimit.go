package server

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// httpIdleTimeout is how long rally serve keeps a connection that carries
// nothing: between two requests of a kept-alive connection, or an HTTP/2
// connection with no stream open (a variable for the tests).
var httpIdleTimeout = 2 * time.Minute

// headBufferBytes is what net/http holds for reading a connection's
// request head besides the head itself (its bufio.Reader).
const headBufferBytes = 4 << 10

// harden applies Protection to the HTTP server before it serves ln: the
// head size limit (net/http answers 431 past it), the bound on heads in
// progress, accept errors counted and logged, the memory watch, and the
// ops listener. It returns the listener to serve.
func (s *Server) harden(ctx context.Context, hs *http.Server, ln net.Listener) net.Listener {
	p := &s.cfg.Protection
	hs.MaxHeaderBytes = p.MaxHeaderBytes
	g := &headGate{
		max:       int64(p.MaxPendingHandshakes),
		budget:    s.budget,
		perHead:   int64(p.MaxHeaderBytes) + headBufferBytes,
		open:      &s.httpConns,
		m:         s.m,
		log:       newEveryLog(s.log, 10*time.Second),
		idleAfter: httpIdleTimeout,
	}
	prev := hs.ConnState
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		g.state(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	hs.ConnContext = g.connContext
	hs.Handler = g.headDone(hs.Handler)
	go s.watchMemory(ctx)
	if s.opsLn != nil {
		s.serveOps()
	}
	al := &acceptLogger{Listener: ln, m: s.m, errors: s.acceptErrors, log: newEveryLog(s.log, 10*time.Second), reserve: newFDReserve(1)}
	s.closers = append(s.closers, al.reserve.close)
	return al
}

// headGate bounds the connections whose request head is in progress: from
// accept (or the end of the previous request) until the head has arrived
// whole and the handler runs, the connection goes idle, is hijacked or
// closes. Each such head is charged to the memory budget at its largest
// (MaxHeaderBytes and net/http's read buffer). Past the limit, the oldest
// head in progress is cut to make room: a client that sends its head at
// once is served while slow ones wait, and the slowest give way first.
type headGate struct {
	max     int64
	perHead int64
	// idleAfter is how long a connection may stay idle (no request in
	// progress, no HTTP/2 stream open) before the gate closes it: what
	// http.Server.IdleTimeout does, done here because net/http's HTTP/2
	// server (Go 1.26) starts its idle timer again while it closes the
	// streams of a connection that ended, and so keeps every such
	// connection, its buffers included, IdleTimeout longer. Without an
	// IdleTimeout (rally serve sets none) it keeps no timer.
	idleAfter time.Duration
	budget    *rally.MemoryBudget
	pending   atomic.Int64
	open      *atomic.Int64 // TCP connections net/http serves (not hijacked)
	m         *metrics
	log       *everyLog

	mu    sync.Mutex
	conns shrinkmap.Map[net.Conn, *pendingHead] // gives back the room of a crowd that left
	queue []*pendingHead                        // heads in the order they started; finished ones are skipped
}

// pendingHead is one connection's head state.
type pendingHead struct {
	g       *headGate
	c       net.Conn
	waiting atomic.Bool // its head is in progress, counted and charged
	idle    atomic.Bool // between two requests of a kept-alive connection, or no HTTP/2 stream open
	reaper  *time.Timer // closes the connection once idle for idleAfter; made the first time it is idle
}

type pendingKey struct{}

func (g *headGate) connContext(ctx context.Context, c net.Conn) context.Context {
	h := &pendingHead{g: g, c: c}
	g.mu.Lock()
	g.conns.Set(c, h)
	g.mu.Unlock()
	return context.WithValue(ctx, pendingKey{}, h)
}

func (g *headGate) state(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	h, _ := g.conns.Get(c)
	if st == http.StateClosed || st == http.StateHijacked {
		g.conns.Delete(c)
	}
	g.mu.Unlock()
	switch st {
	case http.StateNew:
		g.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		g.open.Add(-1)
	}
	if h == nil {
		return
	}
	switch st {
	case http.StateNew:
		if !h.start() {
			g.refuse(c, "memory budget under pressure")
		}
	case http.StateActive:
		if h.idle.Swap(false) {
			h.start() // the next request on a kept-alive connection
		}
		h.stopReaper()
	case http.StateIdle:
		h.idle.Store(true)
		h.finish()
		h.startReaper()
	default:
		h.finish()
		h.stopReaper()
	}
}

// startReaper has the connection closed if it is still idle after
// idleAfter. net/http calls a connection's state changes one at a time,
// so the timer is touched by one goroutine at a time.
func (h *pendingHead) startReaper() {
	d := h.g.idleAfter
	if d <= 0 {
		return
	}
	if h.reaper == nil {
		h.reaper = time.AfterFunc(d, func() {
			if h.idle.Load() {
				h.c.Close()
			}
		})
		return
	}
	h.reaper.Reset(d)
}

func (h *pendingHead) stopReaper() {
	if h.reaper != nil {
		h.reaper.Stop()
	}
}

// start counts the head, cutting the oldest one in progress if that makes
// too many, and reports whether the memory budget had room for it.
func (h *pendingHead) start() bool {
	if !h.waiting.CompareAndSwap(false, true) {
		return true
	}
	g := h.g
	if !g.budget.Reserve(rally.MemoryHandshakes, g.perHead) {
		h.waiting.Store(false)
		return false
	}
	g.mu.Lock()
	g.queue = append(g.queue, h)
	var oldest *pendingHead
	if n := g.pending.Add(1); g.max > 0 && n > g.max {
		oldest = g.oldestLocked(h)
	}
	if len(g.queue) > 2*int(max(g.max, 512)) {
		g.compactLocked()
	}
	g.mu.Unlock()
	if oldest != nil {
		oldest.finish()
		g.refuse(oldest.c, "too many request heads in progress; the oldest was cut")
	}
	return true
}

// oldestLocked removes and returns the oldest head still in progress
// other than h, or nil.
func (g *headGate) oldestLocked(h *pendingHead) *pendingHead {
	for i, o := range g.queue {
		if o != h && o.waiting.Load() {
			g.queue = g.queue[i+1:]
			return o
		}
	}
	return nil
}

// compactLocked drops finished heads from the queue.
func (g *headGate) compactLocked() {
	q := g.queue[:0]
	for _, o := range g.queue {
		if o.waiting.Load() {
			q = append(q, o)
		}
	}
	clear(g.queue[len(q):])
	g.queue = q
}

func (h *pendingHead) finish() {
	if !h.waiting.CompareAndSwap(true, false) {
		return
	}
	g := h.g
	if g.pending.Add(-1) == 0 {
		// No head is in progress: the queue holds only finished heads,
		// and through them their connections, long served or gone.
		g.mu.Lock()
		if g.pending.Load() == 0 {
			g.queue = nil
		}
		g.mu.Unlock()
	}
	g.budget.Release(rally.MemoryHandshakes, g.perHead)
}

// refuse answers a connection whose head cannot be waited for with 503
// when that cannot block (plain TCP: the socket's buffer takes it) and
// closes it.
func (g *headGate) refuse(c net.Conn, why string) {
	g.m.refusals.WithLabelValues("pending_handshakes").Inc()
	g.log.warn("connection refused: "+why, "limit", g.max, "remote", c.RemoteAddr().String())
	if _, tls := c.(*tls.Conn); !tls {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
	}
	c.Close()
}

// headDone ends the head of the request next handles: it has arrived.
func (g *headGate) headDone(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := r.Context().Value(pendingKey{}).(*pendingHead); ok {
			h.finish()
		}
		next.ServeHTTP(w, r)
	})
}
