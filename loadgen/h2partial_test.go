package loadgen_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

// h2-partial's streams send their messages within the windows rally serve
// grants over HTTP/2: a message of 1 MiB − 1 is sixteen times the
// initial window of the connection, so it arrives only through the
// server's WINDOW_UPDATEs, and rally serve charges what it gathered to the
// memory budget as over HTTP/1.1. A message over /echo's limit is
// answered on its stream with 1009.
func TestH2PartialStreamsSendWithinTheWindowsAndGetTheServersAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack of a few seconds; runs without -short")
	}
	cfg := server.Config{H2C: true, HandshakeRate: -1, Logger: slog.New(slog.DiscardHandler)}
	run := func(ctx context.Context, addr string, streams, size int) *loadgen.HostileResult {
		res, err := loadgen.RunHostile(ctx, loadgen.HostileConfig{
			Scenario: "h2-partial", URL: "ws://" + addr + "/echo", Conns: streams, Size: size,
			Duration: time.Minute, Settle: time.Millisecond, MaxRSS: 1 << 40, MaxProbeP99: time.Hour,
		})
		if err != nil {
			t.Error(err)
		}
		return res
	}

	t.Run("gathered", func(t *testing.T) {
		addr := serveRally(t, cfg)
		const streams, size = 3, 1<<20 - 1
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *loadgen.HostileResult, 1)
		go func() { done <- run(ctx, addr, streams, size) }()
		var gathered float64
		waitFor(t, "every stream's message gathered and charged", func() bool {
			gathered = metricValue(scrapeMetrics(t, "http://"+addr+"/metrics"), `rally_memory_budget_used_bytes{category="assembly"}`)
			return gathered >= streams*(size-1)
		})
		cancel()
		res := <-done
		if res == nil {
			return
		}
		if res.Answers["h2 200"] != streams {
			t.Errorf("answers %v, want h2 200 x%d", res.Answers, streams)
		}
		t.Logf("%.0f bytes charged to assembly; answers %v", gathered, res.Answers)
	})

	t.Run("over the limit", func(t *testing.T) {
		addr := serveRally(t, cfg)
		const streams = 3
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res := run(ctx, addr, streams, 2<<20)
		if res == nil {
			return
		}
		const want = "close 1009 (message larger than 1MiB, the limit of /echo (rally serve --echo-max-message-bytes))"
		if res.Answers["h2 200"] != streams || res.Answers[want] != streams {
			t.Errorf("answers %v, want h2 200 and %s x%d each", res.Answers, want, streams)
		}
	})
}
