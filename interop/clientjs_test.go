package interop_test

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/rallyws/rally/server"
)

// fastBackoff keeps the tests' reconnects short; the cap is still reached.
// The handshake timeout is short too: Node 20's WebSocket reports nothing
// when the proxy closes a connection during the handshake, so that
// attempt ends by the timeout.
var fastBackoff = map[string]any{"minDelay": 10, "maxDelay": 80, "timeout": 3000}

// checkBackoff fails unless the "connecting" events of a run of failed
// attempts count up from 1 with delays within full jitter's range: from 0
// to min(maxDelay, minDelay * 2^(attempt-1)).
func checkBackoff(t *testing.T, c *jsClient, events []jsEvent) (attempts int) {
	t.Helper()
	for _, e := range events {
		if e.Ev != "connecting" {
			continue
		}
		attempts++
		if e.Attempt != attempts {
			t.Fatalf("%s: connecting event %s, want attempt %d", c.name, e, attempts)
		}
		ceiling := math.Min(80, 10*math.Pow(2, float64(e.Attempt-1)))
		if e.Delay < 0 || e.Delay >= ceiling {
			t.Fatalf("%s: attempt %d waits %vms, want [0, %v)", c.name, e.Attempt, e.Delay, ceiling)
		}
	}
	return attempts
}

// receive waits for the next message event on topic and returns its data.
func receive(t *testing.T, c *jsClient, topic string) json.RawMessage {
	t.Helper()
	e, _ := c.until("message")
	if e.Topic != topic {
		t.Fatalf("%s: message on %q, want %q: %s", c.name, e.Topic, topic, e)
	}
	return e.Data
}

// The JavaScript client, in Node (npm ws and Node's own WebSocket) and in
// Chromium, loses its connection when the network between it and `rally
// serve` drops: it reports the drop (1006), retries with attempts that
// count up and delays within the backoff's bounds while the network stays
// down, and once it is back connects, subscribes again (resubscribed,
// not recovered: the topic has no history) and gets the next message.
func TestJSClientReconnectsAndResubscribesAfterTheNetworkDrops(t *testing.T) {
	for _, rt := range jsRuntimes {
		t.Run(rt, func(t *testing.T) {
			srv := startRallyServe(t, serverConfig())
			proxy := newCutProxy(t, srv.addr)
			base := "http://" + proxy.Addr()
			c := startJSClient(t, rt, base, base+"/ws", fastBackoff)
			c.do("subscribe", map[string]any{"topic": "news"})
			c.do("connect", nil)
			if e := c.expect("connecting"); e.Attempt != 0 || e.Delay != 0 {
				t.Fatalf("first connect: %s, want attempt 0 at once", e)
			}
			c.expect("connected")
			if e := c.expect("subscribed"); e.Topic != "news" || e.Resubscribed || e.Recovering || e.Recovered {
				t.Fatalf("first subscribe: %s", e)
			}
			publishHTTP(t, srv.addr, "news", map[string]int{"n": 1})
			if d := receive(t, c, "news"); !sameJSON(string(d), `{"n":1}`) {
				t.Fatalf("first message: %s", d)
			}

			proxy.Cut()
			if e := c.expect("disconnected"); e.Code != 1006 || !e.Reconnect {
				t.Fatalf("after the cut: %s, want 1006 and a reconnect", e)
			}
			// Three failed attempts prove the retries go on while the
			// network is down.
			var tried []jsEvent
			for n := 0; n < 4; n++ {
				e := c.expect("connecting")
				tried = append(tried, e)
			}
			if n := checkBackoff(t, c, tried); n != 4 {
				t.Fatalf("%d attempts", n)
			}
			proxy.Restore()
			e, skipped := c.until("connected")
			attempts := checkBackoff(t, c, append(tried, skipped...))
			if e.Attempt != attempts {
				t.Fatalf("connected %s after %d attempts", e, attempts)
			}
			s := c.expect("subscribed")
			if s.Topic != "news" || !s.Resubscribed || s.Recovered || s.Reason != "no_history" {
				t.Fatalf("resubscribe: %s, want resubscribed, not recovered, reason no_history", s)
			}
			publishHTTP(t, srv.addr, "news", map[string]int{"n": 2})
			if d := receive(t, c, "news"); !sameJSON(string(d), `{"n":2}`) {
				t.Fatalf("message after the reconnect: %s", d)
			}
			c.do("close", nil)
			if e := c.expect("disconnected"); e.Code != 1000 || e.Reconnect {
				t.Fatalf("close: %s, want 1000 and no reconnect", e)
			}
		})
	}
}

// serverConfig is `rally serve` as the client tests run it: defaults.
func serverConfig() server.Config { return server.Config{} }

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
