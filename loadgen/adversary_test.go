package loadgen_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

func TestAdversaryDrawsTheSameClientsFromTheSameSeed(t *testing.T) {
	a, b := loadgen.DrawAdversary(7, 200), loadgen.DrawAdversary(7, 200)
	if !slices.Equal(a, b) {
		t.Fatal("seed 7 drew two different sets of clients")
	}
	if slices.Equal(a, loadgen.DrawAdversary(8, 200)) {
		t.Error("seeds 7 and 8 drew the same clients")
	}
	seen := map[string]bool{}
	for _, behaviour := range a {
		seen[behaviour] = true
	}
	if len(seen) != 13 {
		t.Errorf("200 clients of seed 7 picked %d behaviours, want all 13: %v", len(seen), seen)
	}
}

// A short seeded adversary against an in-process `rally serve` (h2c on,
// history on the flooded topic), in both engines: once every client has left, the server holds no connection and
// nothing charged to its memory budget, and it still answers. Only these
// functional invariants are asserted; the figures (probe p99, the fast
// subscriber's rates, memory) are logged, not judged, as the machine
// running the test may be busy.
func TestAdversaryLeavesRallyServeHoldingNoConnectionAndNoCharge(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of attack per engine; runs without -short")
	}
	for _, eventLoop := range []bool{false, true} {
		name := "goroutines"
		if eventLoop {
			name = "event-loop"
		}
		t.Run(name, func(t *testing.T) {
			addr := serveRally(t, server.Config{EventLoop: eventLoop, Logger: slog.New(slog.DiscardHandler),
				H2C: true, History: server.HistoryConfig{Topics: []string{"adversary"}}})
			res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
				Scenario: "adversary", URL: "ws://" + addr + "/ws", Seed: 3, Conns: 40,
				// 3 s on an idle machine: on a busy one the pair and
				// the clients need longer to connect at all.
				Duration: slowness.Scale(3 * time.Second), Settle: time.Millisecond,
				MaxRSS: 1 << 40, MaxProbeP99: time.Hour,
			})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			res.WriteSummary(&out)
			t.Logf("%s", out.String())
			drawn := int64(0)
			for _, n := range res.Behaviours {
				drawn += n
			}
			if res.Seed != 3 || drawn != 40 {
				t.Errorf("seed %d, %d clients drawn (%v); want seed 3 and 40 clients", res.Seed, drawn, res.Behaviours)
			}
			if res.ConnsAfter != 0 || res.ChargedAfter != 0 {
				t.Errorf("after every client left the server held %d connections and %d bytes charged to its budget, want none", res.ConnsAfter, res.ChargedAfter)
			}
			if res.Probes == 0 || res.ProbeFailures == res.Probes {
				t.Errorf("%d probes, %d failed: the server did not answer a fresh client during the attack", res.Probes, res.ProbeFailures)
			}
			// The seed draws the behaviours over HTTP/2 and with history
			// positions (what the server answered them is logged above).
			for _, b := range []string{"h2-non-reader", "reconnect-old"} {
				if res.Behaviours[b] == 0 {
					t.Errorf("seed 3 drew no %s: %v", b, res.Behaviours)
				}
			}
			if res.Published == 0 || res.FastSoloRate == 0 {
				t.Errorf("published %d, fast subscriber %.0f/s alone: the well-behaved pair did not run", res.Published, res.FastSoloRate)
			}
		})
	}
}

// serveRally runs a `rally serve` server in this process on a loopback
// port until the test ends, and returns its address.
func serveRally(t *testing.T, cfg server.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}
