package loadgen

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one run measured. Counts, rates and latencies cover the
// window only (after the warm-up); Errors covers the whole run. JSON field
// names are stable for machines.
type Result struct {
	Scenario     Scenario `json:"scenario"`
	URL          string   `json:"url"` // without user information or query values
	Conns        int      `json:"conns"`
	Size         int      `json:"size"`
	Text         bool     `json:"text"`
	InFlight     int      `json:"inflight"`
	VerbatimEcho bool     `json:"verbatim_echo,omitempty"`
	// Compress says permessage-deflate was offered; CompressedConns counts
	// the connections (handshakes, for connect) on which the server
	// accepted it, over the whole run.
	Compress        bool      `json:"compress,omitempty"`
	CompressedConns int64     `json:"compressed_conns,omitempty"`
	Started         time.Time `json:"started"`
	// WarmupSeconds and WindowSeconds are the warm-up and the measured window.
	WarmupSeconds float64 `json:"warmup_s"`
	WindowSeconds float64 `json:"window_s"`
	// Messages counts, in the window, echo replies (echo, throughput),
	// deliveries (chat), completed opening handshakes (connect), or
	// connections still open at the end (idle); Unit names which.
	Messages int64  `json:"messages"`
	Unit     string `json:"unit"`
	// Rate is Messages per second of the window; for idle it is the rate at
	// which the connections were opened.
	Rate float64 `json:"rate_per_s"`
	// PayloadBytes is the payload received in the window, MiBPerSecond its rate.
	PayloadBytes int64   `json:"payload_bytes"`
	MiBPerSecond float64 `json:"mib_per_s"`
	// Latency is the round trip of echo and throughput, send of the round
	// to delivery for chat, dial to 101 for connect and idle.
	Latency Latency `json:"latency"`
	// Errors counts, over the whole run (warm-up included), wrong replies
	// (type, length or sampled bytes), protocol violations, failed
	// handshakes and connections lost before the end.
	Errors int64 `json:"errors"`
	// ErrorSamples are the most frequent error messages with their counts.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Timeline is the count in each whole second of the window.
	Timeline []int64 `json:"timeline"`
	// Rounds are chat's rounds in the window, stalled ones counted.
	Rounds  *RoundStats  `json:"rounds,omitempty"`
	Idle    *IdleStats   `json:"idle,omitempty"`
	Server  *ServerStats `json:"server,omitempty"`
	Machine MachineStats `json:"machine"`
}

// ServerStats is the server's cost in the window, read from /proc when
// Config.ServerPID is set.
type ServerStats struct {
	PID                 int     `json:"pid"`
	CPUSeconds          float64 `json:"cpu_s"`
	CPUPercent          float64 `json:"cpu_percent"` // of one core
	CPUMicrosPerMessage float64 `json:"cpu_us_per_message"`
	RSSBytes            int64   `json:"rss_bytes"`      // at the end of the window
	PeakRSSBytes        int64   `json:"peak_rss_bytes"` // during the window
}

// MachineStats tells how much CPU loadgen used and how busy the machine
// was with other work (all cores, less the server and loadgen) in the window.
type MachineStats struct {
	Measured                   bool    `json:"measured"`
	LoadgenCPUSeconds          float64 `json:"loadgen_cpu_s"`
	LoadgenCPUMicrosPerMessage float64 `json:"loadgen_cpu_us_per_message"`
	OtherBusyPercent           float64 `json:"other_busy_percent"` // of the whole machine
}

// IdleStats is the outcome of the idle scenario.
type IdleStats struct {
	Opened int `json:"opened"`
	Held   int `json:"held"`
	// Subscribed counts the connections whose subscription the server
	// acknowledged (with IdleOptions.Subscribe).
	Subscribed int `json:"subscribed,omitempty"`
	// OpenSeconds is the time the opening handshakes took, all of them;
	// OpenStartNs and OpenEndNs are the wall clock (Unix ns) when the
	// first dial started and when the last connection was ready.
	OpenSeconds float64 `json:"open_s"`
	OpenStartNs int64   `json:"open_start_ns,omitempty"`
	OpenEndNs   int64   `json:"open_end_ns,omitempty"`
	// Procs is the number of processes the connections came from (1 when
	// 0).
	Procs int `json:"procs,omitempty"`
	// The servers' resident memory, summed over their processes: before
	// the first connection, once every connection was held, the largest
	// seen during the hold (sampled each second), at the end of the hold,
	// and ClosedAfterSeconds after the connections were closed. With Held
	// they give RSSPerConnBytes (end of the hold less before).
	RSSBeforeBytes     int64   `json:"rss_before_bytes,omitempty"`
	RSSHeldBytes       int64   `json:"rss_held_bytes,omitempty"`
	RSSPeakBytes       int64   `json:"rss_peak_bytes,omitempty"`
	RSSAfterBytes      int64   `json:"rss_after_bytes,omitempty"`
	RSSPerConnBytes    float64 `json:"rss_per_conn_bytes,omitempty"`
	RSSClosedBytes     int64   `json:"rss_closed_bytes,omitempty"`
	ClosedAfterSeconds float64 `json:"closed_after_s,omitempty"`
	// Pings counts the pings the server sent, Pongs the answers to the
	// connections' own pings (IdleOptions.PingInterval).
	Pings int64 `json:"pings"`
	Pongs int64 `json:"pongs"`
	// Broadcast is the outcome of IdleOptions.Broadcast.
	Broadcast *BroadcastStats `json:"broadcast,omitempty"`
}

// errorLog counts errors and keeps the most frequent messages.
type errorLog struct {
	n      atomic.Int64
	mu     sync.Mutex
	counts map[string]int64
}

const maxDistinctErrors = 32

func (e *errorLog) add(err error) {
	e.n.Add(1)
	msg := err.Error()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = make(map[string]int64)
	}
	if _, ok := e.counts[msg]; ok || len(e.counts) < maxDistinctErrors {
		e.counts[msg]++
	}
}

func (e *errorLog) samples() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	type kv struct {
		msg string
		n   int64
	}
	var all []kv
	for m, n := range e.counts {
		all = append(all, kv{m, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].msg < all[j].msg
	})
	var out []string
	for i, x := range all {
		if i == 5 {
			break
		}
		out = append(out, fmt.Sprintf("%s (x%d)", x.msg, x.n))
	}
	return out
}

// WriteSummary writes r for a person, a few aligned lines.
func (r *Result) WriteSummary(w io.Writer) {
	kind := "binary"
	if r.Text {
		kind = "text"
	}
	switch r.Scenario {
	case Echo, Throughput:
		fmt.Fprintf(w, "%s %s: %d conns x %d in flight, %s %s, %.1fs window\n", r.Scenario, r.URL, r.Conns, r.InFlight, Bytes(int64(r.Size)), kind, r.WindowSeconds)
	case Chat:
		fmt.Fprintf(w, "chat %s: %d clients x %d per round, %s %s, %.1fs window\n", r.URL, r.Conns, r.InFlight, Bytes(int64(r.Size)), kind, r.WindowSeconds)
	case Connect:
		fmt.Fprintf(w, "connect %s: %d workers, %.1fs window\n", r.URL, r.Conns, r.WindowSeconds)
	case Idle:
		fmt.Fprintf(w, "idle %s: %d connections held %.1fs\n", r.URL, r.Conns, r.WindowSeconds)
	}
	if r.Idle != nil {
		fmt.Fprintf(w, "  held      %d of %d (opened at %s/s in %.2fs)\n", r.Idle.Held, r.Conns, Count(r.Rate), r.Idle.OpenSeconds)
		r.Idle.writeSummary(w)
	} else {
		fmt.Fprintf(w, "  rate      %s %s/s", Count(r.Rate), r.Unit)
		if r.PayloadBytes > 0 {
			fmt.Fprintf(w, " (%.1f MiB/s of payload)", r.MiBPerSecond)
		}
		fmt.Fprintln(w)
	}
	if rs := r.Rounds; rs != nil {
		fmt.Fprintf(w, "  rounds    %d in the window, median %s, max %s, %d stalled (over %gx the median)\n",
			rs.Completed, Micros(rs.MedianMs*1e3), Micros(rs.MaxMs*1e3), rs.Stalled, rs.Factor)
	}
	l := r.Latency
	fmt.Fprintf(w, "  latency   p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n", Micros(l.P50), Micros(l.P90), Micros(l.P99), Micros(l.P999), Micros(l.Max))
	if r.Compress {
		fmt.Fprintf(w, "  compress  permessage-deflate accepted on %d connections\n", r.CompressedConns)
	}
	fmt.Fprintf(w, "  errors    %d\n", r.Errors)
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(w, "            %s\n", s)
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(w, "  server    pid %d: %.0f%% CPU", s.PID, s.CPUPercent)
		if r.Idle == nil && s.CPUMicrosPerMessage > 0 {
			fmt.Fprintf(w, ", %.2f us CPU per %s", s.CPUMicrosPerMessage, singular(r.Unit))
		}
		fmt.Fprintf(w, ", RSS %s (peak %s)\n", Bytes(s.RSSBytes), Bytes(s.PeakRSSBytes))
	}
	if r.Machine.Measured {
		fmt.Fprintf(w, "  machine   loadgen used %.0f%% of a core; other work kept %.0f%% of the machine busy\n",
			100*r.Machine.LoadgenCPUSeconds/max(r.WindowSeconds, 1e-9), r.Machine.OtherBusyPercent)
	}
}

// singular names one of a Result's Unit.
func singular(unit string) string {
	switch unit {
	case "replies":
		return "reply"
	case "deliveries":
		return "delivery"
	}
	return strings.TrimSuffix(unit, "s")
}

// Count formats a rate or count with thousands separators.
func Count(v float64) string {
	n := int64(v + 0.5)
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Bytes formats a byte count with a binary unit (B, KiB, MiB, GiB).
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Micros formats a latency given in microseconds.
func Micros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.0fus", us)
}
