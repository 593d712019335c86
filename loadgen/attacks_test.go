package loadgen_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

// Each attack of its own against an in-process `rally serve` gets the
// server's answer a user would see: pings past the control rate closed
// with 1008, subscriptions acked, a recovery of every missed message in
// order, a bomb past /echo's limit closed with 1009. Figures are not
// judged: the machine running the test may be busy.
func TestEachAttackScenarioGetsTheServersAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of attack per scenario; runs without -short")
	}
	addr := serveRally(t, server.Config{Logger: slog.New(slog.DiscardHandler),
		History: server.HistoryConfig{Topics: []string{"hostile-history"}, Size: 100}})
	for _, tc := range []struct {
		scenario, path string
		conns, size    int
		want           string
		least          int64
	}{
		{"ping-flood", "/echo", 2, 0, "close 1008 (control frames too fast)", 1},
		{"many-subs", "/ws", 3, 10, "subscribed", 30},
		{"reconnect-old", "/ws", 2, 50, "recovered exactly", 1},
		{"bomb", "/echo", 2, 2 << 20, "close 1009 (message larger than 1MiB, the limit of /echo (rally serve --echo-max-message-bytes))", 1},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
				Scenario: tc.scenario, URL: "ws://" + addr + tc.path, Conns: tc.conns, Size: tc.size,
				Duration: 10 * time.Second, Settle: time.Millisecond, MaxRSS: 1 << 40, MaxProbeP99: time.Hour,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Answers[tc.want] < tc.least {
				t.Errorf("answers %v, want %s x%d at least", res.Answers, tc.want, tc.least)
			}
			for answer, n := range res.Answers {
				switch answer {
				// A dial may fail on a busy machine, or as the attack ends.
				case tc.want, "open", "dial error", "pings sent", "pongs received":
				default:
					t.Errorf("%s x%d among the answers %v", answer, n, res.Answers)
				}
			}
		})
	}
}
