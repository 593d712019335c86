package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The idle scenario over several processes (`rally bench idle --procs N`):
// a process may hold only so many open files (RLIMIT_NOFILE), so this
// process starts N workers, each `rally bench idle` holding its share of
// the connections, and speaks with them over their standard input and
// output, one JSON object a line:
//
//	worker -> parent  {"event":"held","idle":{...}}       every connection open (and subscribed)
//	worker -> parent  {"event":"delivered","n":N}         the broadcast reached N of its connections
//	worker -> parent  {"event":"result","result":{...}}   at the end
//	parent -> worker  published UNIX_NS                   the broadcast was posted at this time
//	parent -> worker  (end of input)                      stop holding
//
// The parent weighs the servers, posts the broadcast and adds up.

// workerEnv marks a process started as a worker.
const workerEnv = "RALLY_BENCH_WORKER"

// workerCommand returns the command that runs `rally bench` with args;
// tests replace it.
var workerCommand = func(args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, append([]string{"bench"}, args...)...), nil
}

// workerEvent is one line a worker writes.
type workerEvent struct {
	Event  string     `json:"event"`
	Idle   *IdleStats `json:"idle,omitempty"`
	N      int64      `json:"n,omitempty"`
	Result *Result    `json:"result,omitempty"`
}

// runWorker runs cfg as a worker: it reports to stdout and takes the
// broadcast's time and the end of the hold from stdin.
func runWorker(ctx context.Context, cfg Config, stdin io.Reader, stdout io.Writer) int {
	emit := lineWriter[workerEvent](stdout)
	published := make(chan int64, 1)
	release := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "published "); ok {
				if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
					select {
					case published <- ns:
					default:
					}
				}
			}
		}
		close(release)
	}()
	cfg.worker = &workerHooks{
		held:      func(st *IdleStats) { emit(workerEvent{Event: "held", Idle: st}) },
		published: published,
		release:   release,
		progress:  func(n int64) { emit(workerEvent{Event: "delivered", N: n}) },
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rally bench worker: %v\n", err)
		return 1
	}
	emit(workerEvent{Event: "result", Result: res})
	return 0
}

// childEvent is an event of worker i.
type childEvent struct {
	i int
	e workerEvent
}

// child is one running worker.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan workerEvent
	held   *IdleStats
	n      int64 // deliveries so far
	result *Result
	done   bool
}

// workerArgs is the command line of a worker holding conns connections.
func workerArgs(cfg *Config, conns, index int) []string {
	args := []string{"idle", cfg.URL, "--conns", strconv.Itoa(conns), "--duration", "1000000h", "--json"}
	if n := len(cfg.SourceAddrs); n > 0 {
		// Every worker uses every address, each starting at its own.
		list := make([]string, n)
		for i := range n {
			list[i] = cfg.SourceAddrs[(i+index)%n].String()
		}
		args = append(args, "--source-addrs", strings.Join(list, ","))
	}
	if cfg.PingInterval > 0 {
		args = append(args, "--ping-interval", cfg.PingInterval.String())
	}
	if cfg.Subscribe != "" {
		args = append(args, "--subscribe", cfg.Subscribe, "--broadcast-size", strconv.Itoa(cfg.BroadcastSize))
	}
	if cfg.InsecureTLS {
		args = append(args, "--insecure")
	}
	return args
}

// runProcs runs the idle scenario of cfg over procs worker processes.
func runProcs(ctx context.Context, cfg Config, procs int, stderr io.Writer) (*Result, error) {
	cfg = Defaults(cfg)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pids := cfg.serverPIDs()
	res := &Result{Scenario: Idle, URL: redactURL(cfg.URL), Conns: cfg.Conns, Unit: "connections", Started: time.Now()}
	st := &IdleStats{Procs: procs}
	st.RSSBeforeBytes = serversRSS(pids)

	stderr = &lockedWriter{w: stderr}
	children := make([]*child, 0, procs)
	merged := make(chan childEvent, 64)
	quit := make(chan struct{})
	var readers sync.WaitGroup
	defer func() {
		close(quit)
		for _, c := range children {
			c.stdin.Close()
		}
		for _, c := range children {
			c.cmd.Wait()
		}
		readers.Wait()
	}()
	for i := range procs {
		conns := cfg.Conns / procs
		if i < cfg.Conns%procs {
			conns++
		}
		cmd, err := workerCommand(workerArgs(&cfg, conns, i))
		if err != nil {
			return nil, err
		}
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, workerEnv+"=1")
		cmd.Stderr = stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("loadgen: starting worker %d: %w", i, err)
		}
		c := &child{cmd: cmd, stdin: stdin}
		children = append(children, c)
		readers.Go(func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for sc.Scan() {
				var e workerEvent
				if json.Unmarshal(sc.Bytes(), &e) == nil {
					select {
					case merged <- childEvent{i, e}:
					case <-quit:
					}
				}
			}
			select {
			case merged <- childEvent{i, workerEvent{Event: "exit"}}:
			case <-quit:
			}
		})
	}
	// next waits for the next event of any worker, applies it, and reports
	// false when ctx ended or wait passed.
	apply := func(m childEvent) {
		c := children[m.i]
		switch m.e.Event {
		case "held":
			c.held = m.e.Idle
		case "delivered":
			c.n = m.e.N
		case "result":
			c.result = m.e.Result
		case "exit":
			c.done = true
		}
	}
	next := func(wait <-chan time.Time) bool {
		select {
		case m := <-merged:
			apply(m)
			return true
		case <-ctx.Done():
			return false
		case <-wait:
			return false
		}
	}
	count := func(f func(c *child) bool) int {
		n := 0
		for _, c := range children {
			if f(c) {
				n++
			}
		}
		return n
	}
	// Every worker holds its connections (or gave up).
	for count(func(c *child) bool { return c.held != nil || c.done }) < procs {
		if !next(nil) {
			break
		}
	}
	var openStart, openEnd int64
	for _, c := range children {
		if h := c.held; h != nil {
			st.Opened += h.Opened
			st.Subscribed += h.Subscribed
			if openStart == 0 || h.OpenStartNs < openStart {
				openStart = h.OpenStartNs
			}
			openEnd = max(openEnd, h.OpenEndNs)
		}
	}
	if st.Opened == 0 {
		return nil, fmt.Errorf("loadgen: no worker opened a connection")
	}
	st.OpenStartNs, st.OpenEndNs = openStart, openEnd
	st.OpenSeconds = time.Duration(openEnd - openStart).Seconds()
	if st.OpenSeconds > 0 {
		res.Rate = float64(st.Opened) / st.OpenSeconds
	}
	st.RSSHeldBytes = serversRSS(pids)
	st.RSSPeakBytes = st.RSSHeldBytes
	sample := time.NewTicker(time.Second)
	defer sample.Stop()
	var status int
	if cfg.Broadcast != "" && ctx.Err() == nil {
		t0 := time.Now()
		for _, c := range children {
			fmt.Fprintf(c.stdin, "published %d\n", t0.UnixNano())
		}
		status = postBroadcast(ctx, cfg)
		timeout := time.After(broadcastTimeout)
		for {
			var n int64
			for _, c := range children {
				n += c.n
			}
			if n >= int64(st.Subscribed) || count(func(c *child) bool { return c.done }) == procs || !next(timeout) {
				break
			}
		}
	}
	// Hold for the duration, sampling the servers' memory.
	holdStart := time.Now()
	timeout := time.After(cfg.Duration)
	for holding := true; holding; {
		select {
		case <-sample.C:
			st.RSSPeakBytes = max(st.RSSPeakBytes, serversRSS(pids))
		case m := <-merged:
			apply(m)
		case <-timeout:
			holding = false
		case <-ctx.Done():
			holding = false
		}
	}
	res.WindowSeconds = time.Since(holdStart).Seconds()
	st.RSSAfterBytes = serversRSS(pids)
	st.RSSPeakBytes = max(st.RSSPeakBytes, st.RSSAfterBytes)
	for _, c := range children {
		c.stdin.Close()
	}
	for count(func(c *child) bool { return c.done }) < procs {
		apply(<-merged)
	}
	var hs, bh histogram
	var b *BroadcastStats
	var samples []string
	for _, c := range children {
		r := c.result
		if r == nil {
			res.Errors++
			samples = append(samples, "a worker ended without a result")
			continue
		}
		res.Errors += r.Errors
		samples = append(samples, r.ErrorSamples...)
		hs.mergeSummary(r.Latency)
		if r.Idle == nil {
			continue
		}
		st.Held += r.Idle.Held
		st.Pings += r.Idle.Pings
		st.Pongs += r.Idle.Pongs
		if cb := r.Idle.Broadcast; cb != nil {
			if b == nil {
				b = &BroadcastStats{Bytes: cb.Bytes, Subscribers: st.Subscribed, Status: status, FirstSeconds: cb.FirstSeconds}
			}
			b.Delivered += cb.Delivered
			if cb.Delivered > 0 {
				b.FirstSeconds = min(b.FirstSeconds, cb.FirstSeconds)
				b.LastSeconds = max(b.LastSeconds, cb.LastSeconds)
			}
			bh.mergeSummary(cb.Latency)
		}
	}
	if b != nil {
		b.Latency = bh.summary()
		st.Broadcast = b
	}
	if cfg.Broadcast != "" && status != http.StatusOK {
		res.Errors++
		samples = append(samples, fmt.Sprintf("broadcast: the publish endpoint answered %d", status))
	}
	if len(samples) > 5 {
		samples = samples[:5]
	}
	res.ErrorSamples = samples
	res.Latency = hs.summary()
	res.Messages = int64(st.Held)
	if st.Held > 0 && len(pids) > 0 {
		st.RSSPerConnBytes = float64(st.RSSAfterBytes-st.RSSBeforeBytes) / float64(st.Held)
	}
	if cfg.After > 0 && len(pids) > 0 {
		select {
		case <-time.After(cfg.After):
			st.RSSClosedBytes = serversRSS(pids)
			st.ClosedAfterSeconds = cfg.After.Seconds()
		case <-ctx.Done():
		}
	}
	res.Idle = st
	return res, nil
}

// postBroadcast posts the broadcast message once and returns the HTTP
// status (0 when the request failed).
func postBroadcast(ctx context.Context, cfg Config) int {
	req, err := http.NewRequestWithContext(ctx, "POST", cfg.Broadcast, bytes.NewReader(broadcastBody(cfg.BroadcastSize)))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// mergeSummary adds a distribution that another process summarised (its
// buckets) to h.
func (h *histogram) mergeSummary(l Latency) {
	for _, b := range l.Buckets {
		v := int64(b.UpToMicros*1e3) - 1
		h.counts[bucketOf(v)] += b.Count
		h.total += b.Count
	}
	h.max = max(h.max, int64(l.Max*1e3))
}

// lockedWriter serialises the writes of several workers' error output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
