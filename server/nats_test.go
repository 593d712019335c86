package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
	"github.com/rallyws/rally/pubsub"
)

// twoNodes starts node A with an embedded NATS server and node B
// connected to it.
func twoNodes(t testing.TB) (a, b *testServer) {
	t.Helper()
	a = serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0"}})
	b = serve(t, Config{Node: "b", NATS: NATSConfig{URL: a.embeddedNATS.ClientURL()}})
	return a, b
}

// awaitRoute publishes probes from pub on topic until sub receives one:
// NATS orders a subscription and a publish only on one connection, so the
// first publish after sub's node subscribed may reach NATS before the
// subscription does.
func awaitRoute(t testing.TB, pub, sub *client, topic string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		pub.send(fmt.Sprintf(`{"type":"publish","topic":%q,"data":"probe"}`, topic))
		// A probe that is slow to come is retried; the wait for each
		// grows with the load, so that 100 of them are enough on a busy machine.
		ctx, cancel := context.WithTimeout(context.Background(), slowness.Scale(200*time.Millisecond))
		_, p, err := sub.c.Read(ctx)
		cancel()
		if err == nil {
			if !strings.Contains(string(p), `"probe"`) {
				t.Fatalf("waiting for a probe, got %s", p)
			}
			return
		}
		if ctx.Err() == nil {
			t.Fatalf("read: %v", err)
		}
	}
	t.Fatal("no probe crossed the nodes in 100 tries")
}

func TestPublishOnOneNodeReachesSubscribersOfBothThroughEmbeddedNATS(t *testing.T) {
	a, b := twoNodes(t)
	onA := dial(t, a.ws+"/ws", nil)
	onB := dial(t, b.ws+"/ws", nil)
	pub := dial(t, a.ws+"/ws", nil)
	for _, c := range []*client{onA, onB} {
		c.send(`{"type":"subscribe","topic":"x.y*z>","id":1}`)
		if got := c.next(); !strings.Contains(got, "invalid_topic") {
			t.Fatalf("a topic with NATS wildcards: %s, want invalid_topic", got)
		}
		c.send(`{"type":"subscribe","topic":"room.1","id":1}`)
		c.expect(`{"type":"ack","id":1}`)
	}
	awaitRoute(t, pub, onB, "room.1")
	// onA saw the probe too, exactly once, from its own node.
	onA.expect(`{"type":"message","topic":"room.1","data":"probe"}`)

	pub.send(`{"type":"publish","topic":"room.1","data":{"n":1},"id":9}`)
	pub.expect(`{"type":"ack","id":9}`)
	for _, c := range []*client{onA, onB} {
		for {
			got := c.next()
			if strings.Contains(got, "probe") {
				continue // a late probe
			}
			if !sameJSON(got, `{"type":"message","topic":"room.1","data":{"n":1}}`) {
				t.Fatalf("got %s", got)
			}
			break
		}
	}
	// And from B's publish API to A's subscriber.
	status, _ := post(t, b.http+"/publish/room.1", "application/json", "", []byte(`"from b"`))
	if status != 200 {
		t.Fatalf("publish on b: %d", status)
	}
	onA.expect(`{"type":"message","topic":"room.1","data":"from b"}`)
	onB.expect(`{"type":"message","topic":"room.1","data":"from b"}`)

	if got := metric(t, b.http, `rally_nats_connected`); got != 1 {
		t.Errorf("rally_nats_connected on b = %v, want 1", got)
	}
	if got := metric(t, a.http, `rally_nats_messages_total{direction="out"}`); got < 2 {
		t.Errorf("rally_nats_messages_total{direction=\"out\"} on a = %v, want at least 2", got)
	}
}

func TestThreeNodesOnTwoRoutedEmbeddedNATSServersShareATopic(t *testing.T) {
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0", Cluster: "127.0.0.1:0"}})
	b := serve(t, Config{Node: "b", NATS: NATSConfig{Embedded: "127.0.0.1:0", Cluster: "127.0.0.1:0",
		Routes: []string{a.embeddedNATS.ClusterURL()}}})
	c := serve(t, Config{Node: "c", NATS: NATSConfig{URL: b.embeddedNATS.ClientURL()}})
	subs := map[string]*client{}
	for name, n := range map[string]*testServer{"a": a, "b": b, "c": c} {
		s := dial(t, n.ws+"/ws", nil)
		s.send(`{"type":"subscribe","topic":"all","id":1}`)
		s.expect(`{"type":"ack","id":1}`)
		subs[name] = s
	}
	pub := dial(t, a.ws+"/ws", nil)
	awaitRoute(t, pub, subs["c"], "all") // a's NATS to b's, then to c
	awaitRoute(t, pub, subs["b"], "all")
	pub.send(`{"type":"publish","topic":"all","data":"to everyone","id":2}`)
	pub.expect(`{"type":"ack","id":2}`)
	for name, s := range subs {
		for {
			got := s.next()
			if strings.Contains(got, "probe") {
				continue
			}
			if !sameJSON(got, `{"type":"message","topic":"all","data":"to everyone"}`) {
				t.Fatalf("node %s's subscriber got %s", name, got)
			}
			break
		}
	}
}

func TestNATSRoutesNeedAnEmbeddedServer(t *testing.T) {
	if _, err := New(Config{NATS: NATSConfig{Routes: []string{"nats://127.0.0.1:1"}}}); err == nil {
		t.Fatal("routes without --embedded-nats were accepted")
	}
	if _, err := New(Config{NATS: NATSConfig{URL: "nats://127.0.0.1:1", Cluster: "127.0.0.1:0"}}); err == nil || !strings.Contains(err.Error(), "--embedded-nats") {
		t.Fatalf("a cluster address with --nats but without --embedded-nats: %v, want a refusal naming --embedded-nats", err)
	}
}

// BenchmarkCrossNodeDelivery measures messages per second from a
// publisher on node A to a subscriber on node B through an embedded NATS
// server: each op is one 64-byte publish; the subscriber counts what
// arrives.
func BenchmarkCrossNodeDelivery(bm *testing.B) {
	a, b := twoNodes(bm)
	pub := dial(bm, a.ws+"/ws", nil)
	sub := dial(bm, b.ws+"/ws", nil)
	sub.send(`{"type":"subscribe","topic":"bench","id":1}`)
	sub.expect(`{"type":"ack","id":1}`)
	awaitRoute(bm, pub, sub, "bench")
	payload := `{"type":"publish","topic":"bench","data":"` + strings.Repeat("x", 64) + `"}`
	done := make(chan int)
	go func() {
		n := 0
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, p, err := sub.c.Read(ctx)
			cancel()
			if err != nil {
				done <- n
				return
			}
			if strings.Contains(string(p), `"end"`) {
				done <- n
				return
			}
			n++
		}
	}()
	bm.ResetTimer()
	for i := 0; i < bm.N; i++ {
		pub.send(payload)
	}
	pub.send(`{"type":"publish","topic":"bench","data":"end"}`)
	n := <-done
	bm.StopTimer()
	bm.ReportMetric(float64(n)/bm.Elapsed().Seconds(), "delivered/s")
	bm.ReportMetric(float64(bm.N-n), "lost")
}

func TestMessageTooLargeForOtherNodesIsRefusedWithAClearError(t *testing.T) {
	bus := &pubsub.Bus{MaxPayload: 100}
	a := serve(t, Config{Node: "a", Broker: bus.Broker()})
	b := serve(t, Config{Node: "b", Broker: bus.Broker()})
	local := dial(t, a.ws+"/ws", nil)
	remote := dial(t, b.ws+"/ws", nil)
	for _, c := range []*client{local, remote} {
		c.send(`{"type":"subscribe","topic":"t","id":1}`)
		c.expect(`{"type":"ack","id":1}`)
	}
	pub := dial(t, a.ws+"/ws", nil)
	big := strings.Repeat("x", 200)
	pub.send(`{"type":"publish","topic":"t","data":"` + big + `","id":2}`)
	if got := pub.next(); !strings.Contains(got, `"code":"too_large"`) || !strings.Contains(got, `"id":2`) {
		t.Fatalf("answer %s, want a too_large error", got)
	}
	local.expect(`{"type":"message","topic":"t","data":"` + big + `"}`)

	status, ans := post(t, a.http+"/publish/t", "text/plain", "", []byte(big))
	if status != 413 || !strings.Contains(ans, `"code":"too_large"`) || !strings.Contains(ans, `"received":1`) {
		t.Fatalf("HTTP publish answered %d %s, want 413 too_large with received 1", status, ans)
	}
	local.expect(`{"type":"message","topic":"t","data":"` + big + `"}`)

	// A small one crosses; the remote subscriber's first message is it.
	pub.send(`{"type":"publish","topic":"t","data":"small","id":3}`)
	pub.expect(`{"type":"ack","id":3}`)
	remote.expect(`{"type":"message","topic":"t","data":"small"}`)
	if got := metric(t, a.http, `rally_drops_total{reason="broker"}`); got != 2 {
		t.Errorf("rally_drops_total{reason=\"broker\"} = %v, want 2", got)
	}
}

// A subscriber on node A that has its ack gets what node B publishes
// right after, every time: the ack waits until NATS knows of A's new
// subscription.
func TestAPublishOnAnotherNodeRightAfterTheSubscribeAckArrives(t *testing.T) {
	a, b := twoNodes(t)
	sub := dial(t, a.ws+"/ws", nil)
	for i := range 200 {
		topic := fmt.Sprintf("race.%d", i)
		sub.send(fmt.Sprintf(`{"type":"subscribe","topic":%q,"id":%d}`, topic, i))
		sub.expect(fmt.Sprintf(`{"type":"ack","id":%d}`, i))
		if status, body := post(t, b.http+"/publish/"+topic, "application/json", "", []byte(`"from b"`)); status != 200 {
			t.Fatalf("publish on b: %d %s", status, body)
		}
		sub.expect(fmt.Sprintf(`{"type":"message","topic":%q,"data":"from b"}`, topic))
		sub.send(fmt.Sprintf(`{"type":"unsubscribe","topic":%q,"id":"u%d"}`, topic, i))
		sub.expect(fmt.Sprintf(`{"type":"ack","id":"u%d"}`, i))
	}
}
