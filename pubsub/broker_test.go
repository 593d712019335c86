package pubsub_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

// spy is a Broker that records what its hub tells it and what it hands
// its hub, passing everything on to inner (if set).
type spy struct {
	inner pubsub.Broker
	err   error // returned by Publish and Interest when set

	mu        sync.Mutex
	node      string
	receiver  pubsub.Receiver
	calls     []string // "interest <topic> <bool>", "publish <topic> from <node>"
	delivered []string // "<topic>:<payload>" handed to the hub
}

func (s *spy) Attach(node string, r pubsub.Receiver) error {
	s.mu.Lock()
	s.node, s.receiver = node, r
	s.mu.Unlock()
	if s.inner == nil {
		return nil
	}
	return s.inner.Attach(node, spyReceiver{s, r})
}

func (s *spy) Publish(m pubsub.Message) error {
	s.record("publish " + m.Topic + " from " + m.Node)
	if s.err != nil {
		return s.err
	}
	if s.inner == nil {
		return nil
	}
	return s.inner.Publish(m)
}

func (s *spy) Interest(topic string, on bool) error {
	s.record("interest " + topic + " " + strconv.FormatBool(on))
	if s.err != nil {
		return s.err
	}
	if s.inner == nil {
		return nil
	}
	return s.inner.Interest(topic, on)
}

func (s *spy) Close() error {
	s.record("close")
	if s.inner == nil {
		return nil
	}
	return s.inner.Close()
}

func (s *spy) record(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

// took returns the calls recorded since the last took.
func (s *spy) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *spy) deliveries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered)
}

type spyReceiver struct {
	s *spy
	r pubsub.Receiver
}

func (sr spyReceiver) Deliver(m pubsub.Message) {
	sr.s.mu.Lock()
	sr.s.delivered = append(sr.s.delivered, m.Topic+":"+string(m.Payload))
	sr.s.mu.Unlock()
	sr.r.Deliver(m)
}

func (sr spyReceiver) Error(err error) { sr.r.Error(err) }

func TestTwoHubsOnABusDeliverEachPublishOnceToEverySubscriberOnBoth(t *testing.T) {
	var bus pubsub.Bus
	spyA, spyB := &spy{inner: bus.Broker()}, &spy{inner: bus.Broker()}
	hubA := mustHub(t, &pubsub.Options{Broker: spyA, Node: "a"})
	hubB := mustHub(t, &pubsub.Options{Broker: spyB, Node: "b"})
	chA, chB := newChat(hubA, "t"), newChat(hubB, "t")
	chA.publish, chB.publish = "t", "t"
	addrA, addrB := chA.start(t), chB.start(t)
	a0, _ := chA.join(t, addrA)
	a1, _ := chA.join(t, addrA)
	b0, _ := chB.join(t, addrB)
	b1, _ := chB.join(t, addrB)
	other := newChat(hubB, "other")
	lonely, _ := other.join(t, other.start(t)) // on hub B, subscribes to another topic only

	r, err := hubA.Publish("t", rally.Text, []byte("from A"))
	if err != nil || r.Received() != 2 {
		t.Fatalf("Publish on hub A = %+v, %v; want 2 received there", r, err)
	}
	say(t, b0, "from b0") // published on hub B by one of its subscribers
	if r := receive(t, chB.results, "the publish on hub B"); r.Received() != 1 {
		t.Fatalf("PublishFrom on hub B = %+v, want 1 received there (the sender is left out)", r)
	}
	hubA.Publish("x", rally.Text, []byte("to nobody")) // no subscriber anywhere
	hubA.Publish("other", rally.Binary, []byte("to lonely"))

	// Each message once, then the end: a local publish on each hub.
	hubA.Publish("t", rally.Text, []byte("end"))
	for i, p := range []*rawpeer.Peer{a0, a1} {
		expect(t, p, "subscriber "+strconv.Itoa(i)+" on A", "text:from A", "text:from b0", "text:end")
	}
	expect(t, b1, "subscriber 1 on B", "text:from A", "text:from b0", "text:end")
	expect(t, b0, "subscriber 0 on B (the sender)", "text:from A", "text:end")
	expect(t, lonely, "the other topic's subscriber on B", "binary:to lonely")

	// Hub B was handed only what it has subscribers for.
	if got, want := spyB.deliveries(), []string{"t:from A", "other:to lonely", "t:end"}; !slices.Equal(got, want) {
		t.Fatalf("the bus handed hub B %q, want %q", got, want)
	}
	if got, want := spyA.deliveries(), []string{"t:from b0"}; !slices.Equal(got, want) {
		t.Fatalf("the bus handed hub A %q, want %q", got, want)
	}
}

func TestHubTellsItsBrokerWhenATopicGainsItsFirstAndLosesItsLastSubscriber(t *testing.T) {
	s := &spy{}
	hub := mustHub(t, &pubsub.Options{Broker: s, Node: "n1"})
	if hub.Node() != "n1" {
		t.Fatalf("Node = %q", hub.Node())
	}
	ch := newChat(hub)
	addr := ch.start(t)
	p0, c0 := ch.join(t, addr)
	_, c1 := ch.join(t, addr)
	steps := []struct {
		do   func()
		want []string
	}{
		{func() { hub.Subscribe(c0, "t") }, []string{"interest t true"}},
		{func() { hub.Subscribe(c1, "t") }, nil},
		{func() { hub.Subscribe(c1, "t") }, nil},
		{func() { hub.Unsubscribe(c0, "t") }, nil},
		{func() { hub.Unsubscribe(c0, "t") }, nil},
		{func() { hub.Unsubscribe(c1, "t") }, []string{"interest t false"}},
		{func() { hub.Subscribe(c0, "t"); hub.Subscribe(c0, "u"); hub.Subscribe(c1, "u") }, []string{"interest t true", "interest u true"}},
		{func() { hub.Publish("t", rally.Text, []byte("x")) }, []string{"publish t from n1"}},
		{func() { hub.Publish("nobody", rally.Text, []byte("x")) }, []string{"publish nobody from n1"}},
		{func() {
			// c0 ends: t loses its last subscriber, u keeps c1.
			p0.WriteFrame(rawpeer.Close(rally.CloseNormal, ""))
			p0.ExpectClose(t, rally.CloseNormal)
			p0.ExpectEOF(t)
			p0.Close()
			receive(t, ch.closed, "Server.Close")
		}, []string{"interest t false"}},
	}
	for i, st := range steps {
		st.do()
		if got := s.took(); !slices.Equal(got, st.want) {
			t.Fatalf("step %d: the broker was told %q, want %q", i, got, st.want)
		}
	}
	hub.Close()
	if got := s.took(); !slices.Equal(got, []string{"close"}) {
		t.Fatalf("Hub.Close: the broker was told %q, want close", got)
	}
	hub.Publish("u", rally.Text, []byte("local only"))
	hub.Unsubscribe(c1, "u")
	if got := s.took(); got != nil {
		t.Fatalf("after Close the broker was told %q", got)
	}
}

func TestBrokerErrorsReachTheCallerOrOnError(t *testing.T) {
	var reported []error
	var mu sync.Mutex
	onError := func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
	broken := errors.New("broker down")
	s := &spy{err: broken}
	hub := mustHub(t, &pubsub.Options{Broker: s, OnError: onError})
	ch := newChat(hub)
	p, c := ch.join(t, ch.start(t))

	if err := hub.Subscribe(c, "t"); !errors.Is(err, broken) {
		t.Fatalf("Subscribe whose interest the broker refused = %v, want the broker's error", err)
	}
	if !hub.IsSubscribed(c, "t") {
		t.Fatal("the local subscription did not stand")
	}
	r, err := hub.Publish("t", rally.Text, []byte("local"))
	if !errors.Is(err, broken) || r.Received() != 1 {
		t.Fatalf("Publish the broker refused = %+v, %v; want 1 received here and the broker's error", r, err)
	}
	expect(t, p, "the local subscriber", "text:local")
	hub.Unsubscribe(c, "t") // losing interest fails too: no caller to return it to
	s.mu.Lock()
	s.receiver.Error(errors.New("connection to the broker lost"))
	s.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 2 || !errors.Is(reported[0], broken) || reported[1].Error() != "connection to the broker lost" {
		t.Fatalf("OnError got %v, want the failed interest change and the broker's report", reported)
	}
}

func TestBusRefusesAMessageLargerThanItCarriesWithErrTooLarge(t *testing.T) {
	bus := pubsub.Bus{MaxPayload: 8}
	hubA := mustHub(t, &pubsub.Options{Broker: bus.Broker(), Node: "a"})
	hubB := mustHub(t, &pubsub.Options{Broker: bus.Broker(), Node: "b"})
	chA, chB := newChat(hubA, "t"), newChat(hubB, "t")
	pa, _ := chA.join(t, chA.start(t))
	pb, _ := chB.join(t, chB.start(t))
	r, err := hubA.Publish("t", rally.Text, []byte("nine byte"))
	if !errors.Is(err, pubsub.ErrTooLarge) || r.Received() != 1 {
		t.Fatalf("Publish of 9 bytes over a bus of 8 = %+v, %v; want 1 received here and ErrTooLarge", r, err)
	}
	if _, err := hubA.Publish("t", rally.Text, []byte("8 bytes!")); err != nil {
		t.Fatalf("Publish of 8 bytes: %v", err)
	}
	expect(t, pa, "the subscriber on A", "text:nine byte", "text:8 bytes!")
	expect(t, pb, "the subscriber on B", "text:8 bytes!")

	if _, err := pubsub.NewHub(&pubsub.Options{Broker: bus.Broker(), Node: "a"}); err == nil {
		t.Fatal("a second node named a joined the bus")
	}
}

func TestHubIgnoresItsOwnMessagesComingBackFromTheBroker(t *testing.T) {
	s := &spy{}
	hub := mustHub(t, &pubsub.Options{Broker: s, Node: "me"})
	ch := newChat(hub, "t")
	p, _ := ch.join(t, ch.start(t))
	s.mu.Lock()
	r := s.receiver
	s.mu.Unlock()
	r.Deliver(pubsub.Message{Topic: "t", Type: rally.Text, Payload: []byte("echo of mine"), Node: "me"})
	r.Deliver(pubsub.Message{Topic: "t", Type: rally.Text, Payload: []byte("from elsewhere"), Node: "you"})
	expect(t, p, "the subscriber", "text:from elsewhere")
}

func TestSubscriptionsRacingWithConnectionsEndingLeaveNothingBehind(t *testing.T) {
	const conns, topics, rounds = 12, 5, 200
	s := &spy{}
	hub := mustHub(t, &pubsub.Options{Broker: s, Node: "n"})
	ch := newChat(hub)
	addr := ch.start(t)
	cs := make([]*rally.Conn, conns)
	for i := range cs {
		_, cs[i] = ch.join(t, addr)
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for r := range rounds {
				topic := "t" + strconv.Itoa((i+r)%topics)
				if r%3 == 2 {
					hub.Unsubscribe(c, topic)
				} else {
					hub.Subscribe(c, topic)
				}
				hub.Publish(topic, rally.Text, []byte("x"))
				if i%2 == 0 && r == rounds/2 {
					c.CloseNow() // ends while the others, and itself, carry on
				}
			}
			c.CloseNow()
		})
	}
	wg.Wait()
	for range conns {
		receive(t, ch.closed, "Server.Close")
	}
	for k := range topics {
		topic := "t" + strconv.Itoa(k)
		if n := hub.SubscriberCount(topic); n != 0 {
			t.Errorf("SubscriberCount(%s) = %d once every connection ended", topic, n)
		}
		for i, c := range cs {
			if hub.IsSubscribed(c, topic) {
				t.Errorf("connection %d still subscribes to %s after it ended", i, topic)
			}
		}
	}
	// The broker heard each topic's interest turn on and off in turn,
	// ending off.
	state := map[string]bool{}
	for _, call := range s.took() {
		var topic string
		var on bool
		switch {
		case strings.HasPrefix(call, "interest "):
			f := strings.Fields(call)
			topic, on = f[1], f[2] == "true"
		default:
			continue
		}
		if state[topic] == on {
			t.Fatalf("the broker was told interest %v in %s twice in a row", on, topic)
		}
		state[topic] = on
	}
	for topic, on := range state {
		if on {
			t.Errorf("the broker was last told interest in %s, which has no subscriber", topic)
		}
	}
}

func TestPublishLocalReachesThisHubsSubscribersButFromAndNotTheBroker(t *testing.T) {
	sp := &spy{}
	hub := mustHub(t, &pubsub.Options{Broker: sp, PublishToSelf: true})
	ch := newChat(hub, "room")
	addr := ch.start(t)
	p0, c0 := ch.join(t, addr)
	p1, _ := ch.join(t, addr)
	r, err := hub.PublishLocal(c0, "room", rally.Text, []byte("joined"))
	if err != nil || r.Received() != 1 {
		t.Fatalf("PublishLocal = %+v, %v; want 1 received", r, err)
	}
	hub.Publish("room", rally.Text, []byte("end"))
	expect(t, p1, "the other subscriber", "text:joined", "text:end")
	expect(t, p0, "from, left out even with PublishToSelf", "text:end")
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	for _, c := range sp.calls {
		if strings.HasPrefix(c, "publish ") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("broker calls %q: want the one publish of end", sp.calls)
	}
}
