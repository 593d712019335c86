package interop_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rallyws/rally/server"
)

// fastBackoff keeps the tests' reconnects short; the cap is still reached.
// The handshake timeout is longer than any wait of the tests: every failed
// try must end on what the WebSocket reports (a refused handshake, a
// connection the proxy closes), never on the timeout, and a handshake slow
// on a busy machine still counts.
var fastBackoff = map[string]any{"minDelay": 10, "maxDelay": 80, "timeout": 10 * 60 * 1000}

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
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, serverConfig())
			proxy, c := startJSClientThroughProxy(t, rt, srv.addr)
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
	})
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

// The client asks its getToken callback for a token before connecting
// without one, again when the server refused the handshake (a token signed
// with another key: 401, which a browser cannot see, so any failure before
// the open counts), and again when the server closed the connection
// because the token expired (1008 "token expired"); with each new token it
// connects and subscribes again.
func TestJSClientRefreshesItsTokenBeforeReconnecting(t *testing.T) {
	secret := strings.Repeat("k", 32)
	token := func(key string, life time.Duration) string {
		claims := server.Claims{Subscribe: []string{"*"}, Publish: []string{"*"}}
		claims.ExpiresAt = jwt.NewNumericDate(time.Now().Add(life))
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			cfg := serverConfig()
			cfg.TokenSecret = secret
			cfg.APIKey = testAPIKey
			srv := startRallyServe(t, mode, cfg)
			base := "http://" + srv.addr
			options := map[string]any{"refresh": true}
			for k, v := range fastBackoff {
				options[k] = v
			}
			c := startJSClient(t, rt, base, base+"/ws", options)
			c.do("subscribe", map[string]any{"topic": "news"})
			c.do("connect", nil)
			c.expect("connecting")
			c.expect("getToken")
			c.do("token", map[string]any{"token": token(strings.Repeat("x", 32), time.Hour)})
			if e := c.expect("connecting"); e.Attempt != 1 {
				t.Fatalf("after a refused handshake: %s, want attempt 1", e)
			}
			c.expect("getToken")
			// It expires in a few seconds: the server then closes the
			// connection.
			c.do("token", map[string]any{"token": token(secret, 3*time.Second)})
			c.expect("connected")
			c.expect("subscribed")
			if e := c.expect("disconnected"); e.Code != 1008 || e.Reason != "token expired" || !e.Reconnect {
				t.Fatalf("at the token's expiry: %s, want 1008 token expired and a reconnect", e)
			}
			c.expect("connecting")
			c.expect("getToken")
			c.do("token", map[string]any{"token": token(secret, time.Hour)})
			c.expect("connected")
			if e := c.expect("subscribed"); !e.Resubscribed {
				t.Fatalf("after the new token: %s, want resubscribed", e)
			}
			publishHTTP(t, srv.addr, "news", "with a fresh token")
			if d := receive(t, c, "news"); string(d) != `"with a fresh token"` {
				t.Fatalf("message: %s", d)
			}
		})
	})
}

// In a browser, the client follows the window's offline and online
// events (Chromium fires them when DevTools takes its network state
// offline and back): offline drops the connection at once and makes no
// attempt while offline (the next event after online is a first attempt
// with no delay); online reconnects and resubscribes.
func TestJSClientInChromiumWaitsForTheBrowserToBeOnline(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		srv := startRallyServe(t, mode, serverConfig())
		base := "http://" + srv.addr
		c := startJSClient(t, "chromium", base, base+"/ws", fastBackoff)
		c.do("subscribe", map[string]any{"topic": "news"})
		c.do("connect", nil)
		c.expect("connecting")
		c.expect("connected")
		c.expect("subscribed")
		c.network(false)
		if e := c.expect("disconnected"); e.Code != 1006 || e.Reason != "offline" || !e.Reconnect {
			t.Fatalf("offline: %s, want 1006 offline and a reconnect later", e)
		}
		c.network(true)
		if e := c.expect("connecting"); e.Attempt != 0 || e.Delay != 0 || e.Reason != "offline" {
			t.Fatalf("online: %s, want a first attempt at once", e)
		}
		c.expect("connected")
		if e := c.expect("subscribed"); !e.Resubscribed {
			t.Fatalf("online: %s, want resubscribed", e)
		}
	})
}

// publish resolves with the server's ack and rejects with the server's
// error code; a refused subscribe is an "error" event for its topic;
// while not connected, publish rejects at once with not_connected.
func TestJSClientPublishesAndReportsRefusals(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, serverConfig())
			base := "http://" + srv.addr
			c := startJSClient(t, rt, base, base+"/ws", fastBackoff)
			c.do("subscribe", map[string]any{"topic": "chat"})
			c.do("connect", nil)
			c.expect("connecting")
			c.expect("connected")
			c.expect("subscribed")
			c.do("publish", map[string]any{"ref": 1, "topic": "chat", "data": map[string]string{"text": "hi"}, "self": true})
			// self: the publisher gets its own message, then the ack.
			if d := receive(t, c, "chat"); !sameJSON(string(d), `{"text":"hi"}`) {
				t.Fatalf("own message: %s", d)
			}
			if e := c.expect("published"); e.Ref != 1 || e.ErrCode != "" || !strings.Contains(string(e.Ack), `"type":"ack"`) {
				t.Fatalf("publish: %s, want the ack", e)
			}
			c.do("publish", map[string]any{"ref": 2, "topic": "no spaces", "data": 1})
			if e := c.expect("published"); e.Ref != 2 || e.ErrCode != "invalid_topic" {
				t.Fatalf("publish on a bad topic: %s, want invalid_topic", e)
			}
			c.do("subscribe", map[string]any{"topic": "no spaces"})
			if e := c.expect("error"); e.ErrCode != "invalid_topic" || e.Topic != "no spaces" {
				t.Fatalf("subscribe to a bad topic: %s, want an invalid_topic error for it", e)
			}
			c.do("close", nil)
			c.expect("disconnected")
			c.do("publish", map[string]any{"ref": 3, "topic": "chat", "data": 1})
			if e := c.expect("published"); e.Ref != 3 || e.ErrCode != "not_connected" {
				t.Fatalf("publish after close: %s, want not_connected", e)
			}
		})
	})
}

// close ends the connection with a close handshake on the wire: the
// client's close frame (1000, masked as a client's must be) and the
// server's answer; the client reports the close and makes no new attempt.
func TestJSClientClosesWithACloseHandshake(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			cfg := serverConfig()
			cfg.Origins = []string{"127.0.0.1:*"} // Chromium's page is on the server, its WebSocket goes through the tap
			srv := startRallyServe(t, mode, cfg)
			tap := newWireTap(t, srv.addr)
			base := "http://" + srv.addr
			c := startJSClient(t, rt, base, "ws://"+tap.Addr()+"/ws", fastBackoff)
			c.do("subscribe", map[string]any{"topic": "news"})
			c.do("connect", nil)
			c.until("subscribed")
			c.do("close", map[string]any{"code": 4000, "reason": "bye"})
			if e := c.expect("disconnected"); e.Code != 4000 || e.Reason != "bye" || e.Reconnect {
				t.Fatalf("close: %s, want 4000 bye and no reconnect", e)
			}
			closeFrame := func(l *wireLog) string {
				for {
					f := l.next()
					if f == "nothing" || strings.HasPrefix(f, "88 ") {
						return f
					}
				}
			}
			// 4000 = 0x0fa0, "bye" = 627965.
			if f := closeFrame(tap.c2s); f != "88 05 0fa0627965" {
				t.Fatalf("client's close frame: %q, want 88 05 0fa0627965", f)
			}
			if f := closeFrame(tap.s2c); !strings.HasPrefix(f, "88 ") {
				t.Fatalf("server's close frame: %q, want one", f)
			}
		})
	})
}
