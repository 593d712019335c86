package natsbroker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// readN reads n messages from cl and checks they are prefix0 .. prefix(n-1).
func readN(t *testing.T, cl *client, who, prefix string, n int) {
	t.Helper()
	for i := range n {
		if got, want := cl.read(), prefix+strconv.Itoa(i); got != want {
			t.Fatalf("%s read %q, want %q", who, got, want)
		}
	}
}

// checkExactlyOnce has publisher (on its node) publish n messages on
// topic, then "end", and checks that every subscriber reads each message
// once, in order, and then "end": nothing twice, nothing else.
func checkExactlyOnce(t *testing.T, publisher *client, topic string, n int, subscribers map[string]*client) {
	t.Helper()
	for i := range n {
		publisher.send(fmt.Sprintf("pub %s m%d", topic, i))
	}
	publisher.send("pub " + topic + " end")
	for who, cl := range subscribers {
		readN(t, cl, who, "m", n)
		if got := cl.read(); got != "end" {
			t.Fatalf("%s read %q after the %d messages, want end", who, got, n)
		}
	}
}

func TestPublishOnOneNodeReachesSubscribersOnTwoNodesExactlyOnce(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a := newNode(t, "a", e.ClientURL())
	b := newNode(t, "b", e.ClientURL())
	subA, subB := dial(t, a), dial(t, b)
	subA.subscribe("room.1")
	subB.subscribe("room.1")
	eventually(t, "the server knows both nodes' interest", func() bool { return interest(e, "room.1") == 2 })

	checkExactlyOnce(t, dial(t, a), "room.1", 100, map[string]*client{"a's subscriber": subA, "b's subscriber": subB})
	if s := a.broker.Stats(); s.Published != 101 || s.Received != 0 {
		t.Errorf("a's stats: %+v, want 101 published and nothing received (its own messages stay home)", s)
	}
	if s := b.broker.Stats(); s.Received != 101 || s.Lost != 0 {
		t.Errorf("b's stats: %+v, want 101 received, none lost", s)
	}
}

func TestThreeNodesOnAClusterOfThreeServersDeliverEachPublishOnceEverywhere(t *testing.T) {
	seed := startEmbedded(t, "127.0.0.1:0", nil, "127.0.0.1:0")
	s2 := startEmbedded(t, "127.0.0.1:0", []string{seed.ClusterURL()}, "127.0.0.1:0")
	s3 := startEmbedded(t, "127.0.0.1:0", []string{strings.TrimPrefix(seed.ClusterURL(), "nats://")}, "127.0.0.1:0")
	servers := []*Embedded{seed, s2, s3}
	eventually(t, "the three servers are routed to each other", func() bool {
		for _, s := range servers {
			if s.srv.NumRoutes() < 2 {
				return false
			}
		}
		return true
	})
	nodes := []*node{newNode(t, "n1", seed.ClientURL()), newNode(t, "n2", s2.ClientURL()), newNode(t, "n3", s3.ClientURL())}
	subs := map[string]*client{}
	for _, n := range nodes {
		for j := range 2 {
			cl := dial(t, n)
			cl.subscribe("news")
			subs[fmt.Sprintf("subscriber %d of %s", j, n.name)] = cl
		}
	}
	// Each server knows its own node's subscription and one per route.
	eventually(t, "every server knows every node's interest", func() bool {
		for _, s := range servers {
			if interest(s, "news") != 3 {
				return false
			}
		}
		return true
	})
	checkExactlyOnce(t, dial(t, nodes[1]), "news", 50, subs)
	checkExactlyOnce(t, dial(t, nodes[2]), "news", 50, subs)
}

func TestBrokerSubscribesOnNATSOnlyToTopicsWithLocalSubscribers(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a := newNode(t, "a", e.ClientURL())
	if n := interest(e, "quiet"); n != 0 {
		t.Fatalf("interest in a topic nobody subscribes to: %d", n)
	}
	cl := dial(t, a)
	cl.subscribe("loud")
	if err := a.broker.nc.FlushTimeout(testTimeout); err != nil { // the server has read the SUB
		t.Fatal(err)
	}
	if n, q := interest(e, "loud"), interest(e, "quiet"); n != 1 || q != 0 {
		t.Fatalf("server interest: loud %d, quiet %d; want 1 and 0", n, q)
	}
	if s := a.broker.Stats(); s.Topics != 1 {
		t.Fatalf("Stats().Topics = %d, want 1", s.Topics)
	}
	cl.c.Close(rally.CloseNormal, "")
	eventually(t, "the node drops its interest when its last subscriber leaves", func() bool { return interest(e, "loud") == 0 })
	if s := a.broker.Stats(); s.Topics != 0 {
		t.Fatalf("Stats().Topics = %d, want 0", s.Topics)
	}
}

func TestBrokerNeverHandsItsOwnMessagesBackToItsReceiver(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a, b := twoBrokers(t, e.ClientURL())
	ra, rb := newRecorder(), newRecorder()
	if err := a.Attach("a", ra); err != nil {
		t.Fatal(err)
	}
	if err := b.Attach("b", rb); err != nil {
		t.Fatal(err)
	}
	for _, br := range []*Broker{a, b} {
		if err := br.Interest("t", true); err != nil {
			t.Fatal(err)
		}
		br.nc.FlushTimeout(testTimeout)
	}
	if err := a.Publish(pubsub.Message{Topic: "t", Type: rally.Binary, Payload: []byte{0, 1}, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	// An echo would reach a before the answer to this ping, and so
	// before b's message below, on the same subscription.
	if err := a.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	if m := rb.next(t); m.Node != "a" || m.Topic != "t" || m.Type != rally.Binary || string(m.Payload) != "\x00\x01" {
		t.Fatalf("b got %+v", m)
	}
	if err := b.Publish(pubsub.Message{Topic: "t", Type: rally.Text, Payload: []byte("from b"), Node: "b"}); err != nil {
		t.Fatal(err)
	}
	if m := ra.next(t); m.Node != "b" || string(m.Payload) != "from b" || m.Type != rally.Text {
		t.Fatalf("a's first delivery is %+v, want b's message (a's own must not come back)", m)
	}
}

func TestPublishLargerThanMaxPayloadIsRefusedWithErrTooLarge(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a := newNode(t, "a", e.ClientURL())
	b := newNode(t, "b", e.ClientURL())
	local, remote := dial(t, a), dial(t, b)
	local.subscribe("big")
	remote.subscribe("big")
	eventually(t, "the server knows both nodes' interest", func() bool { return interest(e, "big") == 2 })

	max := int(a.broker.nc.MaxPayload())
	fits := strings.Repeat("f", max-headerLen(len("a")))
	if _, err := a.hub.Publish("big", rally.Text, []byte(fits)); err != nil {
		t.Fatalf("a message that fits max_payload with its header: %v", err)
	}
	tooBig := fits + "x"
	_, err := a.hub.Publish("big", rally.Text, []byte(tooBig))
	if !errors.Is(err, pubsub.ErrTooLarge) {
		t.Fatalf("publish of one byte over max_payload: %v, want an error wrapping pubsub.ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "max_payload") {
		t.Errorf("error %q does not name max_payload", err)
	}
	a.hub.Publish("big", rally.Text, []byte("small"))
	if got := local.read(); got != fits {
		t.Fatalf("local subscriber read %d bytes first, want the %d that fit", len(got), len(fits))
	}
	if got := local.read(); got != tooBig {
		t.Fatalf("local subscriber read %d bytes second, want the refused message (it stays on its node)", len(got))
	}
	if got := remote.read(); got != fits {
		t.Fatalf("remote subscriber read %d bytes first, want the %d that fit", len(got), len(fits))
	}
	if got := remote.read(); got != "small" {
		t.Fatalf("remote subscriber read %d bytes after the message that fit, want small", len(got))
	}
	if s := a.broker.Stats(); s.TooLarge != 1 || s.Published != 2 {
		t.Fatalf("stats %+v, want 1 too large and 2 published", s)
	}
}

func TestNATSRestartReportsTheGapAndDeliveriesResume(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	addr := strings.TrimPrefix(e.ClientURL(), "nats://")
	a := newNode(t, "a", e.ClientURL())
	b := newNode(t, "b", e.ClientURL(), WithReconnectWait(300*time.Millisecond))
	sub := dial(t, b)
	sub.subscribe("live")
	eventually(t, "the server knows b's interest", func() bool { return interest(e, "live") == 1 })

	for i := range 10 {
		a.hub.Publish("live", rally.Text, []byte(strconv.Itoa(i)))
	}
	for i := range 10 {
		if got := sub.read(); got != strconv.Itoa(i) {
			t.Fatalf("before the restart b's subscriber read %q, want %d", got, i)
		}
	}

	e.Shutdown()
	a.errs.waitFor(t, "lost the connection to NATS")
	b.errs.waitFor(t, "lost the connection to NATS")
	// Published while NATS is down: refused at once and counted, not
	// kept for a reconnection that may never come.
	for i := 10; i < 20; i++ {
		if _, err := a.hub.Publish("live", rally.Text, []byte(strconv.Itoa(i))); err == nil {
			t.Fatalf("publish %d during the outage: nil error, want a refusal", i)
		}
	}
	if s := a.broker.Stats(); s.PublishFailed != 10 || s.Published != 10 {
		t.Fatalf("a's stats %+v, want 10 published before the outage and 10 failed during it", s)
	}

	e2 := startEmbedded(t, addr, nil, "")
	eventually(t, "both nodes are back with b's interest", func() bool {
		return a.broker.Stats().Connected && b.broker.Stats().Connected && interest(e2, "live") == 1
	})
	for i := 20; i < 30; i++ {
		a.hub.Publish("live", rally.Text, []byte(strconv.Itoa(i)))
	}
	got := map[int]bool{}
	last := 9
	for last != 29 {
		i, err := strconv.Atoi(sub.read())
		if err != nil || i <= last {
			t.Fatalf("after the restart b's subscriber read %d (%v) after %d: out of order or twice", i, err, last)
		}
		got[i], last = true, i
	}
	for i := 20; i < 30; i++ {
		if !got[i] {
			t.Errorf("message %d, published after the reconnection, did not arrive", i)
		}
	}
	s := b.broker.Stats()
	for i := 10; i < 20; i++ {
		if got[i] {
			t.Errorf("message %d, refused during the outage, arrived", i)
		}
	}
	if s.Lost != 0 {
		t.Errorf("b counts %d lost: a refused its publishes during the outage and gave their numbers back", s.Lost)
	}
	if s.Disconnects != 1 || s.Reconnects != 1 {
		t.Errorf("b's stats %+v, want 1 disconnect and 1 reconnect", s)
	}
}

func TestNewRefusesABadPrefixAndAnUnreachableServer(t *testing.T) {
	if _, err := New("nats://127.0.0.1:1", WithSubjectPrefix("a.*")); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("New with prefix a.*: %v, want a prefix error", err)
	}
	_, err := New("nats://user:secret@127.0.0.1:1")
	if err == nil {
		t.Fatal("New to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q shows the password", err)
	}
}

func TestAttachRefusesAnEmptyOrLongNodeNameAndASecondAttach(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	b, err := New(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(pubsub.Message{Topic: "t", Type: rally.Text}); !errors.Is(err, pubsub.ErrBrokerClosed) {
		t.Fatalf("Publish before Attach: %v, want ErrBrokerClosed", err)
	}
	r := newRecorder()
	if err := b.Attach("", r); err == nil {
		t.Fatal("Attach with an empty node name succeeded")
	}
	if err := b.Attach(strings.Repeat("n", 256), r); err == nil {
		t.Fatal("Attach with a 256-byte node name succeeded")
	}
	if err := b.Attach("n", r); err != nil {
		t.Fatal(err)
	}
	if err := b.Attach("m", r); err == nil {
		t.Fatal("second Attach succeeded")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); !errors.Is(err, pubsub.ErrBrokerClosed) {
		t.Fatalf("second Close: %v, want ErrBrokerClosed", err)
	}
	if err := b.Publish(pubsub.Message{Topic: "t", Type: rally.Text}); !errors.Is(err, pubsub.ErrBrokerClosed) {
		t.Fatalf("Publish after Close: %v, want ErrBrokerClosed", err)
	}
}
