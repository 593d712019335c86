package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rallyws/rally/loadgen"
)

// cell is every window of one peer in one scenario.
type cell struct {
	peer                             *peer
	rates, cpu, p50, p99, peak, busy []float64
	perConn, held                    []float64
	closed                           []float64 // RSS after the close, as a ratio to the start (-idle-after)
	errors                           int64
	rounds, stalled                  int // chat rounds in the windows, and those stalled
	failures                         []string
	windows                          int
}

func (c *cell) ok() bool { return len(c.rates) > 0 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type report struct {
	o       options
	scen    []scenario
	peers   []*peer
	cells   map[string]map[string]*cell // scenario id, peer name
	began   time.Time
	elapsed time.Duration
}

func newReport(o options, scen []scenario, list []*peer, all []measurement, began time.Time) *report {
	r := &report{o: o, scen: scen, peers: list, cells: map[string]map[string]*cell{}, began: began, elapsed: time.Since(began)}
	for _, sc := range scen {
		r.cells[sc.ID] = map[string]*cell{}
		for _, p := range list {
			r.cells[sc.ID][p.Name] = &cell{peer: p}
		}
	}
	for _, m := range all {
		c := r.cells[m.Scenario][m.Peer]
		if c == nil {
			continue
		}
		c.windows++
		if m.Failure != "" {
			c.failures = append(c.failures, m.Failure)
			continue
		}
		res := m.Result
		c.errors += res.Errors
		if rs := res.Rounds; rs != nil {
			c.rounds += rs.Completed
			c.stalled += rs.Stalled
		}
		c.rates = append(c.rates, res.Rate)
		c.p50 = append(c.p50, res.Latency.P50)
		c.p99 = append(c.p99, res.Latency.P99)
		c.busy = append(c.busy, res.Machine.OtherBusyPercent)
		if s := res.Server; s != nil {
			c.cpu = append(c.cpu, s.CPUMicrosPerMessage)
			c.peak = append(c.peak, float64(s.PeakRSSBytes))
		}
		if res.Idle != nil {
			c.perConn = append(c.perConn, res.Idle.RSSPerConnBytes)
			c.held = append(c.held, float64(res.Idle.Held))
			if st := res.Idle; st.ClosedAfterSeconds > 0 && st.RSSBeforeBytes > 0 {
				c.closed = append(c.closed, float64(st.RSSClosedBytes)/float64(st.RSSBeforeBytes))
			}
		}
	}
	return r
}

// ratio formats a/b as "1.23x", or "-" when either is missing.
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// best is the highest median rate among the WebSocket peers (the raw TCP
// floor is not a peer to beat, it is the limit).
func (r *report) best(id string) (string, float64) {
	name, top := "", math.NaN()
	for _, p := range r.peers {
		c := r.cells[id][p.Name]
		if p.Verbatim || !c.ok() {
			continue
		}
		if v := median(c.rates); math.IsNaN(top) || v > top {
			name, top = p.Name, v
		}
	}
	return name, top
}

func (r *report) rate(id, peer string) float64 {
	if c := r.cells[id][peer]; c != nil && c.ok() {
		return median(c.rates)
	}
	return math.NaN()
}

func (r *report) write() error {
	var b bytes.Buffer
	r.header(&b)
	r.summary(&b)
	r.targets(&b)
	for _, sc := range r.scen {
		if sc.Cfg.Scenario == loadgen.Idle {
			r.idleSection(&b, sc)
		} else {
			r.section(&b, sc)
		}
	}
	r.footer(&b)
	if err := os.MkdirAll(filepath.Dir(r.o.out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(r.o.out, splice(r.o.out, b.Bytes()), 0o644)
}

// The report goes between these markers when the file already has them, so
// that hand-written sections around it (docs/BENCHMARKS.md's library
// figures) survive a new run.
const (
	beginMarker = "<!-- peers:begin (written by bench/cmd/runner) -->\n"
	endMarker   = "<!-- peers:end -->\n"
)

func splice(path string, report []byte) []byte {
	old, err := os.ReadFile(path)
	if err != nil {
		return report
	}
	i := bytes.Index(old, []byte(beginMarker))
	j := bytes.Index(old, []byte(endMarker))
	if i < 0 || j < i {
		return report
	}
	out := append([]byte(nil), old[:i+len(beginMarker)]...)
	out = append(out, report...)
	return append(out, old[j:]...)
}

func (r *report) chartLink(id string) string {
	base, err1 := filepath.Abs(filepath.Dir(r.o.out))
	target, err2 := filepath.Abs(filepath.Join(r.o.charts, id+".svg"))
	rel, err := filepath.Rel(base, target)
	if err1 != nil || err2 != nil {
		err = errors.Join(err1, err2)
	}
	if err != nil {
		rel = filepath.Join(r.o.charts, id+".svg")
	}
	return filepath.ToSlash(rel)
}

func (r *report) header(b *bytes.Buffer) {
	fmt.Fprintf(b, "# rally and its peers, side by side\n\n")
	fmt.Fprintf(b, "Written by `cd bench && go run ./cmd/runner%s` on %s, in %.0f s. ",
		r.flagsUsed(), r.began.UTC().Format("2006-01-02 15:04 MST"), r.elapsed.Seconds())
	fmt.Fprintf(b, "Every peer runs the same load on the same machine in the same run: %d interleaved round(s) per scenario, "+
		"each peer once per round in a rotating order, %.1f s windows after %.1f s of warm-up; tables show medians over the rounds.\n\n",
		r.o.rounds, r.o.window.Seconds(), r.o.warmup.Seconds())
	busy := r.busyRange()
	fmt.Fprintf(b, "**Other work on the machine:** in the measured windows, processes other than the server and the load generator "+
		"kept %s of the machine busy (median %.0f%%, max %.0f%%). The column *other work* gives it per peer; a window with much "+
		"other work measures the peer low, and interleaving spreads that over all peers.%s\n\n", busy.label, busy.median, busy.max, busy.note)
	fmt.Fprintf(b, "## Machine and versions\n\n| | |\n|---|---|\n")
	for _, kv := range machine() {
		fmt.Fprintf(b, "| %s | %s |\n", kv[0], kv[1])
	}
	fmt.Fprintf(b, "\n## Method\n\n")
	fmt.Fprintf(b, "- Load comes from rally's `loadgen` (the engine of `rally bench`), in the runner's process: raw handshake, frames masked once "+
		"and written from a pre-built batch, replies parsed in place. It checks the type and length of every reply and the bytes of one in %d; "+
		"a wrong reply counts as an error, never as a message.\n", loadgen.SampleEvery)
	fmt.Fprintf(b, "- **echo**: 64 connections, %d messages in flight each (closed loop; uWebSockets' method keeps one, but on 2 cores shared with the "+
		"load generator one in flight leaves every peer, the raw TCP floor included, bound by the generator's own system calls); "+
		"rate = replies/s, latency = round trip.\n", r.o.inflight)
	fmt.Fprintf(b, "- **chat**: 32 clients in one room; the server delivers every message to all 32, the sender included (Bun's bench/websocket-server method); "+
		"in rounds, each client sends its messages, then waits for all of the round's; rate = deliveries/s, latency = round start to delivery; a round that lasts over 4x the median round of its window (or is still open after that long) is stalled, counted in the errors column.\n")
	fmt.Fprintf(b, "- **throughput**: one connection, 256 KiB binary echo, one in flight (undici's method).\n")
	fmt.Fprintf(b, "- **idle**: open the connections on a freshly started server, hold them, and divide the growth of its resident memory (VmRSS) by the connections held.\n")
	fmt.Fprintf(b, "- Server CPU is user + system time from /proc/PID/stat over the window, per message; peak RSS is VmHWM during the window "+
		"(reset before each window; it includes memory the server kept from earlier windows of the same scenario). "+
		"Each scenario starts its servers afresh. The servers use the machine's 2 cores, as does the load generator: on this machine "+
		"the two compete, so *server CPU per message* is the fairest measure of a server's cost.\n")
	fmt.Fprintf(b, "- *vs best* compares with the fastest WebSocket peer of the scenario; the raw TCP echo is the floor, not a peer, and gets its own column.\n\n")
}

func (r *report) flagsUsed() string {
	if len(os.Args) <= 1 {
		return ""
	}
	return " " + strings.Join(os.Args[1:], " ")
}

type busyStats struct {
	label, note string
	median, max float64
}

func (r *report) busyRange() busyStats {
	var all []float64
	for _, byPeer := range r.cells {
		for _, c := range byPeer {
			all = append(all, c.busy...)
		}
	}
	if len(all) == 0 {
		return busyStats{label: "an unknown share", median: math.NaN(), max: math.NaN()}
	}
	s := busyStats{median: median(all), max: slices.Max(all)}
	switch {
	case s.median < 5:
		s.label = "little"
	case s.median < 25:
		s.label = "a noticeable share"
	default:
		s.label = "a large share"
		s.note = " The machine was shared with other work during this run: read the ratios, not the absolute rates."
	}
	return s
}

func (r *report) summary(b *bytes.Buffer) {
	fmt.Fprintf(b, "## Summary: median rate as a ratio to %s\n\n| scenario |", reference)
	for _, p := range r.peers {
		fmt.Fprintf(b, " %s |", p.Name)
	}
	fmt.Fprintf(b, " best peer | rally vs best |\n|---|")
	for range r.peers {
		b.WriteString("---:|")
	}
	b.WriteString("---|---:|\n")
	for _, sc := range r.scen {
		if sc.Cfg.Scenario == loadgen.Idle {
			continue
		}
		ref := r.rate(sc.ID, reference)
		fmt.Fprintf(b, "| %s |", sc.ID)
		for _, p := range r.peers {
			c := r.cells[sc.ID][p.Name]
			switch {
			case p.Pending != "":
				b.WriteString(" pending |")
			case c.ok():
				fmt.Fprintf(b, " %s |", ratio(median(c.rates), ref))
			default:
				b.WriteString(" n/a |")
			}
		}
		name, top := r.best(sc.ID)
		fmt.Fprintf(b, " %s (%s/s) | %s |\n", name, loadgen.Count(top), ratio(r.rate(sc.ID, "rally"), top))
	}
	b.WriteString("\n")
}

// targets checks what a user gets against the goals of issue 28: the
// engine the README recommends for a Server on Linux (the event loop,
// rally-loop) and chat through pubsub.Hub on it (rally-hub-loop), as
// rally serve runs them. Echo at least 0.95x raw TCP and the best Go
// peer; chat at 16 B and 1 KiB at least 1.2x Bun with no more server CPU
// per delivery, at 64 KiB at least the best Go peer, compressed at 1 KiB
// at least 1.5x Bun, elsewhere at least Bun; the event loop at least
// goroutine mode in every scenario, through either API; an idle
// connection at most 1 KiB of RSS.
func (r *report) targets(b *bytes.Buffer) {
	if r.cells[r.scen[0].ID]["rally-loop"] == nil && r.cells[r.scen[0].ID]["rally-hub-loop"] == nil {
		return // a run of other peers
	}
	b.WriteString("## rally against its targets\n\n")
	b.WriteString("What a user gets: echo through `Server{EventLoop: true}` (rally-loop), chat through `pubsub.Hub` on it (rally-hub-loop), as the README recommends on Linux and `rally serve` runs; goals of issue 28.\n\n")
	b.WriteString("| target | measured | met |\n|---|---|---|\n")
	row := func(target, measured string, met bool) {
		mark := "no"
		if met {
			mark = "yes"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", target, measured, mark)
	}
	bestGo := func(id string) (string, float64) {
		name, top := "", math.NaN()
		for _, p := range r.peers {
			if p.Kind == "go" && !p.Verbatim && !strings.HasPrefix(p.Name, "rally") {
				if v := r.rate(id, p.Name); !math.IsNaN(v) && (math.IsNaN(top) || v > top) {
					name, top = p.Name, v
				}
			}
		}
		return name, top
	}
	for _, sc := range r.scen {
		id := sc.ID
		switch sc.Cfg.Scenario {
		case loadgen.Echo, loadgen.Throughput:
			me := r.rate(id, "rally-loop")
			if math.IsNaN(me) {
				break
			}
			name, top := bestGo(id)
			if sc.Cfg.Compress {
				// The raw TCP echo does not compress: no floor to compare with.
				row(id+": >= best Go peer", fmt.Sprintf("%s of %s", ratio(me, top), name), me >= top)
				break
			}
			raw := r.rate(id, "raw TCP")
			row(id+": >= 0.95x raw TCP and >= best Go peer",
				fmt.Sprintf("%s of raw TCP, %s of %s", ratio(me, raw), ratio(me, top), name), me >= 0.95*raw && me >= top)
		case loadgen.Chat:
			me := r.rate(id, "rally-hub-loop")
			if math.IsNaN(me) {
				break
			}
			bun := r.rate(id, "bun")
			small := !sc.Cfg.Compress && !strings.HasSuffix(id, "-burst") && (sc.Cfg.Size == 16 || sc.Cfg.Size == 1<<10)
			switch {
			case small:
				row(id+": >= 1.2x Bun", ratio(me, bun)+" of Bun", me >= 1.2*bun)
			case sc.Cfg.Compress && sc.Cfg.Size == 1<<10:
				row(id+": >= 1.5x Bun", ratio(me, bun)+" of Bun", me >= 1.5*bun)
			case sc.Cfg.Size == 64<<10 && !strings.HasSuffix(id, "-burst"):
				name, top := bestGo(id)
				row(id+": >= best Go peer", fmt.Sprintf("%s of %s", ratio(me, top), name), me >= top)
			default:
				row(id+": >= Bun", ratio(me, bun)+" of Bun", me >= bun)
			}
			if small {
				c, them := r.cells[id]["rally-hub-loop"], r.cells[id]["bun"]
				if c != nil && them != nil && len(c.cpu) > 0 && len(them.cpu) > 0 {
					mine, theirs := median(c.cpu), median(them.cpu)
					row(id+": server CPU per delivery <= Bun", fmt.Sprintf("%s µs vs %s µs", micros(mine), micros(theirs)), mine <= theirs)
				}
			}
		default:
			continue
		}
		// The event loop against goroutine mode, through each API.
		var got []string
		met := true
		for _, pair := range [][2]string{{"rally-loop", "rally"}, {"rally-hub-loop", "rally-hub"}} {
			loop, gor := r.rate(id, pair[0]), r.rate(id, pair[1])
			if math.IsNaN(loop) || math.IsNaN(gor) {
				continue
			}
			got = append(got, fmt.Sprintf("%s %s of %s", pair[0], ratio(loop, gor), pair[1]))
			met = met && loop >= gor
		}
		if len(got) > 0 {
			row(id+": event loop >= goroutine mode", strings.Join(got, ", "), met)
		}
	}
	for _, name := range []string{"rally-loop", "rally"} {
		if c := r.cells["idle"][name]; c != nil && len(c.perConn) > 0 {
			me := median(c.perConn)
			row("idle ("+name+"): <= 1 KiB of RSS per connection", bytesOf(me), me <= 1<<10)
			break
		}
	}
	b.WriteString("\nAllocations per message on rally's hot paths are checked by rally's own `go test -bench`, not here.\n\n")
}

func (r *report) section(b *bytes.Buffer, sc scenario) {
	unit := "replies"
	if sc.Cfg.Scenario == loadgen.Chat {
		unit = "deliveries"
	}
	one := singular(unit)
	fmt.Fprintf(b, "## %s\n\n", sc.Title)
	var bars []bar
	ref := r.rate(sc.ID, reference)
	_, top := r.best(sc.ID)
	raw := r.rate(sc.ID, "raw TCP")
	hasRaw := !math.IsNaN(raw)
	fmt.Fprintf(b, "| peer | %s/s | vs %s | vs best |", unit, reference)
	if hasRaw {
		b.WriteString(" vs raw TCP |")
	}
	fmt.Fprintf(b, " server CPU µs/%s | p50 | p99 | peak RSS | other work | errors |\n|---|---:|---:|---:|", one)
	if hasRaw {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.peers {
		c := r.cells[sc.ID][p.Name]
		switch {
		case p.Pending != "":
			fmt.Fprintf(b, "| %s | pending: %s |\n", p.Name, p.Pending)
			continue
		case !serves(p, sc) && sc.Cfg.Compress:
			fmt.Fprintf(b, "| %s | no permessage-deflate |\n", p.Name)
			continue
		case !serves(p, sc):
			continue
		case !c.ok():
			fmt.Fprintf(b, "| %s | failed: %s |\n", p.Name, firstOr(c.failures, "no window ran"))
			continue
		}
		v := median(c.rates)
		bars = append(bars, bar{label: p.Name, value: v, note: ratio(v, ref), kind: p})
		fmt.Fprintf(b, "| %s | %s | %s | %s |", p.Name, loadgen.Count(v), ratio(v, ref), ratio(v, top))
		if hasRaw {
			fmt.Fprintf(b, " %s |", ratio(v, raw))
		}
		fmt.Fprintf(b, " %s | %s | %s | %s | %s | %s |\n", micros(median(c.cpu)), loadgen.Micros(median(c.p50)), loadgen.Micros(median(c.p99)),
			bytesOf(median(c.peak)), busyOf(c.busy), errorsOf(c))
	}
	if len(bars) > 0 {
		svg := barChart(sc.Title, unit+" per second, median (ratio to "+reference+")", bars, loadgen.Count)
		if err := os.WriteFile(filepath.Join(r.o.charts, sc.ID+".svg"), []byte(svg), 0o644); err == nil {
			fmt.Fprintf(b, "\n![%s](%s)\n", sc.Title, r.chartLink(sc.ID))
		}
	}
	b.WriteString("\n")
}

func (r *report) idleSection(b *bytes.Buffer, sc scenario) {
	fmt.Fprintf(b, "## %s\n\nA fresh server per peer; memory per connection is the growth of its resident memory divided by the connections held "+
		"(the goroutine-per-connection floor is about 3.5 KiB here: a parked goroutine with its TCP connection).\n\n", sc.Title)
	after := "-"
	if r.o.idleAfter > 0 {
		after = r.o.idleAfter.String()
	}
	fmt.Fprintf(b, "| peer | held | RSS per connection | vs gorilla | open rate | handshake p50 | p99 | RSS %s after close, vs start | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", after)
	var ref float64 = math.NaN()
	if c := r.cells[sc.ID][reference]; c != nil && len(c.perConn) > 0 {
		ref = median(c.perConn)
	}
	var bars []bar
	for _, p := range r.peers {
		c := r.cells[sc.ID][p.Name]
		switch {
		case p.Pending != "":
			fmt.Fprintf(b, "| %s | pending: %s |\n", p.Name, p.Pending)
			continue
		case p.Verbatim:
			continue
		case !c.ok():
			fmt.Fprintf(b, "| %s | failed: %s |\n", p.Name, firstOr(c.failures, "no window ran"))
			continue
		}
		per := median(c.perConn)
		bars = append(bars, bar{label: p.Name, value: per, note: ratio(per, ref), kind: p})
		closed := "-"
		if len(c.closed) > 0 {
			closed = fmt.Sprintf("%.2fx", median(c.closed))
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s/s | %s | %s | %s | %s |\n", p.Name, median(c.held), bytesOf(per), ratio(per, ref),
			loadgen.Count(median(c.rates)), loadgen.Micros(median(c.p50)), loadgen.Micros(median(c.p99)), closed, errorsOf(c))
	}
	if len(bars) > 0 {
		svg := barChart(sc.Title, "resident memory per idle connection, lower is better (ratio to "+reference+")", bars, func(v float64) string { return bytesOf(v) })
		if err := os.WriteFile(filepath.Join(r.o.charts, sc.ID+".svg"), []byte(svg), 0o644); err == nil {
			fmt.Fprintf(b, "\n![%s](%s)\n", sc.Title, r.chartLink(sc.ID))
		}
	}
	b.WriteString("\n")
}

func (r *report) footer(b *bytes.Buffer) {
	b.WriteString("## Not measured yet\n\n")
	b.WriteString("- permessage-deflate: `rally bench --compress` negotiates it, but this comparison does not run compressed scenarios yet.\n")
	for _, p := range r.peers {
		if p.Pending != "" {
			fmt.Fprintf(b, "- %s: %s.\n", p.Name, p.Pending)
		}
	}
	b.WriteString("- connect (handshakes per second) is available in `rally bench connect` but not part of this comparison.\n\n")
	if tops, _ := filepath.Glob(filepath.Join(r.o.charts, "rally-*-top.txt")); len(tops) > 0 {
		b.WriteString("## CPU profiles of rally\n\nTaken with `go run ./cmd/runner -profile SCENARIO` (rally alone, 5 s under the scenario's load; a separate run from the tables above):\n\n")
		for _, t := range tops {
			// Both made absolute: Rel cannot climb out of a relative
			// "../docs" by itself, and the link must work from the doc.
			dir, err1 := filepath.Abs(filepath.Dir(r.o.out))
			abs, err2 := filepath.Abs(t)
			rel, err := filepath.Rel(dir, abs)
			if err1 != nil || err2 != nil || err != nil {
				rel = t
			}
			fmt.Fprintf(b, "- [%s](%s)\n", filepath.Base(t), filepath.ToSlash(rel))
		}
		b.WriteString("\n")
	}
	b.WriteString("## How each peer is written\n\nEach server lives in `bench/peers/` (Go) or `bench/node/` (JavaScript) and serves `/echo` and `/chat`.\n\n| peer | server |\n|---|---|\n")
	for _, p := range r.peers {
		fmt.Fprintf(b, "| %s | %s |\n", p.Name, p.How)
	}
	fmt.Fprintf(b, "\nRaw results of every window: `%s`.\n", filepath.ToSlash(filepath.Join("bench", r.o.charts, "peers.json")))
}

// singular turns the unit of a rate into the name of one of them.
func singular(unit string) string {
	switch unit {
	case "replies":
		return "reply"
	case "deliveries":
		return "delivery"
	}
	return strings.TrimSuffix(unit, "s")
}

func firstOr(list []string, def string) string {
	if len(list) > 0 {
		return list[0]
	}
	return def
}

func micros(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func bytesOf(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v < 0 {
		return "-" + loadgen.Bytes(int64(-v))
	}
	return loadgen.Bytes(int64(v))
}

func busyOf(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%% (max %.0f%%)", median(v), slices.Max(v))
}

func errorsOf(c *cell) string {
	s := fmt.Sprint(c.errors)
	if c.rounds > 0 || c.stalled > 0 {
		s += fmt.Sprintf(", %d of %d rounds stalled", c.stalled, c.rounds)
	}
	if n := len(c.failures); n > 0 {
		s += fmt.Sprintf(", %d of %d windows failed", n, c.windows)
	}
	return s
}

// machine describes the computer and the versions of everything measured.
func machine() [][2]string {
	var out [][2]string
	cpu := "unknown"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	out = append(out, [2]string{"CPU", fmt.Sprintf("%s, %d cores", cpu, runtime.NumCPU())})
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		var kb int64
		fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		out = append(out, [2]string{"memory", loadgen.Bytes(kb << 10)})
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		out = append(out, [2]string{"kernel", "Linux " + strings.TrimSpace(string(b))})
	}
	out = append(out, [2]string{"Go", runtime.Version()})
	if rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		out = append(out, [2]string{"rally", "commit " + strings.TrimSpace(string(rev))})
	}
	if b, err := os.ReadFile("go.mod"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && !strings.Contains(line, "// indirect") && strings.HasPrefix(f[0], "github.com/") && f[0] != "github.com/rallyws/rally" {
				out = append(out, [2]string{f[0], f[1]})
			}
		}
	}
	if v, err := exec.Command("node", "--version").Output(); err == nil {
		out = append(out, [2]string{"Node.js", strings.TrimSpace(string(v))})
	}
	for _, pkg := range []string{"ws", "bufferutil"} {
		if v := npmVersion(pkg); v != "" {
			out = append(out, [2]string{"npm " + pkg, v})
		}
	}
	if v, err := exec.Command(bunBinary, "--version").Output(); err == nil {
		out = append(out, [2]string{"Bun", strings.TrimSpace(string(v)) + " (npm @oven/bun-linux-x64)"})
	}
	return out
}

func npmVersion(pkg string) string {
	b, err := os.ReadFile(filepath.Join("node/node_modules", pkg, "package.json"))
	if err != nil {
		return ""
	}
	i := bytes.Index(b, []byte(`"version"`))
	if i < 0 {
		return ""
	}
	rest := b[i+len(`"version"`):]
	parts := bytes.SplitN(rest, []byte(`"`), 3)
	if len(parts) < 3 {
		return ""
	}
	return string(parts[1])
}
