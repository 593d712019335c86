package loadgen

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally"
)

// The hostile scenarios of `rally bench`: what a few clients do to make a
// server hold memory or stop answering. Each samples the server's memory
// before, at its peak and after, probes it with a fresh echo client
// throughout, and ends with a verdict.
var hostileScenarios = []struct{ name, what string }{
	{"slowloris", "--conns (2000) connections sending their request head one byte per second"},
	{"head-hold", "--conns (1000) connections sending --size (1 MiB) of request head, never finished"},
	{"partial", "--conns (1000) connections sending --size (16 MiB - 1) of a message, never finished"},
	{"h2-partial", "partial over HTTP/2 (h2c for ws://, h2 for wss://): --conns (1000) WebSocket streams, 100 on\n              each connection, sending --size (16 MiB - 1) of a message, never finished, as fast as\n              the server's flow-control windows let them"},
	{"slow-read", "--conns (2000) subscribers of a /ws topic that never read while one client publishes 1 KiB\n              messages as fast as it can; a fast subscriber's rate is compared with its rate alone"},
	{"h2-slow-read", "--conns (5) HTTP/2 connections (h2c for ws://, h2 for wss://) of --size (1000) WebSocket streams each\n              that never read (window 0), subscribed to a topic of /ws that one client floods; a fast\n              HTTP/1.1 subscriber's rate is compared with its rate alone"},
	{"garbage", "--conns (10000) connections sending random bytes, half before and half after a handshake"},
	{"ping-flood", "--conns (100) connections to an echo endpoint sending pings as fast as the socket takes them"},
	{"many-subs", "--conns (5000) connections to /ws of rally serve, each subscribing to --size (100) topics of its\n              own with 128-byte names and reading"},
	{"reconnect-old", "one client publishes --size (999) messages on the history topic \"hostile-history\" of /ws (serve with\n              --history hostile-history --history-size 1000), then --conns (2000) clients reconnect at once, each\n              recovering them all from the position before them, again and again"},
	{"bomb", "--conns (50) clients of an echo endpoint each sending a compressed message that inflates to\n              --size (2 GiB), on a new connection each time, again and again"},
	{"adversary", "--conns (200) clients each picking, from --seed, a behaviour: slowloris, head-hold, partial,\n              non-reader, bomb, ping-flood, reconnect, garbage, many-subs, publisher or subscriber;\n              URL is the /ws endpoint of rally serve. The publishers and subscribers come first; the\n              fast subscriber under attack must keep half its rate beside them. After all leave,\n              the server must hold no connection and no budget charge (read from --metrics,\n              default /metrics on the host)"},
}

// scenarioNames lists every scenario of rally bench, for its errors:
// "echo, chat, throughput, connect, idle, pusher, or a hostile one: slowloris, …".
func scenarioNames() string {
	return "echo, chat, throughput, connect, idle, pusher, or a hostile one: " + hostileNames()
}

// hostileNames lists the hostile scenarios: "slowloris, head-hold, …".
func hostileNames() string {
	names := make([]string, len(hostileScenarios))
	for i, s := range hostileScenarios {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// IsHostile reports whether scenario is one of the hostile scenarios.
func IsHostile(scenario string) bool {
	for _, s := range hostileScenarios {
		if s.name == scenario {
			return true
		}
	}
	return false
}

// HostileConfig is one hostile run.
type HostileConfig struct {
	Scenario string
	// URL is the endpoint attacked: an echo endpoint (ws://host/echo), or
	// for slow-read the /ws endpoint of `rally serve`.
	URL string
	// Conns is the number of attacking connections; Size the bytes of a
	// held head (head-hold) or message (partial). 0: the scenario's default.
	Conns, Size int
	// Duration is how long the attack is held; Settle how long after it
	// ends the memory is sampled again.
	Duration, Settle time.Duration
	// ServerPID (a process on this machine) or MetricsURL (its Prometheus
	// metrics, process_resident_memory_bytes) is where the server's
	// memory is read. With neither, memory is not reported.
	ServerPID  int
	MetricsURL string
	// ProbeURL is the echo endpoint a fresh client probes every 250 ms
	// (default: /echo on the attacked host).
	ProbeURL string
	// ProbeProcess probes from a process of its own (`rally bench` run
	// again, see workerCommand) instead of a goroutine of this one: the
	// attack's thousands of goroutines share this process's scheduler and
	// delay the probe's, so that a probe from here measures the attacker
	// as much as the server. The fast pair of adversary and h2-slow-read
	// (its publisher and subscriber) runs in another of its own too.
	ProbeProcess bool
	// MaxRSS and MaxProbeP99 are the verdict's bounds.
	MaxRSS      int64
	MaxProbeP99 time.Duration
	// Seed picks the adversary's clients (the same seed, the same draw).
	Seed uint64
	// Nice is the niceness the attacking process takes once the
	// processes of the probe and the measured pair run (Linux; 0: none):
	// on one machine, the attacker's own work would otherwise take the
	// CPU from the server, which a remote attacker's does not, and the
	// run would measure the attacker. What its requests make the server
	// do is measured either way. Not when the probe or the pair runs in
	// this process.
	Nice int
	// AttackerAddresses, for adversary, is how many client addresses its
	// attackers come from, named in X-Forwarded-For as a reverse proxy on
	// loopback would (rally serve trusts it by default, and limits each
	// address's handshakes): attacker i is 198.18.0.1+i%N (RFC 2544's
	// benchmarking range). 0: they connect as local clients, which rally
	// serve does not rate-limit. The well-behaved clients and the
	// measured pair name no address either way.
	AttackerAddresses int
	// H2, for slow-read, opens the subscribers that never read as
	// WebSocket streams over HTTP/2 (RFC 8441; h2c for ws://), h2Streams
	// to a TCP connection, each with a small receive window that fills.
	H2 bool
}

// HostileResult is what a hostile run measured.
type HostileResult struct {
	Scenario string `json:"scenario"`
	URL      string `json:"url"`
	Conns    int    `json:"conns"`
	// Opened counts attacking connections that were established (TCP).
	Opened int64 `json:"opened"`
	// Answers counts how the server dealt with attacking connections:
	// "431", "503", "close 1009 (message too big)" (a close frame's code and
	// reason), "closed" (without a word), "open" (still
	// held at the end of the attack), "dial error".
	Answers map[string]int64 `json:"answers"`
	// RSS of the server, in bytes, before the attack, at its peak during
	// it, and Settle after it; RSSSource says where it was read.
	RSSBefore int64  `json:"rss_before_bytes"`
	RSSPeak   int64  `json:"rss_peak_bytes"`
	RSSAfter  int64  `json:"rss_after_bytes"`
	RSSSource string `json:"rss_source"`
	Settle    string `json:"settle"`
	// AnonBefore and AnonAfter are the part of RSSBefore and RSSAfter
	// that is the server's own memory (RssAnon): what is left when the
	// pages of its executable are taken out, to tell what the attack left
	// behind from the code it read in. Read only with a server pid.
	AnonBefore int64 `json:"anon_before_bytes,omitempty"`
	AnonAfter  int64 `json:"anon_after_bytes,omitempty"`
	// Probe is the latency of a fresh client's dial plus one echo, every
	// 250 ms during the attack.
	Probe Latency `json:"probe"`
	// AttackerNice is the niceness the attacking process ran at (0:
	// unchanged, see HostileConfig.Nice).
	AttackerNice int `json:"attacker_nice,omitempty"`
	// ProbeFrom says where the probe ran: "its own process" or "the
	// attacking process".
	ProbeFrom     string `json:"probe_from"`
	Probes        int64  `json:"probes"`
	ProbeFailures int64  `json:"probe_failures"`
	// SlowestProbes are the five slowest probes, slowest first: when
	// each started and where its time went, to tell a connection the
	// server was slow to accept from an echo it was slow to answer.
	SlowestProbes []ProbeTiming `json:"slowest_probes,omitempty"`
	// For slow-read: a fast subscriber's deliveries per second alone and
	// once the slow subscribers' queues are full. For the adversary,
	// FastPeersRate is its rate beside the draw's well-behaved clients
	// before any attacker came (its subscribers share its topic, so the
	// server does their work too), and the rate under attack is held to
	// that one: what the attackers take is the difference.
	FastSoloRate   float64 `json:"fast_solo_per_s,omitempty"`
	FastPeersRate  float64 `json:"fast_with_peers_per_s,omitempty"`
	FastAttackRate float64 `json:"fast_under_attack_per_s,omitempty"`
	Published      int64   `json:"published,omitempty"`
	// For the adversary: the seed, how many clients picked each
	// behaviour, and what the server held (open connections, bytes
	// charged to its memory budget) once every client had left, after
	// EmptyAfter (or after Settle if it never emptied).
	Seed         uint64           `json:"seed,omitempty"`
	Behaviours   map[string]int64 `json:"behaviours,omitempty"`
	ConnsAfter   int64            `json:"connections_after"`
	ChargedAfter int64            `json:"budget_charged_after_bytes"`
	EmptyAfter   string           `json:"empty_after,omitempty"`
	// Verdict is PASS or FAIL; Reasons say which bound failed.
	Verdict string   `json:"verdict"`
	Reasons []string `json:"reasons,omitempty"`
}

// ProbeTiming is one probe of a hostile run: when it started, in seconds
// after the attack did, and how long its dial (TCP connect and WebSocket
// handshake) and its echo took, in microseconds. A dial near a second or
// more is a SYN the server's listen queue dropped and the client sent
// again.
type ProbeTiming struct {
	At     float64 `json:"at_s"`
	DialUS float64 `json:"dial_us"`
	EchoUS float64 `json:"echo_us"`
}

// keepSlowest adds p to the slowest probes if it is one of the five
// slowest so far.
func (r *HostileResult) keepSlowest(p ProbeTiming) {
	const keep = 5
	s := append(r.SlowestProbes, p)
	for i := len(s) - 1; i > 0 && s[i].DialUS+s[i].EchoUS > s[i-1].DialUS+s[i-1].EchoUS; i-- {
		s[i], s[i-1] = s[i-1], s[i]
	}
	r.SlowestProbes = s[:min(len(s), keep)]
}

// hostileRun is the state of one run.
type hostileRun struct {
	relay  func(what string) // the pair process's: answers go to the run that started it
	cfg    HostileConfig
	t      *target
	res    *HostileResult
	mu     sync.Mutex
	conns  []net.Conn
	others []func() // ends attackers that are not a net.Conn
	opened atomic.Int64

	// The probe process, started before the attack (nil: probing from
	// here), or why it could not be.
	probeCmd *exec.Cmd
	probeOut io.Reader
	probeErr error
	pairHere bool // the measured pair runs in this process
}

// yieldCPU lowers the attacking process's priority to cfg.Nice, if it
// is set, the probe runs in a process of its own, and so does the pair
// (pairHere: it does not).
func (h *hostileRun) yieldCPU() {
	if h.cfg.Nice <= 0 || h.relay != nil || h.probeCmd == nil || h.pairHere {
		return
	}
	if err := lowerPriority(h.cfg.Nice); err != nil {
		h.answer("nice: " + err.Error())
		return
	}
	h.res.AttackerNice = h.cfg.Nice
}

func (h *hostileRun) answer(what string) {
	if h.relay != nil {
		h.relay(what)
		return
	}
	h.mu.Lock()
	h.res.Answers[what]++
	h.mu.Unlock()
}

func (h *hostileRun) keep(c net.Conn) {
	h.opened.Add(1)
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
}

// closeAll ends every attacking connection.
func (h *hostileRun) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	for _, f := range h.others {
		f()
	}
	h.conns, h.others = nil, nil
}

// afterLimit is the most the server's own memory may be, Settle after an
// attack, against what it was before: the hostile target of docs/SERVE.md.
const afterLimit = 1.5

// hugeMetadata is what RSS may keep beyond afterLimit after a peak of
// hugeMetadataPeak or more. Once its heap goal passes 1 GiB the Go
// runtime backs its heap metadata (the heap index, the page bitmaps)
// with transparent huge pages, and keeps them for the life of the
// process (minHeapForMetadataHugePages in runtime/malloc.go): after
// 1,000 partial messages at /echo's limit (1.2 GiB), 6 MiB of
// AnonHugePages in the 32 MiB heap index and 14-18 MiB of RSS over a
// fresh server's 19 MiB, with 3 MiB of heap in use and all but 3 MiB of
// the free heap returned to the system. Neither the heap nor a leak.
const (
	hugeMetadata     = 16 << 20
	hugeMetadataPeak = 1 << 30
)

// afterBound is the most RSS may be Settle after an attack that found the
// server at before and took it to peak, and that bound in words.
func afterBound(before, peak int64) (int64, string) {
	bound := int64(afterLimit * float64(before))
	why := fmt.Sprintf("%.1fx the %s before", afterLimit, Bytes(before))
	if peak >= hugeMetadataPeak {
		bound += hugeMetadata
		why += fmt.Sprintf(" and the %s the runtime keeps after a peak past %s", Bytes(hugeMetadata), Bytes(hugeMetadataPeak))
	}
	return bound, why
}

// bombSize is what a bomb inflates to by default: 2 GiB, or the most
// whole MiB an int holds where that is less (32-bit platforms).
const bombSize = min(2<<30, math.MaxInt>>20<<20)

func hostileDefaults(cfg HostileConfig) HostileConfig {
	if cfg.Conns <= 0 {
		cfg.Conns = map[string]int{"slowloris": 2000, "head-hold": 1000, "partial": 1000, "h2-partial": 1000, "slow-read": 2000, "h2-slow-read": 5, "garbage": 10000, "adversary": 200,
			"ping-flood": 100, "many-subs": 5000, "reconnect-old": 2000, "bomb": 50}[cfg.Scenario]
	}
	if cfg.Size <= 0 {
		cfg.Size = map[string]int{"head-hold": 1 << 20, "partial": 16<<20 - 1, "h2-partial": 16<<20 - 1, "h2-slow-read": 1000,
			"many-subs": 100, "reconnect-old": 999, "bomb": bombSize}[cfg.Scenario]
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 30 * time.Second
	}
	if cfg.MaxRSS <= 0 {
		cfg.MaxRSS = 600e6
	}
	if cfg.MaxProbeP99 <= 0 {
		cfg.MaxProbeP99 = 100 * time.Millisecond
	}
	if cfg.ProbeURL == "" {
		if u, err := url.Parse(cfg.URL); err == nil {
			u.Path, u.RawQuery = "/echo", ""
			cfg.ProbeURL = u.String()
		}
	}
	// What the server holds after the attack is read from its metrics:
	// the adversary's always, the others' when the server's memory is
	// read by its pid (else the metrics are where RSS is read from).
	if (cfg.Scenario == "adversary" || cfg.ServerPID > 0) && cfg.MetricsURL == "" {
		if u, err := url.Parse(cfg.URL); err == nil {
			u.Scheme = map[string]string{"ws": "http", "wss": "https"}[u.Scheme]
			u.Path, u.RawQuery, u.User = "/metrics", "", nil
			cfg.MetricsURL = u.String()
		}
	}
	return cfg
}

// RunHostile runs one hostile scenario against cfg.URL and returns what
// it measured. It fails only if the run could not start.
func RunHostile(ctx context.Context, cfg HostileConfig) (*HostileResult, error) {
	if !IsHostile(cfg.Scenario) {
		return nil, fmt.Errorf("loadgen: unknown hostile scenario %q", cfg.Scenario)
	}
	cfg = hostileDefaults(cfg)
	t, err := newTarget(cfg.URL, true, false)
	if err != nil {
		return nil, err
	}
	probe, err := newTarget(cfg.ProbeURL, true, false)
	if err != nil {
		return nil, err
	}
	h := &hostileRun{cfg: cfg, t: t, res: &HostileResult{
		Scenario: cfg.Scenario, URL: redactURL(cfg.URL), Conns: cfg.Conns, Answers: map[string]int64{}, Settle: cfg.Settle.String(),
		ConnsAfter: -1, ChargedAfter: -1,
	}}
	if cfg.Scenario == "adversary" {
		h.res.Seed, h.res.Behaviours = cfg.Seed, map[string]int64{}
	}
	mem := newMemorySampler(cfg.ServerPID, cfg.MetricsURL)
	h.res.RSSSource = mem.source()
	h.res.RSSBefore = mem.sample()
	h.res.AnonBefore = mem.anon()

	if cfg.ProbeProcess {
		h.probeCmd, h.probeOut, h.probeErr = helperProcess(cfg, cfg.ProbeURL, probeEnv)
	}
	attack, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { mem.watch(attack) })
	var hist histogram
	wg.Go(func() { h.probe(attack, probe, &hist) })
	switch cfg.Scenario {
	case "adversary", "h2-slow-read", "slow-read":
		// Once their measured pair is connected (adversary,
		// h2-slow-read), or not at all: slow-read's pair is here.
	default:
		h.yieldCPU()
	}
	switch cfg.Scenario {
	case "slowloris":
		h.slowloris(attack)
	case "head-hold":
		h.headHold(attack)
	case "partial":
		h.partial(attack)
	case "h2-partial":
		h.h2Partial(attack)
	case "slow-read":
		h.slowRead(attack)
	case "h2-slow-read":
		h.h2SlowRead(attack)
	case "garbage":
		h.garbage(attack)
	case "adversary":
		h.adversary(attack)
	case "ping-flood":
		h.pingFlood(attack)
	case "many-subs":
		h.manySubs(attack)
	case "reconnect-old":
		h.reconnectOld(attack)
	case "bomb":
		h.bombs(attack)
	}
	<-attack.Done()
	wg.Wait()
	h.mu.Lock()
	h.res.Answers["open"] += int64(len(h.conns))
	h.mu.Unlock()
	h.closeAll()
	h.res.Opened = h.opened.Load()
	h.res.RSSPeak = max(mem.peak.Load(), h.res.RSSBefore)
	h.res.Probe = hist.summary()
	h.res.Probe.Buckets = nil
	settled := time.Now()
	switch {
	case cfg.Scenario == "adversary":
		// The server must let every connection go; a generous bound, for
		// a busy machine, that ends as soon as it has.
		h.awaitServerEmpty(ctx, max(cfg.Settle, 60*time.Second))
	case cfg.MetricsURL != "":
		h.awaitServerEmpty(ctx, cfg.Settle)
	}
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Settle - time.Since(settled)):
	}
	h.res.RSSAfter = mem.sample()
	h.res.AnonAfter = mem.anon()
	h.verdict()
	return h.res, nil
}

func (h *hostileRun) verdict() {
	r, cfg := h.res, h.cfg
	if r.RSSSource != "" && r.RSSPeak > cfg.MaxRSS {
		r.Reasons = append(r.Reasons, fmt.Sprintf("peak RSS %s over %s", Bytes(r.RSSPeak), Bytes(cfg.MaxRSS)))
	}
	if p99 := time.Duration(r.Probe.P99 * 1e3); p99 > cfg.MaxProbeP99 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("probe p99 %v over %v", p99.Round(time.Millisecond), cfg.MaxProbeP99))
	}
	if r.ProbeFailures*100 > r.Probes {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%d of %d probes failed", r.ProbeFailures, r.Probes))
	}
	switch {
	case r.FastPeersRate > 0:
		if r.FastAttackRate < r.FastPeersRate/2 {
			r.Reasons = append(r.Reasons, fmt.Sprintf("fast subscriber at %.0f/s under attack, under half its %.0f/s beside the well-behaved clients alone", r.FastAttackRate, r.FastPeersRate))
		}
	case r.FastSoloRate > 0 && r.FastAttackRate < r.FastSoloRate/2:
		r.Reasons = append(r.Reasons, fmt.Sprintf("fast subscriber at %.0f/s under attack, under half its %.0f/s alone", r.FastAttackRate, r.FastSoloRate))
	}
	if r.Behaviours != nil && r.ConnsAfter < 0 {
		r.Reasons = append(r.Reasons, "the server's metrics could not be read: what it held after every client left is unknown")
	}
	if r.ConnsAfter > 0 || r.ChargedAfter > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%d connections and %s charged to the memory budget %s after every client left", r.ConnsAfter, Bytes(r.ChargedAfter), r.Settle))
	}
	if bound, why := afterBound(r.RSSBefore, r.RSSPeak); r.RSSSource != "" && r.RSSAfter > bound {
		r.Reasons = append(r.Reasons, fmt.Sprintf("RSS %s after %s, over %s", Bytes(r.RSSAfter), r.Settle, why))
	}
	r.Verdict = "PASS"
	if len(r.Reasons) > 0 {
		r.Verdict = "FAIL"
	}
}

// WriteSummary writes the verdict line and the figures.
func (r *HostileResult) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%s: %s  %d connections (%d opened) against %s\n", r.Scenario, r.Verdict, r.Conns, r.Opened, r.URL)
	if r.RSSSource != "" {
		fmt.Fprintf(w, "  server RSS (%s): before %s, peak %s, %s after %s", r.RSSSource, Bytes(r.RSSBefore), Bytes(r.RSSPeak), r.Settle, Bytes(r.RSSAfter))
		if r.RSSBefore > 0 {
			fmt.Fprintf(w, " (%.2fx before)", float64(r.RSSAfter)/float64(r.RSSBefore))
		}
		fmt.Fprintln(w)
		if r.AnonBefore > 0 && r.AnonAfter > 0 {
			fmt.Fprintf(w, "  of which its own (RssAnon, without its executable's pages): before %s, %s after %s\n",
				Bytes(r.AnonBefore), r.Settle, Bytes(r.AnonAfter))
		}
	}
	from := ""
	if r.ProbeFrom != "" {
		from = ", from " + r.ProbeFrom
	}
	if r.AttackerNice != 0 {
		from += fmt.Sprintf(" (the attacking process at nice %d)", r.AttackerNice)
	}
	fmt.Fprintf(w, "  fresh echo client: p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d probes, %d failed%s\n",
		r.Probe.P50/1e3, r.Probe.P99/1e3, r.Probe.Max/1e3, r.Probes, r.ProbeFailures, from)
	if len(r.SlowestProbes) > 0 {
		var parts []string
		for _, p := range r.SlowestProbes {
			parts = append(parts, fmt.Sprintf("at %.1fs dial %.1f + echo %.1f ms", p.At, p.DialUS/1e3, p.EchoUS/1e3))
		}
		fmt.Fprintf(w, "  slowest probes: %s\n", strings.Join(parts, "; "))
	}
	switch {
	case r.FastPeersRate > 0:
		fmt.Fprintf(w, "  fast subscriber: %.0f/s alone, %.0f/s beside the well-behaved clients, %.0f/s under attack (%d published)\n", r.FastSoloRate, r.FastPeersRate, r.FastAttackRate, r.Published)
	case r.FastSoloRate > 0:
		fmt.Fprintf(w, "  fast subscriber: %.0f/s alone, %.0f/s under attack (%d published)\n", r.FastSoloRate, r.FastAttackRate, r.Published)
	}
	if r.Behaviours != nil {
		var parts []string
		for k, v := range r.Behaviours {
			parts = append(parts, fmt.Sprintf("%s x%d", k, v))
		}
		fmt.Fprintf(w, "  seed %d: %s\n", r.Seed, strings.Join(sortedStrings(parts), ", "))
	}
	if r.ConnsAfter >= 0 {
		fmt.Fprintf(w, "  after every client left: %d connections, %s charged to the memory budget (after %s)\n", r.ConnsAfter, Bytes(r.ChargedAfter), r.EmptyAfter)
	}
	var parts []string
	for k, v := range r.Answers {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	fmt.Fprintf(w, "  the server's answers: %s\n", strings.Join(sortedStrings(parts), ", "))
	for _, why := range r.Reasons {
		fmt.Fprintf(w, "  FAIL: %s\n", why)
	}
}

func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// probe dials a fresh client every 250 ms and times its dial and one
// echo, from a process of its own if cfg.ProbeProcess and one can be
// started, or from here.
func (h *hostileRun) probe(ctx context.Context, t *target, hist *histogram) {
	record := func(p ProbeTiming, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.res.Probes++
		if err != nil {
			h.res.ProbeFailures++
			return
		}
		hist.add(int64((p.DialUS + p.EchoUS) * 1e3))
		h.res.keepSlowest(p)
	}
	if h.cfg.ProbeProcess {
		err := h.probeErr
		if err == nil {
			err = probeFrom(ctx, h.probeCmd, h.probeOut, record)
		}
		if err == nil {
			h.res.ProbeFrom = "its own process"
			return
		}
		h.answer("probe process: " + err.Error())
	}
	h.res.ProbeFrom = "the attacking process"
	probeEvery(ctx, t, record)
}

// probeEvery probes t every 250 ms until ctx ends, giving each probe's
// timing (its start after the first tick's) or error to record.
func probeEvery(ctx context.Context, t *target, record func(ProbeTiming, error)) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	payload := []byte("probe under attack")
	begin := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		var dialed time.Time
		err := func() error {
			c, rest, err := t.dial(context.Background(), false)
			if err != nil {
				return err
			}
			dialed = time.Now()
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(clientFrame(opText, payload, [4]byte{1, 2, 3, 4})); err != nil {
				return err
			}
			m, err := newReader(c, 1024, rest).next(payload, true)
			if err == nil && !m.same {
				err = errors.New("echo differs")
			}
			c.Write(closeFrame)
			return err
		}()
		end := time.Now()
		record(ProbeTiming{
			At:     start.Sub(begin).Seconds(),
			DialUS: float64(dialed.Sub(start).Microseconds()),
			EchoUS: float64(end.Sub(dialed).Microseconds()),
		}, err)
	}
}

// probeEnv, set in its environment, makes `rally bench SCENARIO URL
// --duration D` the probe of a hostile run started by another (see
// probeFrom): it probes URL, an echo endpoint, for D and writes one
// probeLine a probe to its standard output.
const probeEnv = "RALLY_BENCH_PROBE"

// probeLine is one probe, as the probe process writes it.
type probeLine struct {
	ProbeTiming
	Err string `json:"err,omitempty"`
}

// runProbe is the probe process: it probes cfg.URL until ctx ends or
// cfg.Duration has passed.
func runProbe(ctx context.Context, cfg HostileConfig, stdout io.Writer) int {
	t, ctx, stop, ok := helperStart(ctx, cfg, stdout)
	if !ok {
		return 1
	}
	defer stop()
	emit := lineWriter[probeLine](stdout)
	probeEvery(ctx, t, func(p ProbeTiming, err error) {
		l := probeLine{ProbeTiming: p}
		if err != nil {
			l.Err = err.Error()
		}
		emit(l)
	})
	return 0
}

// helperStart is the start of a helper process of a hostile run (the
// probe, the fast pair): the target of cfg.URL and a context that ends
// after cfg.Duration. If the URL is not one, it says why on stdout and
// reports false.
func helperStart(ctx context.Context, cfg HostileConfig, stdout io.Writer) (*target, context.Context, context.CancelFunc, bool) {
	t, err := newTarget(cfg.URL, true, false)
	if err != nil {
		fmt.Fprintln(stdout, err)
		return nil, nil, nil, false
	}
	ctx, stop := context.WithTimeout(ctx, cfg.Duration)
	return t, ctx, stop, true
}

// helperProcess starts `rally bench SCENARIO URL --duration D` with env
// set (probeEnv, pairEnv) and returns it with its standard output.
func helperProcess(cfg HostileConfig, url, env string) (*exec.Cmd, io.Reader, error) {
	cmd, err := workerCommand([]string{cfg.Scenario, url, "--duration", cfg.Duration.String()})
	if err != nil {
		return nil, nil, err
	}
	cmd.Env = append(cmd.Environ(), env+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, out, nil
}

// lineWriter returns a function that writes each value it is given to w
// as a line of JSON, safe for concurrent use.
func lineWriter[T any](w io.Writer) func(T) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(v T) {
		mu.Lock()
		defer mu.Unlock()
		enc.Encode(v)
	}
}

// probeFrom records what the probe process cmd writes to out until ctx
// ends. It returns an error, having recorded nothing, if the process
// ended before ctx without a probe: the caller then probes from here.
func probeFrom(ctx context.Context, cmd *exec.Cmd, out io.Reader, record func(ProbeTiming, error)) error {
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	sc := bufio.NewScanner(out)
	probes := 0
	for sc.Scan() {
		var l probeLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		var perr error
		if l.Err != "" {
			perr = errors.New(l.Err)
		}
		record(l.ProbeTiming, perr)
		probes++
	}
	werr := cmd.Wait()
	if probes == 0 && ctx.Err() == nil {
		// It ended before the attack without probing: the attack must
		// not pass for want of a probe.
		return fmt.Errorf("it ended without a probe (%v)", werr)
	}
	return nil
}

// dialRaw opens a TCP connection to the attacked server, spreading
// source addresses on loopback.
func (h *hostileRun) dialRaw(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{LocalAddr: h.t.localAddr(true), Timeout: handshakeTimeout, Control: bindNoPort}
	return d.DialContext(ctx, "tcp", h.t.addr)
}

// each runs f for n connections, at most 256 dialling at once, and
// returns when every f has returned or ctx ends.
func each(ctx context.Context, n int, f func(i int)) {
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// await reads what the server says on c until ctx ends and records it.
func (h *hostileRun) await(ctx context.Context, c net.Conn) {
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReader(c)
	first, err := br.Peek(2)
	switch {
	case err == nil && string(first) == "HT":
		line, _ := br.ReadString('\n')
		f := strings.Fields(line)
		if len(f) >= 2 {
			h.answer(f[1])
		} else {
			h.answer("closed")
		}
	case err == nil && first[0] == 0x88:
		h.answer("close " + closeCodeOf(br))
	case ctx.Err() != nil:
		return // still open: counted at the end
	case err != nil:
		h.answer("closed")
	default:
		h.answer("other bytes")
	}
	h.drop(c)
}

// drop forgets a connection the server answered or closed.
func (h *hostileRun) drop(c net.Conn) {
	c.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, k := range h.conns {
		if k == c {
			h.conns[i] = h.conns[len(h.conns)-1]
			h.conns = h.conns[:len(h.conns)-1]
			return
		}
	}
}

// closeCodeOf reads a close frame from br and renders it as closeCode
// does.
func closeCodeOf(br *bufio.Reader) string {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || hdr[1]&0x7f < 2 || hdr[1]&0x7f > 125 {
		return "without code"
	}
	if hdr[1]&0x80 != 0 {
		return "masked" // a server must not mask (RFC 6455 5.1)
	}
	payload := make([]byte, hdr[1]&0x7f)
	n, _ := io.ReadFull(br, payload)
	return closeCode(payload[:n])
}

func (h *hostileRun) requestLine() string {
	path := "/"
	if u, err := url.Parse(h.cfg.URL); err == nil && u.EscapedPath() != "" {
		path = u.EscapedPath()
	}
	return "GET " + path + " HTTP/1.1\r\nHost: " + h.t.addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
}

func (h *hostileRun) slowloris(ctx context.Context) {
	each(ctx, h.cfg.Conns, func(int) {
		c, err := h.dialRaw(ctx)
		if err != nil {
			h.answer("dial error")
			return
		}
		h.keep(c)
		go h.await(ctx, c)
		go dripHead(ctx, c, h.requestLine())
	})
}

// dripHead sends a request head that never ends (requestLine, then a
// 64 KiB header) one byte a second, until ctx ends or the server cuts c.
func dripHead(ctx context.Context, c net.Conn, requestLine string) {
	head := requestLine + "X-Slow: " + strings.Repeat("a", 1<<16)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; i < len(head); i++ {
		if _, err := c.Write([]byte{head[i]}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *hostileRun) headHold(ctx context.Context) {
	each(ctx, h.cfg.Conns, func(int) {
		c, err := h.dialRaw(ctx)
		if err != nil {
			h.answer("dial error")
			return
		}
		h.keep(c)
		go h.await(ctx, c)
		holdHead(ctx, c, h.requestLine(), h.cfg.Size)
	})
}

// holdHead sends requestLine and then size bytes of 16 KiB headers as
// fast as the server takes them, and never ends the head.
func holdHead(ctx context.Context, c net.Conn, requestLine string, size int) {
	chunk := []byte("X-Hold: " + strings.Repeat("h", 16<<10-10) + "\r\n")
	if _, err := io.WriteString(c, requestLine); err != nil {
		return
	}
	for sent := 0; sent < size && ctx.Err() == nil; sent += len(chunk) {
		if _, err := c.Write(chunk); err != nil {
			return
		}
	}
}

func (h *hostileRun) partial(ctx context.Context) {
	chunk := make([]byte, 64<<10)
	each(ctx, h.cfg.Conns, func(int) {
		c, rest, err := h.t.dial(ctx, true)
		if err != nil {
			h.answer(handshakeAnswer(err))
			return
		}
		p := &prefixed{Conn: c, rest: rest}
		h.keep(p)
		go h.await(ctx, p)
		sendPartial(ctx, c, h.cfg.Size, chunk)
	})
}

// sendPartial sends a binary frame that claims size bytes, of which all
// but the last one are sent (masked with a zero key: the bytes as they
// are), in pieces of chunk (zeros, shared between connections).
func sendPartial(ctx context.Context, c net.Conn, size int, chunk []byte) {
	hdr := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(hdr[2:10], uint64(size))
	if _, err := c.Write(hdr); err != nil {
		return
	}
	for left := size - 1; left > 0 && ctx.Err() == nil; {
		n := min(left, len(chunk))
		if _, err := c.Write(chunk[:n]); err != nil {
			return
		}
		left -= n
	}
}

func handshakeAnswer(err error) string {
	var he *handshakeError
	if errors.As(err, &he) {
		if f := strings.Fields(he.reason); len(f) > 1 && f[0] == "status" {
			return f[1]
		}
		return "refused"
	}
	return "dial error"
}

func (h *hostileRun) garbage(ctx context.Context) {
	each(ctx, h.cfg.Conns, func(i int) {
		junk := make([]byte, 512+i%4096)
		rand.Read(junk)
		var c net.Conn
		var err error
		if i%2 == 0 {
			c, err = h.dialRaw(ctx)
		} else {
			var rest []byte
			c, rest, err = h.t.dial(ctx, true)
			if err == nil {
				c = &prefixed{Conn: c, rest: rest}
			}
		}
		if err != nil {
			h.answer(handshakeAnswer(err))
			return
		}
		h.keep(c)
		c.Write(junk)
		h.await(ctx, c)
	})
}

// prefixed is a connection whose first bytes were already read.
type prefixed struct {
	net.Conn
	rest []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.rest) > 0 {
		n := copy(b, p.rest)
		p.rest = p.rest[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// slowRead: a fast subscriber's rate alone, then with --conns subscribers
// that never read.
func (h *hostileRun) slowRead(ctx context.Context) {
	sub := func(c net.Conn) error {
		_, err := c.Write(clientFrame(opText, []byte(`{"type":"subscribe","topic":"hostile"}`), [4]byte{}))
		return err
	}
	fast, rest, err := h.t.dial(ctx, false)
	if err != nil {
		h.answer(handshakeAnswer(err))
		return
	}
	defer fast.Close()
	pub, prest, err := h.t.dial(ctx, false)
	if err != nil {
		h.answer(handshakeAnswer(err))
		return
	}
	defer pub.Close()
	go io.Copy(io.Discard, &prefixed{Conn: pub, rest: prest})
	if sub(fast) != nil {
		return
	}
	var delivered atomic.Int64
	go func() {
		r := newReader(fast, 64<<10, rest)
		for {
			if _, err := r.next(nil, false); err != nil {
				return
			}
			delivered.Add(1)
		}
	}()
	var published atomic.Int64
	go func() {
		msg := clientFrame(opText, []byte(`{"type":"publish","topic":"hostile","data":"`+strings.Repeat("x", 1000)+`"}`), [4]byte{})
		for ctx.Err() == nil {
			if _, err := pub.Write(msg); err != nil {
				return
			}
			published.Add(1)
		}
	}()
	rate := func(d time.Duration) float64 {
		n0, t0 := delivered.Load(), time.Now()
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
		return float64(delivered.Load()-n0) / time.Since(t0).Seconds()
	}
	// Alone for a sixth of the window, then the slow subscribers join;
	// the last third is measured, once their queues are full.
	h.res.FastSoloRate = rate(h.cfg.Duration / 6)
	if h.cfg.H2 {
		h.slowReadH2(ctx)
	} else {
		each(ctx, h.cfg.Conns, func(int) {
			c, _, err := h.t.dial(ctx, true)
			if err != nil {
				h.answer(handshakeAnswer(err))
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetReadBuffer(4 << 10)
			}
			h.keep(c)
			sub(c)
		})
	}
	if wait := time.Until(deadlineOf(ctx).Add(-h.cfg.Duration / 3)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	h.res.FastAttackRate = rate(h.cfg.Duration / 3)
	h.res.Published = published.Load()
}

// h2Streams is how many slow subscribers share one HTTP/2 connection
// (rally serve allows 100 streams to a connection).
const h2Streams = 100

// slowReadH2 opens --conns subscribers that never read as WebSocket
// streams over HTTP/2: each stream's receive window (16 KiB) fills and
// stays at 0, as a browser tab that stopped reading would leave it.
func (h *hostileRun) slowReadH2(ctx context.Context) {
	u, err := url.Parse(h.cfg.URL)
	if err != nil {
		return
	}
	transports := make([]*http.Transport, (h.cfg.Conns+h2Streams-1)/h2Streams)
	for i := range transports {
		transports[i] = &http.Transport{
			ForceAttemptHTTP2: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			HTTP2:             &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10, MaxReceiveBufferPerConnection: h2Streams * 16 << 10},
		}
	}
	subscribe := []byte(`{"type":"subscribe","topic":"hostile"}`)
	each(ctx, h.cfg.Conns, func(i int) {
		c, _, err := rally.Dial(ctx, u.String(), &rally.DialOptions{
			HTTP2:          rally.HTTP2Require,
			HTTP2Transport: transports[i/h2Streams],
			TLSConfig:      &tls.Config{InsecureSkipVerify: true},
		})
		if err != nil {
			h.answer(handshakeAnswer(err))
			return
		}
		h.opened.Add(1)
		h.mu.Lock()
		h.others = append(h.others, func() { c.CloseNow() })
		h.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		c.Write(wctx, rally.Text, subscribe)
		cancel()
	})
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// memorySampler reads the server's RSS by pid or from its metrics.
type memorySampler struct {
	pid     int
	metrics string
	client  *http.Client
	peak    atomic.Int64
}

func newMemorySampler(pid int, metricsURL string) *memorySampler {
	return &memorySampler{pid: pid, metrics: metricsURL, client: &http.Client{Timeout: 2 * time.Second}}
}

func (m *memorySampler) source() string {
	switch {
	case m.pid > 0:
		return "pid " + strconv.Itoa(m.pid)
	case m.metrics != "":
		return "metrics"
	}
	return ""
}

// anon returns the server's own resident memory now (RssAnon), or 0 if
// there is no pid to read it from.
func (m *memorySampler) anon() int64 {
	if m.pid <= 0 {
		return 0
	}
	n, err := ProcessAnonMemory(m.pid)
	if err != nil {
		return 0
	}
	return n
}

// sample returns the RSS now, or 0 if it cannot be read.
func (m *memorySampler) sample() int64 {
	if m.pid > 0 {
		rss, _, err := ProcessMemory(m.pid)
		if err != nil {
			return 0
		}
		return rss
	}
	if m.metrics == "" {
		return 0
	}
	resp, err := m.client.Get(m.metrics)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f)
		}
	}
	return 0
}

// watch samples every 250 ms until ctx ends, keeping the peak.
func (m *memorySampler) watch(ctx context.Context) {
	if m.source() == "" {
		return
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if v := m.sample(); v > m.peak.Load() {
			m.peak.Store(v)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
