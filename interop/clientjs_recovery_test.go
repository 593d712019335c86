package interop_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/pubsub/natsbroker"
	"github.com/rallyws/rally/server"
)

// historyConfig is `rally serve` with history on every topic, size
// messages deep.
func historyConfig(size int) server.Config {
	cfg := serverConfig()
	cfg.History = server.HistoryConfig{Topics: []string{"*"}, Size: size}
	return cfg
}

// numbered decodes a message {"n": N}.
func numbered(t *testing.T, c *jsClient, e jsEvent) int {
	t.Helper()
	var m struct{ N int }
	if err := json.Unmarshal(e.Data, &m); err != nil || m.N == 0 {
		t.Fatalf("%s: message %s is not {\"n\": N}", c.name, e)
	}
	return m.N
}

// subscribedTo waits for the client's subscribe on "news" (connect first)
// and returns the subscribed event.
func connectAndSubscribe(t *testing.T, c *jsClient) jsEvent {
	t.Helper()
	c.do("subscribe", map[string]any{"topic": "news"})
	c.do("connect", nil)
	e, _ := c.until("subscribed")
	if e.Position == nil || e.Position.Epoch == "" {
		t.Fatalf("%s: subscribe to a history topic: %s, want the topic's position", c.name, e)
	}
	return e
}

// Messages published while the network between the client and the server
// is down, and while the client comes back (a publisher keeps publishing
// through the cut, the reconnect and the switch from history to live),
// all reach the client: every one exactly once and in order, with
// positions that only grow, and the resubscribe says recovered.
func TestJSClientGetsEveryMessageExactlyOnceAcrossANetworkDrop(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, historyConfig(1000))
			proxy, c := startJSClientThroughProxy(t, rt, srv.addr)
			connectAndSubscribe(t, c)

			var got []int
			var last *jsPosition
			var subscribed []jsEvent
			take := func(e jsEvent) {
				switch e.Ev {
				case "message":
					n := numbered(t, c, e)
					if e.Position == nil {
						t.Fatalf("%s: message %d without a position", rt, n)
					}
					if last != nil && e.Position.Epoch == last.Epoch && e.Position.Offset <= last.Offset {
						t.Fatalf("%s: message %d at %+v after %+v: positions must grow", rt, n, *e.Position, *last)
					}
					last = e.Position
					got = append(got, n)
				case "subscribed":
					subscribed = append(subscribed, e)
				}
			}
			publish := func(n int) error {
				b, _ := json.Marshal(map[string]int{"n": n})
				if status, body := httpPost(srv.addr, "/publish/news", b); status != 200 {
					return fmt.Errorf("publish %d: %d %s", n, status, body)
				}
				return nil
			}
			for n := 1; n <= 10; n++ {
				if err := publish(n); err != nil {
					t.Fatal(err)
				}
			}
			for len(got) < 10 {
				take(c.next())
			}

			// The publisher goes on until told to stop: through the cut, the
			// reconnect, the replay and the switch to live delivery. It
			// waits at 500 (half the history) for the resubscribe, so that a
			// slow reconnect does not outrun the history.
			halfway := make(chan struct{})
			resubscribed := make(chan struct{})
			stop := make(chan struct{})
			var stopOnce sync.Once
			stopPublisher := func() { stopOnce.Do(func() { close(stop) }) }
			defer stopPublisher() // also when the test fails early
			published := make(chan int, 1)
			failed := make(chan error, 1)
			go func() {
				for n := 11; ; n++ {
					if err := publish(n); err != nil {
						failed <- err
						return
					}
					switch n {
					case 100:
						close(halfway)
					case 500:
						select {
						case <-resubscribed:
						case <-stop:
						}
					}
					select {
					case <-stop:
						published <- n
						return
					default:
					}
				}
			}()
			proxy.Cut()
			select {
			case <-halfway:
			case err := <-failed:
				t.Fatal(err)
			}
			proxy.Restore()
			for len(subscribed) == 0 {
				take(c.next())
			}
			close(resubscribed)
			// 50 messages after the resubscribe: the publisher ran across the
			// switch from history to live.
			for mark := len(got); len(got) < mark+50; {
				take(c.next())
			}
			stopPublisher()
			var total int
			select {
			case total = <-published:
			case err := <-failed:
				t.Fatal(err)
			}
			for got[len(got)-1] < total {
				take(c.next())
			}
			for i, n := range got {
				if n != i+1 {
					t.Fatalf("%s: messages arrived as %v, want 1..%d once each, in order", rt, got, total)
				}
			}
			t.Logf("%s: %d messages; %d replayed at the resubscribe", rt, total, subscribed[0].Replayed)
			for _, s := range subscribed {
				if !s.Resubscribed || !s.Recovering || !s.Recovered {
					t.Fatalf("%s: resubscribe %s, want recovered", rt, s)
				}
			}
		})
	})
}

// When more messages were published during the outage than the topic's
// history keeps, the resubscribe says recovered: false with reason
// "expired", replays nothing (never part of the gap), and the client
// continues from the topic's current position.
func TestJSClientIsToldWhenHistoryNoLongerHoldsWhatItMissed(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, historyConfig(5))
			proxy, c := startJSClientThroughProxy(t, rt, srv.addr)
			connectAndSubscribe(t, c)
			publishHTTP(t, srv.addr, "news", map[string]int{"n": 1})
			if e, _ := c.until("message"); numbered(t, c, e) != 1 {
				t.Fatalf("first message: %s", e)
			}
			proxy.Cut()
			c.expect("disconnected")
			for n := 2; n <= 20; n++ {
				publishHTTP(t, srv.addr, "news", map[string]int{"n": n})
			}
			proxy.Restore()
			s, _ := c.until("subscribed")
			if !s.Resubscribed || !s.Recovering || s.Recovered || s.Reason != "expired" {
				t.Fatalf("resubscribe: %s, want recovered false, reason expired", s)
			}
			publishHTTP(t, srv.addr, "news", map[string]int{"n": 21})
			e := c.expect("message")
			if n := numbered(t, c, e); n != 21 {
				t.Fatalf("after the resubscribe: message %d, want 21 (nothing of the gap)", n)
			}
			if e.Position == nil || s.Position == nil || e.Position.Epoch != s.Position.Epoch || e.Position.Offset <= s.Position.Offset {
				t.Fatalf("message 21 at %v after a resubscribe at %v: want a later position of the same epoch", e.Position, s.Position)
			}
		})
	})
}

// When the server itself goes away (shutdown: 1001) and another comes
// back in its place with a history of its own (a new epoch), the client
// reconnects and is told recovered: false, reason "epoch"; it then
// follows the new history.
func TestJSClientIsToldWhenTheServerCameBackWithAnotherHistory(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			first := startRallyServe(t, mode, historyConfig(100))
			proxy, c := startJSClientThroughProxy(t, rt, first.addr)
			sub := connectAndSubscribe(t, c)
			publishHTTP(t, first.addr, "news", map[string]int{"n": 1})
			if e, _ := c.until("message"); numbered(t, c, e) != 1 {
				t.Fatalf("first message: %s", e)
			}
			first.stop()
			if e := c.expect("disconnected"); e.Code != 1001 || !e.Reconnect {
				t.Fatalf("server shutdown: %s, want 1001 and a reconnect", e)
			}
			second := startRallyServe(t, mode, historyConfig(100))
			proxy.Retarget(second.addr)
			s, _ := c.until("subscribed")
			if !s.Resubscribed || !s.Recovering || s.Recovered || s.Reason != "epoch" {
				t.Fatalf("resubscribe to the new server: %s, want recovered false, reason epoch", s)
			}
			if s.Position == nil || s.Position.Epoch == sub.Position.Epoch {
				t.Fatalf("resubscribe at %v, want the new server's epoch (the old one was %q)", s.Position, sub.Position.Epoch)
			}
			publishHTTP(t, second.addr, "news", map[string]int{"n": 2})
			e := c.expect("message")
			if numbered(t, c, e) != 2 || e.Position == nil || e.Position.Epoch != s.Position.Epoch {
				t.Fatalf("message on the new server: %s", e)
			}
		})
	})
}

// Two nodes share their history through NATS JetStream. The client's node
// dies (shutdown: 1001); messages are published on the other node while
// the client has none; the proxy then leads the client to the other node:
// the resubscribe recovers every missed message, exactly once and in
// order, and live ones follow.
func TestJSClientRecoversOnAnotherNodeAfterItsServerDies(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			// Each runtime has a NATS of its own: the runtimes run at once,
			// and a node joining a stream others publish on is not what this
			// test is about.
			nats, err := natsbroker.StartEmbedded("127.0.0.1:0", nil, "", natsbroker.WithJetStream(t.TempDir(), ""))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nats.Shutdown)
			node := func(name string) *rallyServe {
				cfg := historyConfig(1000)
				cfg.Node = name
				cfg.NATS = server.NATSConfig{URL: nats.ClientURL(), ClusterSecret: "interop-cluster-secret-0123456789"}
				return startRallyServe(t, mode, cfg)
			}
			topic := "nodes." + rt
			a, b := node("a"), node("b")
			proxy, c := startJSClientThroughProxy(t, rt, a.addr)
			c.do("subscribe", map[string]any{"topic": topic})
			c.do("connect", nil)
			if s, _ := c.until("subscribed"); s.Position == nil {
				t.Fatalf("subscribe: %s, want a position", s)
			}
			next := func() int {
				t.Helper()
				e, _ := c.until("message")
				if e.Position == nil {
					t.Fatalf("message without a position: %s", e)
				}
				return numbered(t, c, e)
			}
			for n := 1; n <= 10; n++ {
				publishHTTP(t, a.addr, topic, map[string]int{"n": n})
			}
			for n := 1; n <= 10; n++ {
				if got := next(); got != n {
					t.Fatalf("live: message %d, want %d", got, n)
				}
			}
			a.stop()
			if e := c.expect("disconnected"); e.Code != 1001 {
				t.Fatalf("node a shut down: %s, want 1001", e)
			}
			for n := 11; n <= 60; n++ {
				publishHTTP(t, b.addr, topic, map[string]int{"n": n})
			}
			proxy.Retarget(b.addr)
			s, _ := c.until("subscribed")
			if !s.Resubscribed || !s.Recovered || s.Replayed != 50 {
				t.Fatalf("resubscribe on node b: %s, want recovered with 50 replayed", s)
			}
			publishHTTP(t, b.addr, topic, map[string]int{"n": 61})
			for n := 11; n <= 61; n++ {
				if got := next(); got != n {
					t.Fatalf("after the move to node b: message %d, want %d", got, n)
				}
			}
		})
	})
}

// On a presence topic the client learns its own member id when it
// subscribes, sees others join and leave as presence events, and
// presence() answers who is there.
func TestJSClientSeesWhoIsSubscribed(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			cfg := serverConfig()
			cfg.Presence = server.PresenceConfig{Topics: []string{"room.*"}}
			srv := startRallyServe(t, mode, cfg)
			base := "http://" + srv.addr
			a := startJSClient(t, rt, base, base+"/ws", fastBackoff)
			a.do("subscribe", map[string]any{"topic": "room.1"})
			a.do("connect", nil)
			sa, _ := a.until("subscribed")
			b := startJSClient(t, "node-ws", base, base+"/ws", fastBackoff)
			b.do("subscribe", map[string]any{"topic": "room.1"})
			b.do("connect", nil)
			sb, _ := b.until("subscribed")
			if sa.Client == "" || sb.Client == "" || sa.Client == sb.Client {
				t.Fatalf("member ids %q and %q, want two", sa.Client, sb.Client)
			}
			if e, _ := a.until("presence"); e.Type != "join" || e.Topic != "room.1" || e.Client != sb.Client {
				t.Fatalf("presence event %s, want b's join", e)
			}
			a.do("presence", map[string]any{"ref": 1, "topic": "room.1"})
			e, _ := a.until("presence-answer")
			var answer struct {
				Count   int
				Members []struct{ Client, User string }
			}
			if err := json.Unmarshal(e.Answer, &answer); err != nil || answer.Count != 2 || len(answer.Members) != 2 {
				t.Fatalf("presence answer %s, want the two members", e.Answer)
			}
			b.do("close", nil)
			if e, _ := a.until("presence"); e.Type != "leave" || e.Client != sb.Client {
				t.Fatalf("presence event %s, want b's leave", e)
			}
			a.do("presence", map[string]any{"ref": 2, "topic": "room.2"})
			if e, _ := a.until("presence-answer"); !strings.Contains(string(e.Answer), `"count":0`) {
				t.Fatalf("presence of an empty room: %s, want count 0", e)
			}
			a.do("presence", map[string]any{"ref": 3, "topic": "plain"})
			if e, _ := a.until("presence-answer"); e.ErrCode != "no_presence" {
				t.Fatalf("presence of a topic without presence: %s, want a no_presence rejection", e)
			}
		})
	})
}

// A position saved from one client (as a page would keep it across a
// reload) and given to subscribe's since by a new one recovers what was
// published in between.
func TestJSClientResumesFromASavedPosition(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, historyConfig(100))
			base := "http://" + srv.addr
			first := startJSClient(t, rt, base, base+"/ws", fastBackoff)
			connectAndSubscribe(t, first)
			publishHTTP(t, srv.addr, "news", map[string]int{"n": 1})
			e, _ := first.until("message")
			if numbered(t, first, e) != 1 || e.Position == nil {
				t.Fatalf("first client: %s", e)
			}
			first.do("close", nil)
			first.expect("disconnected")
			for n := 2; n <= 4; n++ {
				publishHTTP(t, srv.addr, "news", map[string]int{"n": n})
			}
			second := startJSClient(t, rt, base, base+"/ws", fastBackoff)
			second.do("subscribe", map[string]any{"topic": "news", "since": e.Position})
			second.do("connect", nil)
			s, _ := second.until("subscribed")
			if !s.Recovering || !s.Recovered || s.Resubscribed || s.Replayed != 3 {
				t.Fatalf("subscribe with since: %s, want recovered with 3 replayed", s)
			}
			for n := 2; n <= 4; n++ {
				if e := second.expect("message"); numbered(t, second, e) != n {
					t.Fatalf("replay: %s, want message %d", e, n)
				}
			}
		})
	})
}

// A recovery of 10,000 missed messages (published by 8 backends at once
// during the outage) reaches the client whole: every one once, in
// position order. The log line says how long the client took from the
// reconnect to the last one (Node, npm ws; a figure, not a check).
func TestJSClientRecoversTenThousandMissedMessages(t *testing.T) {
	const total = 10000
	inModes(t, func(t *testing.T, mode serverMode) {
		cfg := historyConfig(total)
		cfg.History.RecoveryLimit = total
		srv := startRallyServe(t, mode, cfg)
		proxy, c := startJSClientThroughProxy(t, "node-ws", srv.addr)
		connectAndSubscribe(t, c)
		proxy.Cut()
		c.expect("disconnected")
		var wg sync.WaitGroup
		failed := make(chan string, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := w + 1; n <= total; n += 8 {
					b, _ := json.Marshal(map[string]int{"n": n})
					if status, body := httpPost(srv.addr, "/publish/news", b); status != 200 {
						failed <- body
						return
					}
				}
			}()
		}
		wg.Wait()
		close(failed)
		for body := range failed {
			t.Fatalf("publish: %s", body)
		}
		proxy.Restore()
		c.until("connected")
		start := time.Now()
		s, _ := c.until("subscribed")
		if !s.Recovered || s.Replayed != total {
			t.Fatalf("resubscribe: %s, want recovered with %d replayed", s, total)
		}
		seen := make([]bool, total+1)
		var last uint64
		for got := 0; got < total; {
			e := c.expect("message")
			n := numbered(t, c, e)
			if seen[n] || e.Position.Offset <= last {
				t.Fatalf("message %d at %+v after offset %d: a duplicate or out of order", n, *e.Position, last)
			}
			seen[n], last = true, e.Position.Offset
			got++
		}
		t.Logf("node-ws: %d recovered messages delivered %v after the reconnect", total, time.Since(start))
	})
}

// A client that cannot keep up on a history topic (the proxy holds the
// server's bytes, so the server's buffer for it overflows, and then the
// deliveries waiting for it pass half the history) is closed with 4010
// "insufficient state" after what was queued; it reconnects and recovers
// the rest: every message once, in order.
func TestJSClientRecoversAfterTheServerFoundItTooSlow(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		for _, rt := range []string{"node-ws", "chromium"} { // megabytes per run: the two most different runtimes
			t.Run(rt, func(t *testing.T) {
				const bufferLimit, sendBuffer = 64 << 10, 64 << 10
				// Four times what the way to the client can hold while
				// stalled: the server's socket buffer (SubscriberSendBuffer,
				// which the kernel doubles), the proxy's, and the server's
				// buffer limit. The padding is random base64, which
				// permessage-deflate shrinks by a quarter at most. The
				// history keeps them all, and a subscriber may lag by half
				// of it: past what the way holds and half the messages, it
				// is closed with 4010, and recovers.
				const size = 16 << 10
				total := 4 * (2*sendBuffer + 2*proxyReadBuffer + 32<<10 + bufferLimit) / (size * 3 / 4)
				cfg := historyConfig(total)
				cfg.BufferLimit = bufferLimit
				cfg.SubscriberSendBuffer = sendBuffer // the default, named: the sizing counts on it
				cfg.ShutdownTimeout = 30 * time.Second
				srv := startRallyServe(t, mode, cfg)
				proxy, c := startJSClientThroughProxy(t, rt, srv.addr)
				connectAndSubscribe(t, c)
				proxy.Stall()
				raw := make([]byte, size*3/4)
				for n := 1; n <= total; n++ {
					rand.Read(raw)
					publishHTTP(t, srv.addr, "news", map[string]any{"n": n, "pad": base64.StdEncoding.EncodeToString(raw)})
				}
				proxy.Resume()
				got, closedWith4010, recovered := 0, false, false
				for got < total {
					e := c.next()
					switch e.Ev {
					case "message":
						if n := numbered(t, c, e); n != got+1 {
							t.Fatalf("message %d after %d: want each once, in order", n, got)
						}
						got++
					case "disconnected":
						if e.Code != 4010 || e.Reason != "insufficient state" {
							t.Fatalf("disconnected %s, want 4010 insufficient state", e)
						}
						closedWith4010 = true
					case "subscribed":
						recovered = e.Recovered
						if !recovered {
							t.Fatalf("resubscribe %s, want recovered", e)
						}
					}
				}
				if !closedWith4010 || !recovered {
					t.Fatalf("%d messages without a 4010 close and a recovery", total)
				}
				t.Logf("%s: %d messages of 16 KiB, closed with 4010 and recovered", rt, total)
			})
		}
	})
}
