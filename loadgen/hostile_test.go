package loadgen_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

// headLimitedServer is a net/http server whose request heads are limited
// to about 1 KiB (plus net/http's 4 KiB of slack): past it, 431.
func headLimitedServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: 1 << 10}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "ws://" + ln.Addr().String() + "/echo"
}

func TestHeadHoldCountsThe431OfEveryConnection(t *testing.T) {
	echo := startServer(t, echoReply)
	defer echo.stop()
	res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
		Scenario: "head-hold", URL: headLimitedServer(t), ProbeURL: echo.url("/"),
		Conns: 8, Size: 64 << 10, Duration: 2 * time.Second, Settle: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answers["431"] != 8 || res.Opened != 8 {
		t.Errorf("answers %v of %d opened, want 431 x8", res.Answers, res.Opened)
	}
	if res.Probes == 0 || res.ProbeFailures != 0 {
		t.Errorf("%d probes, %d failed, want some and none failed", res.Probes, res.ProbeFailures)
	}
	// The slowest probes say when they ran and where their time went,
	// slowest first.
	sp := res.SlowestProbes
	if len(sp) == 0 || len(sp) > 5 || int64(len(sp)) > res.Probes {
		t.Fatalf("%d slowest probes of %d, want 1 to 5", len(sp), res.Probes)
	}
	for i, p := range sp {
		if p.At < 0 || p.DialUS <= 0 || p.EchoUS <= 0 || i > 0 && p.DialUS+p.EchoUS > sp[i-1].DialUS+sp[i-1].EchoUS {
			t.Errorf("slowest probes %+v: want positive dial and echo times, slowest first", sp)
		}
	}
	var out bytes.Buffer
	res.WriteSummary(&out)
	if !strings.Contains(out.String(), "slowest probes: at ") {
		t.Errorf("summary without the slowest probes:\n%s", out.String())
	}
}

func TestHostileVerdictFailsPastTheMemoryBound(t *testing.T) {
	echo := startServer(t, echoReply)
	defer echo.stop()
	res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
		Scenario: "garbage", URL: echo.url("/"), Conns: 4, Duration: time.Second, Settle: time.Millisecond,
		ServerPID: os.Getpid(), MaxRSS: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != "FAIL" || len(res.Reasons) == 0 || !strings.Contains(res.Reasons[0], "peak RSS") {
		t.Errorf("verdict %s %v, want FAIL for the peak RSS", res.Verdict, res.Reasons)
	}
	var out bytes.Buffer
	res.WriteSummary(&out)
	if !strings.HasPrefix(out.String(), "garbage: FAIL  4 connections") || !strings.Contains(out.String(), "server RSS (pid ") ||
		!strings.Contains(out.String(), "of which its own (RssAnon") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// The server's memory after an attack is held to the hostile target:
// at most 1.5 times what it was before, and 16 MiB more after a peak of
// 1 GiB or more (the runtime's huge pages for its heap metadata).
func TestHostileVerdictFailsWhenMemoryAfterIsOverOneAndAHalfTimesBefore(t *testing.T) {
	for _, c := range []struct {
		before, peak, after int64
		want                string
	}{
		{20 << 20, 100 << 20, 30 << 20, ""},
		{20 << 20, 100 << 20, 31 << 20, "RSS 31.0 MiB after 30s, over 1.5x the 20.0 MiB before"},
		{20 << 20, 100 << 20, 12 << 20, ""},
		{20 << 20, 1 << 30, 46 << 20, ""},
		{20 << 20, 1 << 30, 47 << 20, "RSS 47.0 MiB after 30s, over 1.5x the 20.0 MiB before and the 16.0 MiB the runtime keeps after a peak past 1.0 GiB"},
	} {
		reasons := loadgen.MemoryAfterVerdict(c.before, c.peak, c.after)
		switch {
		case c.want == "" && len(reasons) > 0:
			t.Errorf("%d before, %d peak, %d after: %v, want a pass", c.before, c.peak, c.after, reasons)
		case c.want != "" && (len(reasons) != 1 || reasons[0] != c.want):
			t.Errorf("%d before, %d peak, %d after: %v, want %q", c.before, c.peak, c.after, reasons, c.want)
		}
	}
}

// The adversary's well-behaved subscribers share the fast subscriber's
// topic, so the server does their work too: the rate under attack is held
// to the rate beside them, not to the rate alone.
func TestTheAdversaryHoldsTheFastSubscriberToItsRateBesideTheWellBehavedClients(t *testing.T) {
	for _, c := range []struct {
		solo, peers, attack float64
		fail                string
	}{
		{100, 40, 25, ""},
		{100, 40, 15, "under half its 40/s beside the well-behaved clients alone"},
		{100, 0, 60, ""},
		{100, 0, 40, "under half its 100/s alone"},
	} {
		reasons := loadgen.FastRateVerdict(c.solo, c.peers, c.attack)
		switch {
		case c.fail == "" && len(reasons) > 0:
			t.Errorf("%v/s alone, %v/s beside, %v/s under attack: %v, want a pass", c.solo, c.peers, c.attack, reasons)
		case c.fail != "" && (len(reasons) != 1 || !strings.Contains(reasons[0], c.fail)):
			t.Errorf("%v/s alone, %v/s beside, %v/s under attack: %v, want %q", c.solo, c.peers, c.attack, reasons, c.fail)
		}
	}
}

// probedGarbageRun runs a short garbage attack on an echo server with
// its probe in a process of its own, and returns the result and the
// server's URL.
func probedGarbageRun(t *testing.T) (*loadgen.HostileResult, string) {
	t.Helper()
	echo := startServer(t, echoReply)
	t.Cleanup(echo.stop)
	res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
		Scenario: "garbage", URL: echo.url("/"), Conns: 4, Duration: slowness.Scale(2 * time.Second), Settle: time.Millisecond,
		MaxRSS: 1 << 40, MaxProbeP99: time.Hour, ProbeProcess: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, echo.url("/")
}

// The probe runs in a process of its own, so that the attack's
// goroutines do not delay it: what it measured reaches the result.
func TestTheProbeOfAHostileRunRunsInAProcessOfItsOwn(t *testing.T) {
	workers := workersInThisBinary(t)
	res, url := probedGarbageRun(t)
	if started := workers(); len(started) != 1 || !strings.HasPrefix(started[0], "garbage "+url) {
		t.Errorf("started %q, want one probe process for garbage against the echo URL", workers())
	}
	if res.ProbeFrom != "its own process" || res.Probes == 0 || res.ProbeFailures == res.Probes {
		t.Errorf("probe from %q, %d probes, %d failed: want probes from its own process, answered", res.ProbeFrom, res.Probes, res.ProbeFailures)
	}
	var out bytes.Buffer
	res.WriteSummary(&out)
	if !strings.Contains(out.String(), "from its own process") {
		t.Errorf("summary does not say where the probe ran:\n%s", out.String())
	}
}

// A probe process that ends without probing does not let the attack
// pass unprobed: the run probes from its own process instead.
func TestAProbeProcessThatEndsWithoutProbingIsReplacedByAProbeFromHere(t *testing.T) {
	defer loadgen.SetWorkerCommand(func([]string) (*exec.Cmd, error) { return exec.Command("true"), nil })()
	res, _ := probedGarbageRun(t)
	if res.ProbeFrom != "the attacking process" || res.Probes == 0 {
		t.Errorf("probe from %q, %d probes: want probes from the attacking process", res.ProbeFrom, res.Probes)
	}
	if res.Answers["probe process: it ended without a probe (<nil>)"] != 1 {
		t.Errorf("answers %v, want the probe process's end counted", res.Answers)
	}
}

func TestHostileMainRefusesAnUnknownScenarioAndBadFlagsWith2(t *testing.T) {
	for _, args := range [][]string{
		{"slowloris"},
		{"slowloris", "ftp://x/echo"},
		{"slowloris", "ws://x/echo", "--conns", "-1"},
	} {
		var out, errOut bytes.Buffer
		if code := loadgen.HostileMain(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// The fast pair of adversary and h2-slow-read (the flood's publisher and
// the measured subscriber) runs in a process of its own, as the probe
// does: the attack's goroutines do not delay it, and its counts reach
// the result. A pair process that says nothing is replaced by a pair
// from the attacking process.
func TestTheFastPairOfAHostileRunRunsInAProcessOfItsOwn(t *testing.T) {
	addr := serveRally(t, server.Config{Logger: slog.New(slog.DiscardHandler), H2C: true})
	run := func() *loadgen.HostileResult {
		res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
			Scenario: "h2-slow-read", URL: "ws://" + addr + "/ws", Conns: 1, Size: 4,
			Duration: slowness.Scale(2 * time.Second), Settle: time.Millisecond,
			MaxRSS: 1 << 40, MaxProbeP99: time.Hour, ProbeProcess: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("own", func(t *testing.T) {
		workers := workersInThisBinary(t)
		res := run()
		pairs := 0
		for _, w := range workers() {
			if strings.HasPrefix(w, "h2-slow-read ws://"+addr+"/ws ") {
				pairs++
			}
		}
		if pairs != 1 {
			t.Errorf("started %q, want one pair process for the /ws URL", workers())
		}
		if res.Published == 0 || res.FastSoloRate == 0 || res.FastAttackRate == 0 {
			t.Errorf("published %d, fast subscriber %.0f/s alone and %.0f/s under attack: want the pair process's counts", res.Published, res.FastSoloRate, res.FastAttackRate)
		}
	})
	t.Run("mute", func(t *testing.T) {
		defer loadgen.SetWorkerCommand(func([]string) (*exec.Cmd, error) { return exec.Command("true"), nil })()
		res := run()
		if res.Published == 0 || res.FastSoloRate == 0 {
			t.Errorf("published %d, fast subscriber %.0f/s alone: want the pair from the attacking process", res.Published, res.FastSoloRate)
		}
		if res.Answers["pair process: it ended without a word (<nil>)"] != 1 {
			t.Errorf("answers %v, want the pair process's end counted", res.Answers)
		}
	})
}
