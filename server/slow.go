package server

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// Slow subscribers: a /ws, /chat or Pusher (/app/KEY) connection whose
// send queue stays full is cut.
//
// Past its buffer limit a subscriber's messages are dropped, and a
// dropped send costs its publisher one load (rally's Send refuses it
// without a lock or a write attempt). But a subscriber that never reads
// still holds its kernel buffer and a full queue, and every publish on
// its topics still visits it: 2,000 of them beside one fast subscriber
// took the fast one to 2-20% of its rate alone. The rule an operator
// expects of a pub/sub server is that such a subscriber is let go
// quickly: once its queue has stayed at its limit for
// Config.SlowSubscriberTimeout (default 1 s), whether its peer took no
// byte or too few to make room, it is cut. It holds for every engine and
// for WebSockets over HTTP/2 (a stream whose window stays at 0 fills its
// queue as a socket that is not read does), since it looks only at what
// waits in the connection's queue.
//
// One goroutine watches every /ws connection, and exists only while
// there are some: each turn (a quarter of the timeout) it reads each
// queue's size once. A connection whose peer took bytes since the last
// turn is closed with 1008, its close frame behind what was queued
// (bounded by the close timeout); one whose queue did not move is cut at
// once (1006): a close frame could not reach its peer.

// slowFull is how full a queue must be, as a fraction of its limit, to
// count as at its limit: a send is dropped once the next message does
// not fit, which leaves a queue a message short of the limit.
const slowFull = 0.75

// slowWatch is the watch over /ws connections' send queues.
type slowWatch struct {
	timeout time.Duration // at the limit this long: cut; <= 0: no watch
	full    int           // queue bytes that count as at the limit
	cut     func(c *rally.Conn, moved bool)

	mu    sync.Mutex
	conns shrinkmap.Map[*rally.Conn, struct{}]
	// atLimit is the state of the connections whose queue was at the
	// limit at the last turn, and only theirs: a connection whose queue
	// is not (nearly all of them) costs the watch its entry in conns.
	atLimit map[*rally.Conn]*slowState
	running bool // the watching goroutine exists
}

// slowState is what the watch remembers of a connection at the limit.
type slowState struct {
	since time.Time // when its queue was first seen at the limit
	last  int       // the queue's size at the last turn
}

// newSlowWatch returns a watch cutting connections whose queue holds full
// bytes or more for timeout; timeout <= 0 or full <= 0 watches nothing.
func newSlowWatch(timeout time.Duration, full int, cut func(c *rally.Conn, moved bool)) *slowWatch {
	return &slowWatch{timeout: timeout, full: full, cut: cut}
}

func (w *slowWatch) on() bool { return w.timeout > 0 && w.full > 0 }

// add starts watching c; the watching goroutine starts with the first.
func (w *slowWatch) add(c *rally.Conn) {
	if !w.on() {
		return
	}
	w.mu.Lock()
	w.conns.Set(c, struct{}{})
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
}

// remove stops watching c.
func (w *slowWatch) remove(c *rally.Conn) {
	if !w.on() {
		return
	}
	w.mu.Lock()
	w.conns.Delete(c)
	delete(w.atLimit, c)
	w.mu.Unlock()
}

// run turns until no connection is left to watch.
func (w *slowWatch) run() {
	tick := time.NewTicker(w.timeout / 4)
	defer tick.Stop()
	var cut []*rally.Conn
	var moved []bool
	for now := range tick.C {
		w.mu.Lock()
		if w.conns.Len() == 0 {
			w.running = false
			w.conns.Clear()
			w.atLimit = nil // a map does not shrink
			w.mu.Unlock()
			return
		}
		for c := range w.conns.All() {
			n := c.BufferedCost()
			st := w.atLimit[c]
			switch {
			case n < w.full:
				if st != nil {
					delete(w.atLimit, c)
				}
				continue
			case st == nil:
				if w.atLimit == nil {
					w.atLimit = map[*rally.Conn]*slowState{}
				}
				w.atLimit[c] = &slowState{since: now, last: n}
				continue
			case now.Sub(st.since) >= w.timeout:
				cut = append(cut, c)
				moved = append(moved, n < st.last)
				w.conns.Delete(c)
				delete(w.atLimit, c)
			}
			st.last = n
		}
		if len(w.atLimit) == 0 {
			w.atLimit = nil // a map does not shrink: the next crowd at the limit makes a new one
		}
		w.mu.Unlock()
		for i, c := range cut {
			w.cut(c, moved[i])
		}
		clear(cut)
		cut, moved = cut[:0], moved[:0]
	}
}

// slowStallTurns is how many slow-subscriber timeouts a subscriber's peer
// may take no byte at all while messages wait for it before it is let go
// (1006, by the connection's write-stall timer). The rule above needs its
// queue to fill first: a queue of compressed repeats (a few dozen bytes
// each) behind a stream whose HTTP/2 window stays at 0 took some 20,000
// publishes to fill, each of which copied bytes into 2,000 such queues,
// and a fast subscriber got 1-5% of its rate for the seconds it took.
// Taking nothing for four seconds (the defaults) is a peer that stopped
// reading, whatever it is sent; one that reads, however slowly, is left
// to the rule above.
const slowStallTurns = 4

// subscriberStall is the write-stall timeout of a subscriber endpoint's
// connections: the configured one, or slowStallTurns slow-subscriber
// timeouts if shorter (0: none).
func subscriberStall(cfg Config) time.Duration {
	stall := max(cfg.WriteStallTimeout, 0)
	if cfg.SlowSubscriberTimeout > 0 {
		if s := slowStallTurns * cfg.SlowSubscriberTimeout; stall == 0 || s < stall {
			stall = s
		}
	}
	return stall
}

// unwatch stops watching a subscriber that closed, counting it as cut if
// its peer stalled (see slowStallTurns).
func (s *Server) unwatch(c *rally.Conn, ce *rally.CloseError) {
	s.slow.remove(c)
	if s.slow.on() && errors.Is(ce, rally.ErrWriteStalled) {
		s.m.slowCut.Inc()
		s.log.Debug("slow subscriber cut", "remote", c.RemoteAddr().String(), "stalled", true)
	}
}

// reasonSlow is the reason of the 1008 a slow subscriber gets.
const reasonSlow = "too slow: messages for this client stayed at its buffer limit"

// cutSlow ends a /ws connection whose queue stayed at its limit: a
// subscriber of a history topic with 4010 (recover what you missed);
// another with a close frame (1008) if its peer still takes bytes, at once
// otherwise.
func (s *Server) cutSlow(c *rally.Conn, moved bool) {
	s.m.slowCut.Inc()
	s.log.Debug("slow subscriber cut", "remote", c.RemoteAddr().String(), "close_frame", moved)
	if ss, ok := c.Data().(*wsSession); ok && ss.recovers.Load() {
		// A subscriber of a history topic is told, as when it lags by
		// more than half the history, to recover what it misses
		// (4010), its close frame behind what was queued: a client that
		// reads again gets it; one that does not is cut after the close
		// timeout.
		go c.Close(closeInsufficientState, "insufficient state")
		return
	}
	if !moved {
		c.CloseNow()
		return
	}
	if _, ok := c.Data().(*pusherConn); ok {
		// A Pusher client reconnects after backing off on 4100-4199.
		go c.Close(pusherOverCapacity, reasonSlow)
		return
	}
	// Close waits for the handshake (at most the close timeout) when
	// called outside the connection's callbacks: not on the watch's
	// goroutine.
	go c.Close(rally.ClosePolicyViolation, reasonSlow)
}

// slowFullBytes is what counts as a full queue under the buffer limit
// limit (0: rally.DefaultBufferLimit; negative: no limit, nothing is).
func slowFullBytes(limit int) int {
	if limit == 0 {
		limit = rally.DefaultBufferLimit
	}
	if limit < 0 {
		return 0
	}
	return int(float64(limit) * slowFull)
}

// subscribers serves the handshakes of an endpoint whose clients receive
// what others publish (/ws, /chat, /app/KEY): their TCP connection's
// kernel send buffer is Config.SubscriberSendBuffer.
func (s *Server) subscribers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		capSendBuffer(r, s.cfg.SubscriberSendBuffer)
		h.ServeHTTP(w, r)
	})
}

// capSendBuffer sets the kernel send buffer of the TCP connection under
// a /ws handshake over HTTP/1.1 to n bytes (SO_SNDBUF).
func capSendBuffer(r *http.Request, n int) {
	if n <= 0 || r.ProtoMajor != 1 {
		return
	}
	h, ok := r.Context().Value(pendingKey{}).(*pendingHead)
	if !ok {
		return
	}
	c := h.c
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(n)
	}
}
