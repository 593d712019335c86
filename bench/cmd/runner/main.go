// Command runner runs rally's side-by-side benchmarks: it builds and
// starts every peer server of the bench module, drives each scenario with
// rally's load generator in interleaved rounds (every peer once per round,
// in a rotating order, so that a change in the machine's load touches all
// of them alike), reads each server's CPU time and memory from /proc, and
// writes the medians, with ratios to gorilla and to the best peer, to
// docs/BENCHMARKS-peers.md and charts to bench/results/.
//
// Run it from the bench directory:
//
//	go run ./cmd/runner            # the full comparison (under 10 minutes on 2 cores)
//	go run ./cmd/runner -quick     # a smoke run of a few seconds per scenario, report in a temporary directory
//
// The scenarios whose id ends in -deflate run with permessage-deflate,
// only on the peers that support it (gobwas and the raw TCP echo do not);
// -compress-scenarios=false leaves them out.
//
// It is not a test: it asserts nothing, it measures.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rallyws/rally/loadgen"
)

// scenario is one measured load.
type scenario struct {
	ID    string // file-name friendly
	Title string
	Cfg   loadgen.Config // Scenario, Conns, Size, Text, InFlight
}

func scenarios(idleConns, echoInFlight int) []scenario {
	echo := func(size int, text bool) scenario {
		return scenario{ID: "echo-" + sizeID(size, text), Title: fmt.Sprintf("echo, %s, 64 connections, %d in flight each", sizeTitle(size, text), echoInFlight),
			Cfg: loadgen.Config{Scenario: loadgen.Echo, Conns: 64, Size: size, Text: text, InFlight: echoInFlight}}
	}
	chat := func(size int, text bool, perRound int) scenario {
		return scenario{ID: "chat-" + sizeID(size, text), Title: fmt.Sprintf("chat, %s, 32 clients, %d per client per round", sizeTitle(size, text), perRound),
			Cfg: loadgen.Config{Scenario: loadgen.Chat, Conns: 32, Size: size, Text: text, InFlight: perRound}}
	}
	// burst is a chat of 8 messages per client per round at a large size:
	// each receiver is sent 32 x 8 of them per round (4 MiB at 16 KiB,
	// 16 MiB at 64 KiB), so its queue holds megabytes for a moment, as in a
	// real burst; the rounds of 1 or 2 above drain before they grow.
	burst := func(size int, text bool) scenario {
		sc := chat(size, text, 8)
		sc.ID += "-burst"
		return sc
	}
	// deflate is sc with permessage-deflate offered on every connection.
	deflate := func(sc scenario) scenario {
		sc.ID += "-deflate"
		sc.Title += ", permessage-deflate"
		sc.Cfg.Compress = true
		return sc
	}
	return []scenario{
		echo(16, true), echo(1<<10, true), echo(16<<10, true), echo(64<<10, false),
		chat(16, true, 8), chat(1<<10, true, 8), chat(16<<10, true, 2), chat(64<<10, false, 1),
		burst(16<<10, true), burst(64<<10, false),
		deflate(echo(1<<10, true)), deflate(echo(16<<10, true)), deflate(chat(1<<10, true, 8)),
		{ID: "throughput-256KiB", Title: "throughput, 256 KiB binary, 1 connection, 1 in flight",
			Cfg: loadgen.Config{Scenario: loadgen.Throughput, Size: 256 << 10, InFlight: 1}},
		{ID: "idle", Title: fmt.Sprintf("idle, %d connections held", idleConns),
			Cfg: loadgen.Config{Scenario: loadgen.Idle, Conns: idleConns}},
	}
}

func sizeID(size int, text bool) string {
	kind := "binary"
	if text {
		kind = "text"
	}
	return strings.ReplaceAll(loadgen.Bytes(int64(size)), " ", "") + "-" + kind
}

func sizeTitle(size int, text bool) string {
	if !text {
		return loadgen.Bytes(int64(size)) + " binary"
	}
	if size <= 16 {
		return loadgen.Bytes(int64(size)) + " text"
	}
	return loadgen.Bytes(int64(size)) + " non-ASCII text"
}

// options are the runner's flags.
type options struct {
	rounds    int
	window    time.Duration
	warmup    time.Duration
	idleConns int
	inflight  int
	idleHold  time.Duration
	idleAfter time.Duration
	out       string
	charts    string
	only      string
	onlyPeers string
	quick     bool
	profile   string
	// profilePeer is the rally peer -profile runs (rally or rally-loop).
	profilePeer string
	compress    bool
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per scenario (the report shows medians)")
	flag.DurationVar(&o.window, "window", 1200*time.Millisecond, "measured window of each run")
	flag.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "unmeasured load before each window")
	flag.IntVar(&o.inflight, "echo-inflight", 4, "messages in flight per echo connection")
	flag.IntVar(&o.idleConns, "idle-conns", 10000, "connections of the idle scenario")
	flag.DurationVar(&o.idleHold, "idle-hold", 2*time.Second, "how long the idle connections are held")
	flag.DurationVar(&o.idleAfter, "idle-after", 0, "idle: read the server's memory again this long after the connections closed (the targets say 30s)")
	flag.StringVar(&o.out, "out", "../docs/BENCHMARKS.md", "report to write (between its peers markers, when it has them)")
	flag.StringVar(&o.charts, "charts", "results", "directory of the SVG charts and the raw JSON (relative to the bench module)")
	flag.StringVar(&o.only, "scenarios", "", "comma-separated scenario ids to run (default all)")
	flag.StringVar(&o.onlyPeers, "peers", "", "comma-separated peer names to run (default all but those run only when named: the event-loop count peers)")
	flag.BoolVar(&o.compress, "compress-scenarios", true, "run the permessage-deflate scenarios (ids ending in -deflate) when -scenarios does not name them")
	flag.BoolVar(&o.quick, "quick", false, "smoke run: 1 round of 0.5 s windows, 1000 idle connections, report in a temporary directory")
	flag.StringVar(&o.profile, "profile", "", "instead of the comparison, run this scenario id on rally alone and save a CPU profile of the server in the charts directory")
	flag.StringVar(&o.profilePeer, "profile-peer", "rally", "the peer -profile runs: rally, rally-loop for event-loop mode, rally-hub or rally-hub-loop for chat through pubsub.Hub")
	flag.Parse()
	if o.quick {
		o.rounds, o.window, o.warmup, o.idleConns, o.idleHold = 1, 500*time.Millisecond, 200*time.Millisecond, 1000, 500*time.Millisecond
		dir, err := os.MkdirTemp("", "rally-bench-quick-")
		if err != nil {
			fail(err)
		}
		o.out, o.charts = filepath.Join(dir, "BENCHMARKS-peers.md"), dir
	}
	if _, err := os.Stat("go.mod"); err != nil {
		fail(fmt.Errorf("run the runner from the bench directory (go run ./cmd/runner): %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	do := run
	if o.profile != "" {
		do = profile
	}
	if err := do(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "runner:", err)
	os.Exit(1)
}

// measurement is one window of one peer in one scenario.
type measurement struct {
	Peer     string          `json:"peer"`
	Scenario string          `json:"scenario"`
	Round    int             `json:"round"`
	Result   *loadgen.Result `json:"result,omitempty"`
	Failure  string          `json:"failure,omitempty"`
}

func run(ctx context.Context, o options) error {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "rally-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var list []*peer
	for i := range peers {
		p := &peers[i]
		if o.onlyPeers == "" && !p.Named || slices.Contains(strings.Split(o.onlyPeers, ","), p.Name) {
			list = append(list, p)
		}
	}
	fmt.Fprintln(os.Stderr, "building peers...")
	if err := build(ctx, list, tmp); err != nil {
		return err
	}
	var all []measurement
	var done []scenario
	for _, sc := range scenarios(o.idleConns, o.inflight) {
		if o.only != "" && !slices.Contains(strings.Split(o.only, ","), sc.ID) {
			continue
		}
		if o.only == "" && sc.Cfg.Compress && !o.compress {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		ms := runScenario(ctx, o, sc, list, tmp)
		all = append(all, ms...)
		done = append(done, sc)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := os.MkdirAll(o.charts, 0o755); err != nil {
		return err
	}
	for _, m := range all {
		if m.Result != nil {
			m.Result.Latency.Buckets = nil // percentiles are kept; the full histograms would weigh megabytes
		}
	}
	raw, _ := json.MarshalIndent(all, "", " ")
	if err := os.WriteFile(filepath.Join(o.charts, "peers.json"), raw, 0o644); err != nil {
		return err
	}
	rep := newReport(o, done, list, all, began)
	if err := rep.write(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and charts in %s (%.0fs)\n", o.out, o.charts, time.Since(began).Seconds())
	return nil
}

// runScenario starts every peer that serves sc, runs the rounds, and stops
// them. Idle gets a fresh server per peer, so that memory reflects only
// the connections held.
func runScenario(ctx context.Context, o options, sc scenario, list []*peer, tmp string) []measurement {
	var out []measurement
	var runnable []*peer
	for _, p := range list {
		if p.Pending != "" || !serves(p, sc) {
			continue
		}
		runnable = append(runnable, p)
	}
	path := "/echo"
	if sc.Cfg.Scenario == loadgen.Chat {
		path = "/chat"
	}
	if sc.Cfg.Scenario == loadgen.Idle {
		for _, p := range runnable {
			out = append(out, measureOnFreshServer(ctx, o, sc, p, tmp, path))
		}
		return out
	}
	servers := map[string]*server{}
	for _, p := range runnable {
		s, err := start(p, tmp, tmp, sc.Cfg.Compress)
		if err != nil {
			out = append(out, measurement{Peer: p.Name, Scenario: sc.ID, Failure: err.Error()})
			continue
		}
		servers[p.Name] = s
	}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for round := range o.rounds {
		for i := range runnable {
			p := runnable[(i+round)%len(runnable)]
			s := servers[p.Name]
			if s == nil || ctx.Err() != nil {
				continue
			}
			out = append(out, measure(ctx, o, sc, s, path, round))
		}
	}
	return out
}

// serves reports whether p takes part in sc: the raw TCP echo serves no
// chat and holds no idle connections, and only the peers that support
// permessage-deflate run the compressed scenarios.
func serves(p *peer, sc scenario) bool {
	if p.Verbatim && (sc.Cfg.Scenario == loadgen.Chat || sc.Cfg.Scenario == loadgen.Idle) {
		return false
	}
	return p.Compress || !sc.Cfg.Compress
}

func measureOnFreshServer(ctx context.Context, o options, sc scenario, p *peer, tmp, path string) measurement {
	s, err := start(p, tmp, tmp, sc.Cfg.Compress)
	if err != nil {
		return measurement{Peer: p.Name, Scenario: sc.ID, Failure: err.Error()}
	}
	defer s.stop()
	return measure(ctx, o, sc, s, path, 0)
}

func measure(ctx context.Context, o options, sc scenario, s *server, path string, round int) measurement {
	cfg := sc.Cfg
	cfg.URL = s.url(path)
	cfg.ServerPID = s.pid()
	cfg.Duration, cfg.Warmup = o.window, o.warmup
	if cfg.Scenario == loadgen.Idle {
		cfg.Duration = o.idleHold
		cfg.After = o.idleAfter
	}
	cfg.VerbatimEcho = s.peer.Verbatim
	m := measurement{Peer: s.peer.Name, Scenario: sc.ID, Round: round}
	res, err := loadgen.Run(ctx, cfg)
	switch {
	case err != nil:
		m.Failure = err.Error()
	case !s.alive():
		m.Failure = "the server exited during the run"
	case cfg.Compress && res.CompressedConns != int64(res.Conns):
		// A server that declined the offer would be measured uncompressed
		// under a compressed title.
		m.Failure = fmt.Sprintf("permessage-deflate negotiated on %d of %d connections", res.CompressedConns, res.Conns)
	default:
		m.Result = res
	}
	line := m.Failure
	if res != nil {
		line = fmt.Sprintf("%s %s/s, errors %d", loadgen.Count(res.Rate), res.Unit, res.Errors)
		if cfg.Compress {
			line += fmt.Sprintf(", deflate on %d of %d connections", res.CompressedConns, res.Conns)
		}
		if res.Idle != nil {
			line = fmt.Sprintf("%d held, %s per connection", res.Idle.Held, loadgen.Bytes(int64(res.Idle.RSSPerConnBytes)))
		}
	}
	fmt.Fprintf(os.Stderr, "%-18s round %d  %-10s %s\n", sc.ID, round+1, s.peer.Name, line)
	return m
}
