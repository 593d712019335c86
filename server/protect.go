package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rallyws/rally"
)

// Protection is the part of Config that bounds what clients can make the
// server hold before and after the handshake. Its zero value has every
// default (see each field).
type Protection struct {
	// MemoryLimit is the server's memory budget in bytes (see
	// rally.MemoryBudget): past 80% of it, measured as the larger of what
	// clients hold and what the Go runtime holds, the largest slow send
	// queues and messages being gathered are shed; once what clients hold
	// passes 90% of it, or the runtime holds all of it, new WebSocket
	// handshakes get 503 (see rally.MemoryBudget.AdmitsNew). Messages
	// being gathered may hold half of it, and must keep arriving (see
	// rally.MemoryBudgetOptions).
	// 0 means DefaultMemoryLimit(); negative means no limit (memory is
	// still accounted and shown in /metrics). Ignored when MemoryBudget is
	// set.
	MemoryLimit int64
	// MemoryBudget, when set, is a budget shared with other servers of
	// the process; the server neither changes its limit nor owns it.
	MemoryBudget *rally.MemoryBudget
	// ReturnMemory lets the server force garbage collections of the whole
	// process to give memory back to the operating system: after a wave of
	// connections (it turns on rally.ReturnMemoryAfterWaves), after a mass
	// disconnect or once clients gave back much of what they held (at most
	// once per 10 s), and under memory pressure when what the runtime
	// holds may be garbage (at most once a second). A forced collection
	// stalls the process's busy goroutines while it marks (tens of
	// milliseconds per GiB of heap), so it is off by default: a process
	// whose memory is mostly its connections wants it (rally serve turns
	// it on; --return-memory=false turns it off), one with a large heap of
	// its own does not. Off, the server never forces a collection: RSS
	// falls back after a load only as the Go runtime's scavenger returns
	// pages, and memory pressure is judged on what the runtime holds,
	// garbage included.
	ReturnMemory bool

	// MaxHeaderBytes bounds a request head (request line and headers):
	// past it net/http answers 431 and closes. Default 16 KiB.
	MaxHeaderBytes int
	// MaxPendingHandshakes bounds the connections whose request head has
	// not arrived whole yet (slow or stalled clients): past it, the oldest
	// of them is answered 503 and closed, so that clients that send their
	// head at once are still served. Default 1024; negative means no
	// limit.
	MaxPendingHandshakes int

	// EchoMaxMessageBytes bounds a message on /echo (larger: closed with
	// 1009). Default 1 MiB; negative means the library's limit (16 MiB).
	// The conformance suite's largest cases need 16 MiB.
	EchoMaxMessageBytes int

	// ReadyNeedsNATS makes /readyz answer 503 while the connection to
	// NATS is down, so that a load balancer sends clients to nodes that
	// share topics with the others.
	ReadyNeedsNATS bool

	// OpsAddr, HOST:PORT, is a second listener that serves only /healthz,
	// /readyz and /metrics, with file descriptors kept in reserve for it:
	// it still answers when clients have taken every descriptor the main
	// address can have. "" means none.
	OpsAddr string
}

// Defaults of Protection.
const (
	DefaultMaxHeaderBytes       = 16 << 10
	DefaultMaxPendingHandshakes = 1024
	DefaultEchoMaxMessageBytes  = 1 << 20
	defaultWSMaxMessageBytes    = 64 << 10
)

// fill applies the defaults of p and checks it.
func (p *Protection) fill() error {
	if p.MemoryLimit == 0 && p.MemoryBudget == nil {
		p.MemoryLimit = DefaultMemoryLimit()
	}
	if p.MaxHeaderBytes < 0 {
		return fmt.Errorf("rally serve: max header bytes is %d; want a positive size", p.MaxHeaderBytes)
	}
	if p.MaxHeaderBytes == 0 {
		p.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	p.MaxPendingHandshakes = orDefault(p.MaxPendingHandshakes, DefaultMaxPendingHandshakes)
	p.EchoMaxMessageBytes = orDefault(p.EchoMaxMessageBytes, DefaultEchoMaxMessageBytes)
	return nil
}

// guard is the server's state for Protection.
type guard struct {
	budget       *rally.MemoryBudget
	pressureLog  *everyLog
	shedLog      *everyLog
	opsAddr      atomic.Value // string
	opsLn        *opsListener
	open         openConns
	httpConns    atomic.Int64 // TCP connections net/http serves, not yet WebSockets
	shedConns    prometheus.Counter
	acceptErrors *prometheus.CounterVec
}

// protect wires Protection into a new server: its memory budget, the
// /echo message limit, the metrics and the ops listener.
func (s *Server) protect() error {
	p := &s.cfg.Protection
	s.budget = p.MemoryBudget
	if s.budget == nil {
		s.budget = rally.NewMemoryBudget(max(p.MemoryLimit, 0))
	}
	if s.histHub != nil {
		s.histHub.budget = s.budget
	}
	s.echo.Options.ReadLimit = int64(p.EchoMaxMessageBytes)
	s.echo.Options.ReadLimitReason = tooBigReason("/echo", p.EchoMaxMessageBytes, "echo-max-message-bytes")
	// Every connection charges what its peer makes it hold (messages being
	// gathered, send queues) to the server's budget.
	for _, ws := range []*rally.Server{s.echo, s.ws, s.chat} {
		ws.Options.MemoryBudget = s.budget
	}
	s.trackConns()
	s.pressureLog = newEveryLog(s.log, 10*time.Second)
	s.shedLog = newEveryLog(s.log, 10*time.Second)
	s.acceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_accept_errors_total", Help: "Errors accepting TCP connections, by reason (fd_limit: no file descriptor left; other).",
	}, []string{"reason"})
	s.m.reg.MustRegister(budgetCollector{s}, s.acceptErrors)
	if p.OpsAddr != "" {
		return s.listenOps(p.OpsAddr)
	}
	return nil
}

// MemoryBudget returns the budget the server charges what clients hold
// to (its own, or Config.MemoryBudget).
func (s *Server) MemoryBudget() *rally.MemoryBudget { return s.budget }

// admitMemory refuses a WebSocket handshake with 503 when the memory
// budget is under pressure, counts it and logs it (once per interval).
func (s *Server) admitMemory(w http.ResponseWriter, r *http.Request) bool {
	if s.budget.AdmitsNew() {
		return true
	}
	s.m.refused("memory")
	s.pressureLog.warn("handshakes refused: memory budget under pressure",
		"pressure", s.budget.Pressure().String(), "used", s.budget.Used(), "limit", s.budget.Limit())
	w.Header().Set("Retry-After", "5")
	http.Error(w, "server busy; retry later", http.StatusServiceUnavailable)
	return false
}

// gcInterval is the least time between two collections the memory watch
// forces to learn whether what the runtime holds is live; freeInterval
// between two returns of free memory to the OS.
const (
	gcInterval   = time.Second
	freeInterval = 10 * time.Second
)

// idleFreeBytes is how much free heap the runtime may keep from the OS
// (and at least half of what is in use) before the memory watch gives it
// back at once rather than leaving it to the background scavenger.
const idleFreeBytes = 64 << 20

// massDisconnect is how many connections (WebSockets, and TCP
// connections still in their request) must have closed since the
// last return of memory to the OS (from the most open since) for the
// memory watch to collect and return memory again. A burst of closes is
// seen over several ticks, and what closing connections release comes
// after their count drops: the next return, freeInterval later, takes it.
const massDisconnect = 100

// massRelease is how much of what clients held (as charged to the
// budget) must have been given back since the last return of memory to
// the OS for the memory watch to return it again: slow readers cut one by
// one during an attack leave their buffers pooled for reuse.
const massRelease = 64 << 20

// connectWaveSteady is how long the number of connections must have
// stayed within a tenth of massDisconnect for a wave of new connections
// to count as over.
const connectWaveSteady = time.Second

// watchMemory tells the budget, every quarter second until ctx ends, how
// much memory the Go runtime holds (heap and stacks in use, not what is
// free or returned to the OS), and sheds the largest send queues under
// elevated pressure (see shedSlowest).
//
// Memory the runtime counts as in use may be garbage no collection has
// reclaimed yet (the queues of connections just cut; nothing allocates
// once a load has ended): when that is what makes the pressure, it forces
// a collection (at most once per gcInterval), so that new clients are not
// refused for memory that is not held; after a mass disconnect, once
// clients gave back much of what they held, or when the runtime keeps
// much more free memory than idleFreeBytes, it gives it back to the OS
// (two collections and debug.FreeOSMemory, at most once per freeInterval), so
// that RSS goes back down after the load (not while clients still hold
// much: an attack that sheds connections goes on). So it does, at most
// once per freeInterval too, once a wave of at least massDisconnect new
// connections is over (their number steady for connectWaveSteady): each
// handshake left garbage (net/http's buffers and request) that grew the
// heap to the collector's goal, and the pages of that growth would stay
// resident while the connections stay. Neither runs on a connection's
// path.
//
// Each forced collection runs only with Protection.ReturnMemory, which
// also asks rally to give memory back after a wave of connections (a
// connect storm's handshake garbage, a mass disconnect; see
// rally.ReturnMemoryAfterWaves): without it the watch only measures and
// sheds.
func (s *Server) watchMemory(ctx context.Context) {
	forceGC := s.cfg.ReturnMemory
	if forceGC {
		rally.ReturnMemoryAfterWaves(true)
	}
	samples := []rtmetrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	var free int64 // heap memory free but not yet given back to the OS
	held := func() int64 {
		rtmetrics.Read(samples)
		if samples[0].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		free = int64(samples[2].Value.Uint64())
		return int64(samples[0].Value.Uint64() - samples[1].Value.Uint64() - samples[2].Value.Uint64())
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var lastGC, lastFree, lastWave time.Time
	again := false
	// Connections are WebSockets and TCP connections whose request is
	// still served (a slowloris closes only those).
	connections := func() int64 { return s.conns.Load() + s.httpConns.Load() }
	peakConns := connections()
	peakUsed := s.budget.Used()
	// The fewest connections since the last return after a connect
	// wave, and the count they last held steady at, since when.
	lowConns := peakConns
	steadyConns, steadySince := peakConns, time.Now()
	for {
		h := held()
		s.budget.Observe(h)
		conns := connections()
		peakConns = max(peakConns, conns)
		lowConns = min(lowConns, conns)
		if d := conns - steadyConns; d >= massDisconnect/10 || -d >= massDisconnect/10 {
			steadyConns, steadySince = conns, time.Now()
		}
		used := s.budget.Used()
		peakUsed = max(peakUsed, used)
		// Connections closed, or free heap, count once clients hold
		// little: while an attack goes on (connections shed to make room
		// are replaced by others), a collection and a return to the OS
		// would stop the world and hand back pages that the next
		// messages fault in again.
		settled := used <= massRelease
		massGone := peakConns-conns >= massDisconnect && settled
		massReleased := peakUsed-used >= massRelease
		idleFree := free >= idleFreeBytes && free >= h/2 && settled
		if forceGC && (massGone || massReleased || idleFree || again) && time.Since(lastFree) >= freeInterval {
			// Buffers pooled for reuse survive one collection (a
			// sync.Pool keeps them for one more): two give them back.
			runtime.GC()
			debug.FreeOSMemory()
			s.m.memoryReturns.WithLabelValues(returnedAfter(massGone, massReleased, idleFree)).Inc()
			// Once more after the next interval: connections that just
			// closed may still hold their buffers (a close handshake).
			again = massGone || massReleased
			lastGC, lastFree, peakConns, peakUsed = time.Now(), time.Now(), conns, used
			s.budget.Observe(held())
		}
		// A connect wave is told apart from a disconnect's: a server
		// that lost its clients and gets them back returns both.
		waveOver := conns-lowConns >= massDisconnect && time.Since(steadySince) >= connectWaveSteady && settled
		if forceGC && waveOver && time.Since(lastWave) >= freeInterval {
			runtime.GC()
			debug.FreeOSMemory()
			s.m.memoryReturns.WithLabelValues("connect_wave").Inc()
			lastGC, lastWave, lowConns = time.Now(), time.Now(), conns
			s.budget.Observe(held())
		}
		pressed := s.budget.Pressure() >= rally.PressureElevated && s.budget.Used() < s.budget.Limit()/10*8
		if forceGC && pressed && time.Since(lastGC) >= gcInterval {
			runtime.GC()
			lastGC = time.Now()
			s.budget.Observe(held())
		}
		n := s.budget.Relieve()
		if s.budget.Pressure() >= rally.PressureElevated {
			n += s.shedSlowest()
		}
		if n > 0 {
			s.shedLog.warn("slow clients cut: memory budget under pressure", "cut", n,
				"used", s.budget.Used(), "limit", s.budget.Limit())
		}
		if h := testHookMemoryWatched.Load(); h != nil {
			(*h)(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// returnedAfter names what made the memory watch give memory back, for
// rally_memory_returns_total.
func returnedAfter(gone, released, idle bool) string {
	switch {
	case gone:
		return "disconnect"
	case released:
		return "release"
	case idle:
		return "idle"
	}
	return "again" // the second return after a disconnect or a release
}

// testHookMemoryWatched, when a test sets it, is called after each turn
// of a memory watch.
var testHookMemoryWatched atomic.Pointer[func(*Server)]

// everyLog logs a line at most once per interval, with the number of
// occurrences it stood for.
type everyLog struct {
	log      *slog.Logger
	interval time.Duration
	next     atomic.Int64 // unix nanoseconds before which nothing is logged
	skipped  atomic.Int64
}

func newEveryLog(log *slog.Logger, interval time.Duration) *everyLog {
	return &everyLog{log: log, interval: interval}
}

func (e *everyLog) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	next := e.next.Load()
	if now < next || !e.next.CompareAndSwap(next, now+int64(e.interval)) {
		e.skipped.Add(1)
		return
	}
	if n := e.skipped.Swap(0); n > 0 {
		args = append(args, "more_since_last_line", n)
	}
	e.log.Warn(msg, args...)
}

// budgetCollector exports the memory budget.
type budgetCollector struct{ s *Server }

var (
	budgetUsed     = prometheus.NewDesc("rally_memory_budget_used_bytes", "Bytes clients make the server hold, by category (handshakes, assembly, inflate, send_queues, h2_streams, subscriptions, recovery), as charged to the memory budget.", []string{"category"}, nil)
	budgetPeak     = prometheus.NewDesc("rally_memory_budget_peak_bytes", "The most bytes charged at once, by category.", []string{"category"}, nil)
	budgetRefused  = prometheus.NewDesc("rally_memory_budget_refusals_total", "Charges the memory budget refused, by category.", []string{"category"}, nil)
	budgetLimit    = prometheus.NewDesc("rally_memory_limit_bytes", "The memory budget's limit (--memory-limit; 0: none).", nil, nil)
	budgetPressure = prometheus.NewDesc("rally_memory_pressure", "The memory budget's pressure: 0 normal, 1 elevated (the largest slow queues and held messages shed), 2 high (new handshakes get 503 as well), 3 critical.", nil, nil)
	budgetShed     = prometheus.NewDesc("rally_memory_shed_queues_total", "Send queues and messages being gathered shed to make room in the memory budget.", nil, nil)
)

func (c budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{budgetUsed, budgetPeak, budgetRefused, budgetLimit, budgetPressure, budgetShed} {
		ch <- d
	}
}

func (c budgetCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.s.budget
	for _, st := range b.Stats() {
		cat := st.Category.String()
		ch <- prometheus.MustNewConstMetric(budgetUsed, prometheus.GaugeValue, float64(st.Used), cat)
		ch <- prometheus.MustNewConstMetric(budgetPeak, prometheus.GaugeValue, float64(st.Peak), cat)
		ch <- prometheus.MustNewConstMetric(budgetRefused, prometheus.CounterValue, float64(st.Refused), cat)
	}
	ch <- prometheus.MustNewConstMetric(budgetLimit, prometheus.GaugeValue, float64(b.Limit()))
	ch <- prometheus.MustNewConstMetric(budgetPressure, prometheus.GaugeValue, float64(b.Pressure()))
	ch <- prometheus.MustNewConstMetric(budgetShed, prometheus.CounterValue, float64(b.Shed()))
}
