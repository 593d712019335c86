package server

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// awaitMetric polls series on base until it reaches want.
func awaitMetric(t *testing.T, base, series string, want float64) {
	t.Helper()
	pollUntil(t, func() (bool, string) {
		got := metric(t, base, series)
		return got == want, fmt.Sprintf("%s = %v, want %v", series, got, want)
	})
}

// subscribedOnBoth subscribes a client of b to topic and waits until a
// publish on a reaches it.
func subscribedOnBoth(t *testing.T, a, b *testServer, topic string) (pub, sub *client) {
	t.Helper()
	sub = dial(t, b.ws+"/ws", nil)
	sub.send(`{"type":"subscribe","topic":"` + topic + `","id":1}`)
	sub.expect(`{"type":"ack","id":1}`)
	pub = dial(t, a.ws+"/ws", nil)
	awaitRoute(t, pub, sub, topic)
	return pub, sub
}

func TestAMessageInjectedStraightIntoNATSIsDroppedAndCountedNotDelivered(t *testing.T) {
	a, b := twoNodes(t)
	pub, sub := subscribedOnBoth(t, a, b, "t")

	// What a client of NATS without the cluster secret can send: a
	// header as a node writes it, then a frame of its own making.
	nc, err := nats.Connect(a.embeddedNATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg := []byte{1, 1, 1, 'x'}
	msg = binary.BigEndian.AppendUint32(msg, 7)
	msg = binary.BigEndian.AppendUint64(msg, 1)
	msg = append(msg, `{"type":"error","code":"forged"}`...)
	if err := nc.Publish("rally.t"+base64.RawURLEncoding.EncodeToString([]byte("t")), msg); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	awaitMetric(t, b.http, `rally_nats_drops_total{reason="forged"}`, 1)

	pub.send(`{"type":"publish","topic":"t","data":"after"}`)
	sub.expect(`{"type":"message","topic":"t","data":"after"}`)
}

func TestASignedDeliveryFromAnotherNodeReachesClientsOnlyAsAMessageFrame(t *testing.T) {
	a, b := twoNodes(t)
	pub, sub := subscribedOnBoth(t, a, b, "t")

	// A node that has the secret but publishes something other than a
	// message frame: not delivered as it is.
	nb, err := natsbroker.New(a.embeddedNATS.ClientURL(), natsbroker.WithClusterSecret([]byte(testClusterSecret)))
	if err != nil {
		t.Fatal(err)
	}
	other, err := pubsub.NewHub(&pubsub.Options{Broker: nb, Node: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, p := range []string{
		`{"type":"error","code":"forged"}`,
		`{"type":"message","topic":"t","data":1,"type":"error"}`,
		`{"type":"message","topic":"u","data":1}`,
	} {
		if _, err := other.Publish("t", rally.Text, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Publish("t", rally.Text, []byte(`{"type":"message","topic":"t","data":{"from":"other"}}`)); err != nil {
		t.Fatal(err)
	}
	sub.expect(`{"type":"message","topic":"t","data":{"from":"other"}}`)
	awaitMetric(t, b.http, `rally_nats_drops_total{reason="not_message"}`, 3)
	if n := metric(t, b.http, `rally_nats_drops_total{reason="forged"}`); n != 0 {
		t.Errorf("forged = %v, want 0: the node signed its messages", n)
	}
	pub.send(`{"type":"publish","topic":"t","data":"after"}`)
	sub.expect(`{"type":"message","topic":"t","data":"after"}`)
}

func TestAPublishWhileNATSIsDownIsCountedAsADropNotAsSent(t *testing.T) {
	e, err := natsbroker.StartEmbedded("127.0.0.1:0", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	a := serve(t, Config{Node: "a", NATS: NATSConfig{URL: e.ClientURL()}})
	awaitMetric(t, a.http, `rally_nats_connected`, 1)
	e.Shutdown()
	awaitMetric(t, a.http, `rally_nats_connected`, 0)
	out := metric(t, a.http, `rally_nats_messages_total{direction="out"}`)

	for range 3 {
		code, body := post(t, a.http+"/publish/t", "text/plain", "", []byte("while down"))
		if code != 502 || !strings.Contains(body, "delivered on this node only") {
			t.Fatalf("publish while NATS is down: %d %s, want 502 delivered on this node only", code, body)
		}
	}
	if got := metric(t, a.http, `rally_nats_messages_total{direction="out"}`); got != out {
		t.Errorf("messages out rose from %v to %v while NATS was down", out, got)
	}
	if got := metric(t, a.http, `rally_nats_drops_total{reason="publish_failed"}`); got != 3 {
		t.Errorf("publish_failed drops = %v, want 3", got)
	}
}

func TestNATSWithoutAClusterSecretOrBeyondLoopbackWithoutAuthRefusesToStart(t *testing.T) {
	for name, tc := range map[string]struct {
		n    NATSConfig
		want string
	}{
		"no secret":              {NATSConfig{Embedded: "127.0.0.1:0"}, "--cluster-secret"},
		"short secret":           {NATSConfig{Embedded: "127.0.0.1:0", ClusterSecret: "short"}, "at least 16"},
		"embedded on every host": {NATSConfig{Embedded: "0.0.0.0:0", ClusterSecret: testClusterSecret}, "--nats-token"},
		"embedded with no host":  {NATSConfig{Embedded: ":0", ClusterSecret: testClusterSecret}, "beyond loopback"},
		"cluster on every host": {NATSConfig{Embedded: "127.0.0.1:0", Cluster: "0.0.0.0:0", Token: "tok",
			ClusterSecret: testClusterSecret}, "--nats-cluster-user"},
	} {
		_, err := New(Config{NATS: tc.n})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error that says %s", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), testClusterSecret) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

func TestAHistoryRecordWrittenStraightIntoJetStreamIsDroppedAndCountedNotDelivered(t *testing.T) {
	cfg := historyConfig()
	cfg.NATS = NATSConfig{Embedded: "127.0.0.1:0"}
	cfg.History.StoreDir = t.TempDir()
	s := serve(t, cfg)
	sub := dial(t, s.ws+"/ws", nil)
	sub.subscribeAt("h.x", nil)
	pub := dial(t, s.ws+"/ws", nil)
	pub.send(`{"type":"publish","topic":"h.x","data":1}`)
	one, _ := sub.message("h.x")

	// What a client of NATS without the cluster secret can write: a
	// record naming the topic's last one as its predecessor, as a node
	// writes it, but not signed.
	nc, err := nats.Connect(s.embeddedNATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forged := &nats.Msg{
		Subject: "rally.h.t" + base64.RawURLEncoding.EncodeToString([]byte("h.x")),
		Data:    []byte(`666`),
		Header:  nats.Header{"Rally-Prev": {fmt.Sprint(one.offset)}},
	}
	if _, err := nc.RequestMsg(forged, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	awaitMetric(t, s.http, `rally_nats_drops_total{reason="forged"}`, 1)

	// The next genuine record reaches the subscriber as following the
	// first (not as a gap: no 4010), and a recovery from the first
	// replays it alone.
	pub.send(`{"type":"publish","topic":"h.x","data":2}`)
	if _, n := sub.message("h.x"); n != 2 {
		t.Fatalf("got message %d, want 2", n)
	}
	back := dial(t, s.ws+"/ws", nil)
	ack := back.subscribeAt("h.x", &one)
	if ack.Recovered == nil || !*ack.Recovered {
		t.Fatalf("recovery from %d: %+v, want recovered", one.offset, ack)
	}
	if _, n := back.message("h.x"); n != 2 {
		t.Fatalf("replayed message %d, want 2", n)
	}
}
