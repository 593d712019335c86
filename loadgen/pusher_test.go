package loadgen_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

// Against rally serve with a Pusher app, every triggered event reaches
// every subscriber, over the Pusher protocol and over /ws with --compare.
func TestPusherFanOutDeliversEveryEventToEverySubscriber(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1"}},
	})
	const conns, events = 20, 50
	for _, channels := range []string{"1", "3"} {
		var out, errb bytes.Buffer
		args := []string{"pusher", "ws://" + addr, "--app", "a1:k1:s1",
			"--conns", "20", "--events", "50", "--channels", channels, "--compare", "--json"}
		if channels == "1" {
			// The server is this process: the memory and CPU paths run.
			args = append(args, "--server-pid", strconv.Itoa(os.Getpid()))
		}
		status := loadgen.PusherMain(args, &out, &errb)
		if status != 0 {
			t.Fatalf("--channels %s: exit %d, stderr %q, stdout %s", channels, status, errb.String(), out.String())
		}
		var res loadgen.PusherResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("--channels %s: %v in %s", channels, err, out.String())
		}
		if res.WS == nil {
			t.Fatalf("--channels %s: no /ws result with --compare", channels)
		}
		for _, f := range []*loadgen.FanoutResult{res.Pusher, res.WS} {
			want := int64(conns * events)
			if channels == "3" {
				// Events go to the channels in turn, subscribers too:
				// channel i has subscribers and events in the same turn.
				want = 0
				for e := range events {
					for c := range conns {
						if c%3 == e%3 {
							want++
						}
					}
				}
			}
			if f.Subscribed != conns || f.Triggered != events || f.Deliveries != want || f.Expected != want || f.Errors != 0 {
				t.Errorf("--channels %s, %s: subscribed %d, triggered %d, deliveries %d (expected %d, want %d), errors %d %v",
					channels, f.Protocol, f.Subscribed, f.Triggered, f.Deliveries, f.Expected, want, f.Errors, f.ErrorSamples)
			}
		}
	}
}

// A wrong secret is refused by the server: the run says so and exits 1.
func TestPusherWrongSecretFails(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1"}},
	})
	var out, errb bytes.Buffer
	status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:wrong", "--conns", "2", "--events", "2"}, &out, &errb)
	if status != 1 || !strings.Contains(out.String(), "401") {
		t.Errorf("exit %d, stdout %q: want 1 and the 401", status, out.String())
	}
}

// A wrong --app is a usage error that names --app and never shows the
// secret; its limits are rally serve's.
func TestPusherBadAppIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"pusher", "ws://127.0.0.1:1"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1::s1"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1::s1:client-event-rate=4"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1:s1:client-event-rate=fast"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1:s1:client-event-rate=-1"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1:s1:events-rate=1"},
	} {
		var out, errb bytes.Buffer
		if status := loadgen.PusherMain(args, &out, &errb); status != 2 || !strings.Contains(errb.String(), "--app") {
			t.Errorf("%q: exit %d, stderr %q: want 2 naming --app", args, status, errb.String())
		}
		if strings.Contains(errb.String(), "s1") {
			t.Errorf("%q: stderr %q shows the secret", args, errb.String())
		}
	}
}

func TestPusherPublishersWithoutClientEventsOrFewerThanChannelsIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1:s1", "--publishers", "2"},
		{"pusher", "ws://127.0.0.1:1", "--app", "a1:k1:s1", "--client-events", "--publishers", "2", "--channels", "3"},
	} {
		var out, errb bytes.Buffer
		if status := loadgen.PusherMain(args, &out, &errb); status != 2 || !strings.Contains(errb.String(), "--publishers") {
			t.Errorf("%q: exit %d, stderr %q: want 2 naming --publishers", args, status, errb.String())
		}
	}
}

// --ws-only runs the /ws fan-out alone, first on the server, and reports
// the server's memory per subscriber for it.
func TestPusherWSOnlyReportsTheMemoryOfWSSubscribers(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1"}},
	})
	var out, errb bytes.Buffer
	status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1", "--conns", "20", "--events", "5",
		"--ws-only", "--json", "--server-pid", strconv.Itoa(os.Getpid())}, &out, &errb)
	if status != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", status, errb.String(), out.String())
	}
	var res loadgen.PusherResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Pusher != nil || res.WS == nil || res.WS.Deliveries != 20*5 {
		t.Fatalf("--ws-only: pusher %+v, ws %+v", res.Pusher, res.WS)
	}
	var errb2 bytes.Buffer
	if status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1", "--ws-only", "--compare"}, &out, &errb2); status != 2 {
		t.Errorf("--ws-only with --compare: exit %d, want 2", status)
	}
}

// --app takes the value given to rally serve --pusher-app, limits
// included.
func TestPusherAppTakesTheLimitsOfRallyServe(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1", ClientEventRate: 4}},
	})
	var out, errb bytes.Buffer
	status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1:client-event-rate=4:max-connections=100",
		"--conns", "2", "--events", "3"}, &out, &errb)
	if status != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", status, errb.String(), out.String())
	}
}

// With --client-events, subscribers of private channels get every client
// event the publishers send, over the Pusher protocol and, with
// --compare, as publishes on /ws; no publisher gets its own back, and
// each gets the other's (two per channel). A publisher reads until the
// server answered a ping sent after its last event: on one node its own
// events would have come back before that answer.
func TestPusherClientEventsReachEverySubscriberAndNotTheirSender(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1"}},
	})
	// 20 events on 2 channels, 2 publishers each: 5 events a publisher,
	// the burst the default client-event-rate (10) allows it to send at
	// once.
	const conns, events, publishers = 6, 20, 4
	var out, errb bytes.Buffer
	status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1", "--client-events",
		"--conns", "6", "--events", "20", "--channels", "2", "--publishers", "4", "--compare", "--json"}, &out, &errb)
	if status != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %s", status, errb.String(), out.String())
	}
	var res loadgen.PusherResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if res.Pusher == nil || res.WS == nil {
		t.Fatalf("pusher %+v, ws %+v: want both with --compare", res.Pusher, res.WS)
	}
	for _, f := range []*loadgen.FanoutResult{res.Pusher, res.WS} {
		// Each channel has 3 subscribers and 10 events.
		const want = events * conns / 2
		if !f.ClientEvents || f.Publishers != publishers || f.Subscribed != conns || f.Triggered != events ||
			f.Deliveries != want || f.Expected != want || f.Errors != 0 || f.TriggerErrors != 0 {
			t.Errorf("%s: client events %v, publishers %d, subscribed %d, sent %d, deliveries %d (expected %d, want %d), errors %d and %d %v",
				f.Protocol, f.ClientEvents, f.Publishers, f.Subscribed, f.Triggered, f.Deliveries, f.Expected, want, f.Errors, f.TriggerErrors, f.ErrorSamples)
		}
		if f.Echoed != 0 {
			t.Errorf("%s: publishers got %d of their own events back", f.Protocol, f.Echoed)
		}
		// Each event reaches the other publisher of its channel.
		if f.PublisherDeliveries != events || f.PublisherExpected != events {
			t.Errorf("%s: publishers got %d of one another's events (expected %d), want %d", f.Protocol, f.PublisherDeliveries, f.PublisherExpected, events)
		}
	}

	var summary, errb2 bytes.Buffer
	loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1", "--client-events",
		"--conns", "2", "--events", "2"}, &summary, &errb2)
	if !strings.Contains(summary.String(), "2 sent as client events, 4 deliveries of 4 expected") {
		t.Errorf("summary does not say the events were client events:\n%s", summary.String())
	}
}

// An event the server refuses past the app's client-event-rate is an
// error: not counted as sent, and the run exits 1. The server allows 1
// event a second; the bench, told nothing of it, assumes 10: it sends 5
// at once, then 9 a second.
func TestPusherClientEventOverTheRateLimitIsAnError(t *testing.T) {
	addr := serveRally(t, server.Config{
		Logger:     slog.New(slog.DiscardHandler),
		PusherApps: []server.PusherApp{{ID: "a1", Key: "k1", Secret: "s1", ClientEventRate: 1}},
	})
	const conns, events = 2, 10
	var out, errb bytes.Buffer
	status := loadgen.PusherMain([]string{"pusher", "ws://" + addr, "--app", "a1:k1:s1", "--client-events",
		"--conns", "2", "--events", "10", "--publishers", "1", "--json"}, &out, &errb)
	var res loadgen.PusherResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("exit %d, stderr %q: %v in %s", status, errb.String(), err, out.String())
	}
	f := res.Pusher
	if status != 1 || f.TriggerErrors == 0 || f.Triggered+f.TriggerErrors != events {
		t.Fatalf("exit %d, sent %d, refused %d: want exit 1 and the %d events either sent or refused, some refused",
			status, f.Triggered, f.TriggerErrors, events)
	}
	if f.Expected != f.Triggered*conns || f.Deliveries != f.Expected {
		t.Errorf("deliveries %d, expected %d: want the %d sent events to each of %d subscribers", f.Deliveries, f.Expected, f.Triggered, conns)
	}
	if !strings.Contains(strings.Join(f.ErrorSamples, "\n"), "pusher:error 4301") {
		t.Errorf("error samples %q do not name the refusal", f.ErrorSamples)
	}
}
