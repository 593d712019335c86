package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Run drives the load cfg describes and returns what it measured. It
// returns an error only when the run cannot take place: an invalid Config,
// or no connection could be opened (for chat: not all of them). Failures
// during the run are counted in Result.Errors. Run returns when the window
// is over or ctx ends (the window is then cut short), after closing every
// connection it opened and ending every goroutine it started.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = Defaults(cfg)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t, err := newTarget(cfg.URL, cfg.InsecureTLS, cfg.Compress)
	if err != nil {
		return nil, err
	}
	t.sources = cfg.SourceAddrs
	r := &run{cfg: cfg, target: t}
	res := &Result{
		Scenario: cfg.Scenario, URL: redactURL(cfg.URL), Conns: cfg.Conns, Size: cfg.Size,
		Text: cfg.Text, InFlight: cfg.InFlight, VerbatimEcho: cfg.VerbatimEcho, Compress: cfg.Compress,
		Started: time.Now(), WarmupSeconds: cfg.Warmup.Seconds(),
	}
	switch cfg.Scenario {
	case Echo, Throughput:
		res.Unit = "replies"
		err = r.echo(ctx, res)
	case Chat:
		res.Unit = "deliveries"
		err = r.chat(ctx, res)
	case Connect:
		res.Unit = "handshakes"
		err = r.connect(ctx, res)
	case Idle:
		res.Unit = "connections"
		err = r.idle(ctx, res)
	}
	if err != nil {
		return nil, err
	}
	res.Errors = r.errs.n.Load()
	res.CompressedConns = t.compressed.Load()
	res.ErrorSamples = r.errs.samples()
	return res, nil
}

// run is the state shared by the goroutines of one Run.
type run struct {
	cfg    Config
	target *target
	errs   errorLog

	base           time.Time
	startNs, endNs atomic.Int64 // the window, in nanoseconds since base
	ending         atomic.Bool

	mu    sync.Mutex
	conns []net.Conn

	zonce sync.Once
	zbody []byte // the payload compressed, made once per run
}

func (r *run) now() int64 { return int64(time.Since(r.base)) }

// worker holds what one connection (or connect worker) counted.
type worker struct {
	live  atomic.Int64 // everything, warm-up included, for progress
	_     [56]byte     // keeps the live counters of workers apart in cache
	n     int64        // in the window
	bytes int64
	hist  histogram
}

// conn is an open connection with its pre-built frames.
type conn struct {
	nc     net.Conn
	rd     *reader
	op     byte
	frame  []byte // one masked message
	batch  []byte // InFlight copies of frame
	expect []byte // the payload of a correct reply
}

// readBufferSize is the read buffer of a loaded connection; idle and
// connect connections use smallBuffer.
const (
	readBufferSize = 64 << 10
	smallBuffer    = 512
	// asyncWrites is the batch size past which a connection writes from a
	// goroutine of its own, so that a server that echoes while we still
	// write cannot fill both directions and stall.
	asyncWrites = 32 << 10
)

func (r *run) newConn(nc net.Conn, rest []byte, payload []byte) *conn {
	c := &conn{nc: nc, op: opBinary}
	if r.cfg.Text {
		c.op = opText
	}
	var key [4]byte
	k := rand.Uint32()
	key[0], key[1], key[2], key[3] = byte(k), byte(k>>8), byte(k>>16), byte(k>>24)
	if _, ok := nc.(*compressedConn); ok {
		r.zonce.Do(func() { r.zbody = deflateMessage(payload) })
		c.frame = clientFrameRsv(c.op, bitRsv1, r.zbody, key)
	} else {
		c.frame = clientFrame(c.op, payload, key)
	}
	c.expect = payload
	if r.cfg.VerbatimEcho {
		c.expect = c.frame[len(c.frame)-len(payload):]
	}
	k2 := max(r.cfg.InFlight, 1)
	c.batch = make([]byte, 0, k2*len(c.frame))
	for range k2 {
		c.batch = append(c.batch, c.frame...)
	}
	c.rd = newReader(nc, readBufferSize, rest)
	c.rd.masked = r.cfg.VerbatimEcho
	return c
}

// track remembers nc so that abort and closeAll reach it.
func (r *run) track(nc net.Conn) {
	r.mu.Lock()
	r.conns = append(r.conns, nc)
	r.mu.Unlock()
}

// abort ends the run early: every blocked read or write returns at once.
func (r *run) abort() {
	r.ending.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, nc := range r.conns {
		nc.SetDeadline(time.Unix(1, 0))
	}
}

// closeAll says goodbye with a close frame (code 1000) on every tracked
// connection, without waiting for the answer, and closes them.
func (r *run) closeAll() {
	r.ending.Store(true)
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for _, nc := range conns {
		nc.SetDeadline(time.Now().Add(100 * time.Millisecond))
		nc.Write(closeFrame)
		nc.Close()
	}
}

// failed records err unless the run is already ending, when errors are
// the deadline or close that ends it.
func (r *run) failed(err error) {
	if !r.ending.Load() && r.now() < r.endNs.Load() {
		r.errs.add(err)
	}
}

// openAll opens n connections with up to 32 dials at once and hands each to
// use. It returns how many opened and the first error.
func (r *run) openAll(ctx context.Context, n int, spread bool, use func(i int, nc net.Conn, rest []byte, took time.Duration)) (int, error) {
	var next, opened atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(n, 32) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				nc, rest, err := r.target.dial(ctx, spread)
				if err != nil {
					r.errs.add(err)
					once.Do(func() { firstErr = err })
					continue
				}
				opened.Add(1)
				r.track(nc)
				use(i, nc, rest, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return int(opened.Load()), firstErr
}

// schedule fixes the warm-up and the window from now on.
func (r *run) schedule() {
	r.base = time.Now()
	r.startNs.Store(int64(r.cfg.Warmup))
	r.endNs.Store(int64(r.cfg.Warmup + r.cfg.Duration))
}

// supervise waits for the window to pass, reporting progress every second
// and sampling the timeline, and returns the meter of the window. If ctx
// ends first it aborts the run and cuts the window short.
func (r *run) supervise(ctx context.Context, res *Result, live func() int64, phase string) *meter {
	var m *meter
	var opened, last int64 // live counts at the opening of the window and at the last mark
	nextMark := int64(time.Second)
	report := func(rate float64) {
		if r.cfg.Progress == nil {
			return
		}
		p := Progress{Phase: phase, Duration: r.cfg.Duration, Rate: rate, Errors: r.errs.n.Load()}
		switch {
		case phase == "holding":
			p.Elapsed = time.Duration(r.now() - r.startNs.Load())
			p.Messages = live()
		case m != nil:
			p.Phase = "measuring"
			p.Elapsed = time.Duration(r.now() - r.startNs.Load())
			p.Messages = live() - opened
		}
		r.cfg.Progress(p)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := r.now()
		if m == nil && now >= r.startNs.Load() {
			m = startMeter(r.cfg.ServerPID)
			opened = live()
			last = opened
			nextMark = r.startNs.Load() + int64(time.Second)
		}
		if now >= r.endNs.Load() {
			break
		}
		if now >= nextMark {
			c := live()
			if m != nil {
				res.Timeline = append(res.Timeline, c-last)
			}
			report(float64(c - last))
			last = c
			nextMark += int64(time.Second)
			continue
		}
		wake := min(nextMark, r.endNs.Load())
		if m == nil {
			wake = min(wake, r.startNs.Load())
		}
		timer.Reset(time.Duration(wake - now))
		select {
		case <-ctx.Done():
			r.endNs.Store(r.now())
			r.abort()
			if m == nil {
				r.startNs.Store(r.endNs.Load())
				m = startMeter(r.cfg.ServerPID)
			}
			m.stop()
			return m
		case <-timer.C:
		}
	}
	m.stop()
	return m
}

// finish merges the workers into res.
func (r *run) finish(res *Result, m *meter, workers []*worker) {
	var h histogram
	for _, w := range workers {
		res.Messages += w.n
		res.PayloadBytes += w.bytes
		h.merge(&w.hist)
	}
	window := time.Duration(r.endNs.Load() - r.startNs.Load())
	if window < 0 {
		window = 0
	}
	res.WindowSeconds = window.Seconds()
	if window > 0 {
		res.Rate = float64(res.Messages) / window.Seconds()
		res.MiBPerSecond = float64(res.PayloadBytes) / window.Seconds() / (1 << 20)
	}
	res.Latency = h.summary()
	m.fill(res)
}

func liveSum(workers []*worker) func() int64 {
	return func() int64 {
		var n int64
		for _, w := range workers {
			n += w.live.Load()
		}
		return n
	}
}

// reply checks one echoed or delivered message against what was sent.
func (r *run) reply(c *conn, m message, compared bool) error {
	switch {
	case m.op != c.op:
		return fmt.Errorf("reply is a %s message, want %s", opName(m.op), opName(c.op))
	case m.size != int64(len(c.expect)):
		return fmt.Errorf("reply has %d bytes, want %d", m.size, len(c.expect))
	case compared && !m.same:
		return errors.New("reply bytes differ from the message sent")
	}
	return nil
}

func opName(op byte) string {
	switch op {
	case opText:
		return "text"
	case opBinary:
		return "binary"
	}
	return fmt.Sprintf("opcode %#x", op)
}

// sender writes a connection's pre-built frames, from the caller's
// goroutine for small batches or from a goroutine of its own for large ones.
type sender struct {
	c     *conn
	r     *run
	queue chan int
	done  chan struct{}
}

func (r *run) newSender(c *conn) *sender {
	s := &sender{c: c, r: r}
	if len(c.batch) > asyncWrites {
		s.queue = make(chan int, max(r.cfg.InFlight, 1))
		s.done = make(chan struct{})
		go s.loop()
	}
	return s
}

// send writes n frames.
func (s *sender) send(n int) error {
	if s.queue != nil {
		s.queue <- n
		return nil
	}
	_, err := s.c.nc.Write(s.c.batch[:n*len(s.c.frame)])
	return err
}

func (s *sender) loop() {
	defer close(s.done)
	failed := false
	for n := range s.queue {
		if failed {
			continue
		}
		if _, err := s.c.nc.Write(s.c.batch[:n*len(s.c.frame)]); err != nil {
			s.r.failed(err)
			failed = true
		}
	}
}

// stop ends the sender's goroutine, if any.
func (s *sender) stop() {
	if s.queue != nil {
		close(s.queue)
		<-s.done
	}
}

// echo runs the echo and throughput scenarios.
func (r *run) echo(ctx context.Context, res *Result) error {
	payload := Payload(r.cfg.Size, r.cfg.Text)
	conns := make([]*conn, r.cfg.Conns)
	opened, err := r.openAll(ctx, r.cfg.Conns, r.cfg.Conns > 1000, func(i int, nc net.Conn, rest []byte, _ time.Duration) {
		conns[i] = r.newConn(nc, rest, payload)
	})
	if opened == 0 {
		return fmt.Errorf("loadgen: no connection opened: %w", err)
	}
	defer r.closeAll()
	r.schedule()
	workers := make([]*worker, 0, opened)
	var wg sync.WaitGroup
	for _, c := range conns {
		if c == nil {
			continue
		}
		c.nc.SetDeadline(r.base.Add(time.Duration(r.endNs.Load())))
		w := &worker{}
		workers = append(workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.echoConn(w, c)
		}()
	}
	m := r.supervise(ctx, res, liveSum(workers), "warmup")
	r.ending.Store(true)
	r.abort()
	wg.Wait()
	r.finish(res, m, workers)
	return nil
}

// echoConn keeps InFlight messages outstanding on c until the window ends.
// Replies drained from one read are answered by one write.
func (r *run) echoConn(w *worker, c *conn) {
	k := r.cfg.InFlight
	sent := make([]int64, k) // send times, a ring in reply order
	head, tail, unsent := 0, 0, k
	s := r.newSender(c)
	defer s.stop()
	flush := func() error {
		if unsent == 0 {
			return nil
		}
		t := r.now()
		for range unsent {
			sent[tail] = t
			if tail++; tail == k {
				tail = 0
			}
		}
		n := unsent
		unsent = 0
		return s.send(n)
	}
	c.rd.flush = flush
	if err := flush(); err != nil {
		r.failed(err)
		return
	}
	var seen int64
	for {
		compare := seen%SampleEvery == 0
		m, err := c.rd.next(c.expect, compare)
		t := r.now()
		if err != nil {
			r.failed(err)
			return
		}
		if t >= r.endNs.Load() {
			return
		}
		seen++
		lat := t - sent[head]
		if head++; head == k {
			head = 0
		}
		w.live.Add(1)
		if err := r.reply(c, m, compare); err != nil {
			r.errs.add(err)
		} else if t >= r.startNs.Load() {
			w.n++
			w.bytes += m.size
			w.hist.add(lat)
		}
		unsent++
	}
}

// chat runs the chat scenario: rounds in which every client sends InFlight
// messages and then reads until it has received every message of the round.
func (r *run) chat(ctx context.Context, res *Result) error {
	payload := Payload(r.cfg.Size, r.cfg.Text)
	n := r.cfg.Conns
	conns := make([]*conn, n)
	opened, err := r.openAll(ctx, n, n > 1000, func(i int, nc net.Conn, rest []byte, _ time.Duration) {
		conns[i] = r.newConn(nc, rest, payload)
	})
	defer r.closeAll()
	if opened < n {
		return fmt.Errorf("loadgen: chat needs all %d clients, %d opened: %w", n, opened, err)
	}
	r.awaitRoom(conns)
	r.schedule()
	workers := make([]*worker, n)
	starts := make([]chan int64, n)
	var round sync.WaitGroup
	var wg sync.WaitGroup
	for i, c := range conns {
		c.nc.SetDeadline(r.base.Add(time.Duration(r.endNs.Load())))
		workers[i] = &worker{}
		starts[i] = make(chan int64, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.chatClient(workers[i], c, starts[i], &round)
		}()
	}
	var rounds atomic.Int64
	var inWindow []time.Duration // rounds begun and ended in the window
	var open time.Duration       // the round cut by the window's end: its age then
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			for _, ch := range starts {
				close(ch)
			}
		}()
		for !r.ending.Load() && r.now() < r.endNs.Load() {
			round.Add(n)
			t0 := r.now()
			for _, ch := range starts {
				ch <- t0
			}
			round.Wait()
			if t := r.now(); t < r.endNs.Load() && !r.ending.Load() {
				rounds.Add(1)
				if t0 >= r.startNs.Load() {
					inWindow = append(inWindow, time.Duration(t-t0))
				}
			} else {
				// Begun in the warm-up or the window, and cut by its end.
				open = time.Duration(r.endNs.Load() - t0)
			}
		}
	}()
	m := r.supervise(ctx, res, liveSum(workers), "warmup")
	r.ending.Store(true)
	r.abort()
	wg.Wait()
	if rounds.Load() == 0 && ctx.Err() == nil {
		r.errs.add(fmt.Errorf("chat: no round completed: each client must receive every message of the room (%d per round)", n*r.cfg.InFlight))
	}
	r.finish(res, m, workers)
	res.Rounds = roundStats(inWindow, open)
	return nil
}

// awaitRoom sends a ping on every client and waits (up to 2 s) for the
// pongs: a server answers a ping once it reads the connection, after it
// has put it in the room, so no client misses the first round.
func (r *run) awaitRoom(conns []*conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nc.SetDeadline(time.Now().Add(2 * time.Second))
			defer c.nc.SetDeadline(time.Time{})
			if _, err := c.nc.Write(clientFrame(opPing, []byte("room?"), [4]byte{})); err != nil {
				return
			}
			c.rd.stopAtPong = true
			defer func() { c.rd.stopAtPong = false }()
			for {
				if _, err := c.rd.next(nil, false); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (r *run) chatClient(w *worker, c *conn, start <-chan int64, round *sync.WaitGroup) {
	k := r.cfg.InFlight
	want := r.cfg.Conns * k
	s := r.newSender(c)
	defer s.stop()
	var seen int64
	for t0 := range start {
		if err := s.send(k); err != nil {
			r.failed(err)
			r.abort()
			round.Done()
			return
		}
		for got := 0; got < want; got++ {
			compare := seen%SampleEvery == 0
			m, err := c.rd.next(c.expect, compare)
			t := r.now()
			if err != nil {
				r.failed(err)
				r.abort()
				round.Done()
				return
			}
			seen++
			w.live.Add(1)
			if err := r.reply(c, m, compare); err != nil {
				r.errs.add(err)
			} else if t >= r.startNs.Load() && t < r.endNs.Load() {
				w.n++
				w.bytes += m.size
				w.hist.add(t - t0)
			}
		}
		round.Done()
	}
}

// connect runs the connect scenario: each worker dials, completes the
// opening handshake, then the close handshake, and again.
func (r *run) connect(ctx context.Context, res *Result) error {
	r.schedule()
	cctx, cancel := context.WithDeadline(ctx, r.base.Add(time.Duration(r.endNs.Load())))
	defer cancel()
	workers := make([]*worker, r.cfg.Conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !r.ending.Load() && r.now() < r.endNs.Load() {
				t0 := r.now()
				nc, rest, err := r.target.dial(cctx, true)
				t1 := r.now()
				if err != nil {
					if ctx.Err() == nil { // an interrupt is not the server's error
						r.failed(err)
					}
					continue
				}
				w.live.Add(1)
				if t1 >= r.startNs.Load() && t1 < r.endNs.Load() {
					w.n++
					w.hist.add(t1 - t0)
				}
				closeHandshake(nc, rest)
			}
		}()
	}
	m := r.supervise(ctx, res, liveSum(workers), "warmup")
	r.ending.Store(true)
	cancel()
	wg.Wait()
	r.finish(res, m, workers)
	return nil
}

// closeHandshake sends a close frame and waits (up to 1 s) for the
// server's, then closes the connection.
func closeHandshake(nc net.Conn, rest []byte) {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	if _, err := nc.Write(closeFrame); err != nil {
		return
	}
	rd := newReader(nc, smallBuffer, rest)
	for {
		if _, err := rd.next(nil, false); err != nil {
			return
		}
	}
}

// isTerminal reports whether w is a terminal, where live progress belongs.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
