package pubsub_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

func TestPublishReachesEachSubscriberOfTheTopicOnceAndNoOneElse(t *testing.T) {
	hub := mustHub(t, nil)
	ch := newChat(hub)
	addr := ch.start(t)
	var peers [4]*rawpeer.Peer
	var conns [4]*rally.Conn
	for i := range peers {
		peers[i], conns[i] = ch.join(t, addr)
	}
	for _, c := range conns[:3] {
		hub.Subscribe(c, "news")
		hub.Subscribe(c, "news") // again: a no-op
	}
	hub.Subscribe(conns[3], "sport")
	if n := hub.SubscriberCount("news"); n != 3 {
		t.Fatalf("SubscriberCount(news) = %d, want 3", n)
	}
	if !hub.IsSubscribed(conns[0], "news") || hub.IsSubscribed(conns[0], "sport") || hub.IsSubscribed(conns[3], "news") {
		t.Fatal("IsSubscribed disagrees with the subscriptions made")
	}

	r, err := hub.Publish("news", rally.Text, []byte("headline"))
	if err != nil || r.Sent != 3 || r.Received() != 3 || r.Dropped != 0 || r.Worst() != rally.Sent {
		t.Fatalf("Publish to 3 subscribers = %+v (received %d, worst %v), %v", r, r.Received(), r.Worst(), err)
	}
	r, _ = hub.Publish("sport", rally.Binary, []byte{0, 1, 2})
	if r.Received() != 1 {
		t.Fatalf("Publish to 1 subscriber = %+v", r)
	}
	r, _ = hub.Publish("weather", rally.Text, []byte("nobody listens"))
	if r != (pubsub.Result{}) || r.Worst() != 0 {
		t.Fatalf("Publish to a topic without subscribers = %+v, worst %v; want nothing", r, r.Worst())
	}
	for i, p := range peers[:3] {
		expect(t, p, "subscriber "+strconv.Itoa(i), "text:headline")
	}
	expect(t, peers[3], "the sport subscriber", "binary:\x00\x01\x02")

	// Each got it once: the next message each receives is the next one.
	for i, c := range conns {
		c.Send(rally.Text, []byte("end"))
		expect(t, peers[i], "subscriber "+strconv.Itoa(i), "text:end")
	}
}

func TestPublishRefusesAnInvalidMessageType(t *testing.T) {
	hub := mustHub(t, nil)
	ch := newChat(hub, "t")
	p, c := ch.join(t, ch.start(t))
	for _, typ := range []rally.MessageType{0, 8, 9, 10, -1} {
		if r, err := hub.Publish("t", typ, []byte("x")); err == nil || r != (pubsub.Result{}) {
			t.Fatalf("Publish of type %v = %+v, %v; want an error and nothing sent", typ, r, err)
		}
	}
	c.Send(rally.Text, []byte("end"))
	expect(t, p, "the subscriber", "text:end")
}

func TestPublishFanOutToAThousandSubscribersDeliversEachMessageOnceToEach(t *testing.T) {
	const n, messages = 1000, 10
	hub := mustHub(t, nil)
	ch := newChat(hub, "all")
	addr := ch.start(t)
	peers := make([]*rawpeer.Peer, n)
	conns := make([]*rally.Conn, n)
	for i := range n {
		peers[i], conns[i] = ch.join(t, addr)
	}
	if got := hub.SubscriberCount("all"); got != n {
		t.Fatalf("SubscriberCount = %d, want %d", got, n)
	}
	var want []string
	for m := range messages {
		typ := []rally.MessageType{rally.Text, rally.Binary}[m%2]
		msg := "message " + strconv.Itoa(m)
		r, err := hub.Publish("all", typ, []byte(msg))
		if err != nil || r.Received() != n || r.Dropped != 0 {
			t.Fatalf("publish %d = %+v, %v; want %d received", m, r, err, n)
		}
		want = append(want, typ.String()+":"+msg)
	}
	// From one of them: everyone else.
	r, err := hub.PublishFrom(conns[0], "all", rally.Text, []byte("from 0"))
	if err != nil || r.Received() != n-1 || r.Dropped != 0 {
		t.Fatalf("PublishFrom = %+v, %v; want %d received", r, err, n-1)
	}
	if r, _ := hub.Publish("all", rally.Text, []byte("end")); r.Received() != n {
		t.Fatalf("last publish = %+v", r)
	}
	for i, p := range peers {
		w := want
		if i != 0 {
			w = append(slices.Clip(w), "text:from 0")
		}
		expect(t, p, "subscriber "+strconv.Itoa(i), append(slices.Clip(w), "text:end")...)
	}
}

func TestPublishFromLeavesTheSenderOutUnlessPublishToSelfIsSet(t *testing.T) {
	for _, self := range []bool{false, true} {
		t.Run(fmt.Sprintf("PublishToSelf=%v", self), func(t *testing.T) {
			hub := mustHub(t, &pubsub.Options{PublishToSelf: self})
			ch := newChat(hub, "room")
			ch.publish = "room"
			addr := ch.start(t)
			var peers [4]*rawpeer.Peer
			var conns [4]*rally.Conn
			for i := range peers {
				peers[i], conns[i] = ch.join(t, addr)
			}
			hub.Unsubscribe(conns[3], "room") // a sender that does not subscribe

			say(t, peers[0], "hello")
			r := receive(t, ch.results, "the publish of hello")
			wantReceived := 2
			if self {
				wantReceived = 3
			}
			if r.Received() != wantReceived {
				t.Fatalf("PublishFrom a subscriber = %+v, want %d received", r, wantReceived)
			}
			say(t, peers[3], "outsider")
			if r := receive(t, ch.results, "the publish of outsider"); r.Received() != 3 {
				t.Fatalf("PublishFrom a non-subscriber = %+v, want 3 received", r)
			}
			// Publish (not from anyone) reaches every subscriber, so it
			// closes each one's sequence.
			if r, _ := hub.Publish("room", rally.Text, []byte("end")); r.Received() != 3 {
				t.Fatalf("Publish = %+v, want 3 received", r)
			}
			if self {
				expect(t, peers[0], "the sender", "text:hello", "text:outsider", "text:end")
			} else {
				expect(t, peers[0], "the sender", "text:outsider", "text:end")
			}
			for i := 1; i < 3; i++ {
				expect(t, peers[i], "subscriber "+strconv.Itoa(i), "text:hello", "text:outsider", "text:end")
			}
			conns[3].Send(rally.Text, []byte("direct"))
			expect(t, peers[3], "the non-subscriber", "text:direct")
		})
	}
}

func TestAConnectionThatEndsIsUnsubscribedFromEveryTopic(t *testing.T) {
	hub := mustHub(t, nil)
	ch := newChat(hub, "a", "b")
	addr := ch.start(t)
	p0, c0 := ch.join(t, addr)
	p1, _ := ch.join(t, addr)
	hub.Subscribe(c0, "only0")

	// The client closes properly; the hub forgets c0 before Server.Close.
	if err := p0.WriteFrame(rawpeer.Close(rally.CloseNormal, "")); err != nil {
		t.Fatal(err)
	}
	p0.ExpectClose(t, rally.CloseNormal)
	p0.ExpectEOF(t)
	p0.Close()
	if c := receive(t, ch.closed, "Server.Close"); c != c0 {
		t.Fatal("Server.Close for another connection")
	}
	for topic, want := range map[string]int{"a": 1, "b": 1, "only0": 0} {
		if n := hub.SubscriberCount(topic); n != want {
			t.Errorf("SubscriberCount(%s) = %d after a subscriber ended, want %d", topic, n, want)
		}
		if hub.IsSubscribed(c0, topic) {
			t.Errorf("IsSubscribed(ended connection, %s) = true", topic)
		}
	}
	if err := hub.Subscribe(c0, "a"); !errors.Is(err, rally.ErrClosed) {
		t.Fatalf("Subscribe of an ended connection = %v, want ErrClosed", err)
	}
	if n := hub.SubscriberCount("a"); n != 1 {
		t.Fatalf("SubscriberCount(a) = %d after subscribing an ended connection", n)
	}
	if r, _ := hub.Publish("a", rally.Text, []byte("still here")); r.Received() != 1 || r.Dropped != 0 {
		t.Fatalf("Publish after a subscriber ended = %+v, want 1 received", r)
	}
	expect(t, p1, "the remaining subscriber", "text:still here")
}

func TestUnsubscribeDuringPublishStopsDeliveriesToThatConnectionAndEveryDeliveryCountedArrives(t *testing.T) {
	const subscribers, messages, leaving = 40, 600, 20
	hub := mustHub(t, nil)
	ch := newChat(hub, "t")
	addr := ch.start(t)
	peers := make([]*rawpeer.Peer, subscribers)
	conns := make([]*rally.Conn, subscribers)
	for i := range subscribers {
		peers[i], conns[i] = ch.join(t, addr)
	}

	var begun atomic.Int64 // publishes begun: publish i begins once it is > i
	progress := make(chan struct{}, messages)
	var received atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range messages {
			begun.Store(int64(i + 1))
			r, err := hub.Publish("t", rally.Text, []byte(strconv.Itoa(i)))
			if err != nil || r.Dropped != 0 {
				t.Errorf("publish %d = %+v, %v", i, r, err)
			}
			received.Add(int64(r.Received()))
			progress <- struct{}{}
		}
	})
	// cutoff[i]: no publish numbered cutoff[i] or later may reach
	// subscriber i, which left before it began.
	cutoff := make([]int, subscribers)
	for i := range cutoff {
		cutoff[i] = messages
	}
	wg.Go(func() {
		for i := range leaving {
			for range messages / (2 * leaving) {
				<-progress
			}
			if !hub.Unsubscribe(conns[i], "t") {
				t.Errorf("Unsubscribe of subscriber %d = false", i)
			}
			cutoff[i] = int(begun.Load())
		}
	})
	wg.Wait()
	if n := hub.SubscriberCount("t"); n != subscribers-leaving {
		t.Fatalf("SubscriberCount = %d, want %d", n, subscribers-leaving)
	}

	delivered := 0
	for i, p := range peers {
		conns[i].Send(rally.Text, []byte("end"))
		got := 0
		for {
			m := next(t, p)
			if m == "text:end" {
				break
			}
			if m != "text:"+strconv.Itoa(got) {
				t.Fatalf("subscriber %d: %q arrived when message %d was due", i, m, got)
			}
			got++
		}
		if got > cutoff[i] {
			t.Fatalf("subscriber %d got %d messages, but it left before message %d began", i, got, cutoff[i])
		}
		if i >= leaving && got != messages {
			t.Fatalf("subscriber %d, which stayed, got %d of %d messages", i, got, messages)
		}
		delivered += got
	}
	if int64(delivered) != received.Load() {
		t.Fatalf("the publishes counted %d deliveries, the subscribers received %d", received.Load(), delivered)
	}
}

func TestConnectionsEndingDuringPublishLeaveTheOthersEveryMessage(t *testing.T) {
	const subscribers, messages, ending = 30, 600, 15
	hub := mustHub(t, nil)
	ch := newChat(hub, "t")
	addr := ch.start(t)
	peers := make([]*rawpeer.Peer, subscribers)
	conns := make([]*rally.Conn, subscribers)
	for i := range subscribers {
		peers[i], conns[i] = ch.join(t, addr)
	}
	progress := make(chan struct{}, messages)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range messages {
			r, err := hub.Publish("t", rally.Binary, []byte(strconv.Itoa(i)))
			if err != nil || r.Received() < subscribers-ending || r.Sent+r.Queued+r.Dropped > subscribers {
				t.Errorf("publish %d = %+v, %v", i, r, err)
			}
			progress <- struct{}{}
		}
	})
	wg.Go(func() {
		for i := range ending {
			for range messages / (2 * ending) {
				<-progress
			}
			if i%2 == 0 {
				peers[i].Close() // gone without a word
			} else {
				conns[i].CloseNow() // cut by the server
			}
		}
	})
	wg.Wait()
	for range ending {
		receive(t, ch.closed, "Server.Close of an ended subscriber")
	}
	if n := hub.SubscriberCount("t"); n != subscribers-ending {
		t.Fatalf("SubscriberCount = %d once %d of %d ended, want %d", n, ending, subscribers, subscribers-ending)
	}
	for i := ending; i < subscribers; i++ {
		for m := range messages {
			if got := next(t, peers[i]); got != "binary:"+strconv.Itoa(m) {
				t.Fatalf("subscriber %d: %q when message %d was due", i, got, m)
			}
		}
	}
}

func TestZeroHubWorksAlone(t *testing.T) {
	var hub pubsub.Hub
	ch := newChat(&hub, "t")
	p, _ := ch.join(t, ch.start(t))
	if r, err := hub.Publish("t", rally.Text, []byte("hi")); err != nil || r.Sent != 1 {
		t.Fatalf("Publish on a zero Hub = %+v, %v", r, err)
	}
	expect(t, p, "the subscriber", "text:hi")
	if err := hub.Close(); err != nil {
		t.Fatalf("Close of a zero Hub: %v", err)
	}
}

func TestPublishAllocatesTheSameWhateverTheNumberOfSubscribers(t *testing.T) {
	hub := mustHub(t, nil)
	ch := newChat(hub)
	addr := ch.start(t)
	var conns []*rally.Conn
	for range 33 {
		p, c := ch.join(t, addr)
		discard(p)
		conns = append(conns, c)
	}
	hub.Subscribe(conns[0], "one")
	for _, c := range conns[1:] {
		hub.Subscribe(c, "many")
	}
	payload := []byte(strings.Repeat("x", 100))
	allocs := func(topic string, want int) float64 {
		return testing.AllocsPerRun(200, func() {
			if r, _ := hub.Publish(topic, rally.Binary, payload); r.Received() != want {
				t.Fatalf("publish to %s = %+v", topic, r)
			}
		})
	}
	one, many := allocs("one", 1), allocs("many", 32)
	t.Logf("allocations per publish: %v to 1 subscriber, %v to 32", one, many)
	if many > one {
		t.Fatalf("a publish to 32 subscribers allocates %v times, to 1 subscriber %v: deliveries allocate", many, one)
	}
}

// subscriptionsCharged returns what budget has charged to subscriptions.
func subscriptionsCharged(budget *rally.MemoryBudget) int64 {
	for _, st := range budget.Stats() {
		if st.Category == rally.MemorySubscriptions {
			return st.Used
		}
	}
	return -1
}

func TestSubscriptionsAreChargedToTheBudgetRefusedPastItAndGivenBackWhenTheConnectionEnds(t *testing.T) {
	budget := rally.NewMemoryBudget(4 << 10)
	hub := mustHub(t, &pubsub.Options{MemoryBudget: budget})
	ch := newChat(hub)
	addr := ch.start(t)
	p, c := ch.join(t, addr)
	_, other := ch.join(t, addr)

	n := 0
	var err error
	for ; n < 100; n++ {
		if err = hub.Subscribe(c, "topic-"+strconv.Itoa(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, pubsub.ErrNoMemory) || n == 0 || n == 100 {
		t.Fatalf("after %d subscriptions: %v, want ErrNoMemory past the budget", n, err)
	}
	refused := "topic-" + strconv.Itoa(n)
	if hub.IsSubscribed(c, refused) || hub.SubscriberCount(refused) != 0 {
		t.Fatalf("the refused subscription to %s stands", refused)
	}
	full := subscriptionsCharged(budget)
	if full <= 0 {
		t.Fatalf("%d subscriptions, %d bytes charged", n, full)
	}
	if !hub.Unsubscribe(c, "topic-0") {
		t.Fatal("Unsubscribe(topic-0) = false")
	}
	if now := subscriptionsCharged(budget); now >= full {
		t.Fatalf("charged %d after an unsubscribe, %d before", now, full)
	}
	// A second subscriber of a topic that exists costs less than the
	// topic did: it fits.
	if err := hub.Subscribe(other, "topic-1"); err != nil {
		t.Fatalf("another subscriber of topic-1: %v", err)
	}

	p.Close()
	other.CloseNow()
	for range 2 {
		<-ch.closed
	}
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionsCharged(budget) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still charged to subscriptions after both connections ended", subscriptionsCharged(budget))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if budget.Used() != 0 {
		t.Fatalf("the budget holds %d bytes, want 0", budget.Used())
	}
}

// Result.Add counts a send as Send returned it; a send dropped because
// the subscriber was closing (an error) is a drop, and a Closing one: a
// server counting buffer-limit drops leaves those out.
func TestResultAddTellsADropByTheLimitFromOneToAClosingSubscriber(t *testing.T) {
	var r pubsub.Result
	r.Add(rally.Sent, nil)
	r.Add(rally.Queued, nil)
	r.Add(rally.Dropped, nil)
	r.Add(rally.Dropped, rally.ErrClosed)
	if want := (pubsub.Result{Sent: 1, Queued: 1, Dropped: 2, Closing: 1}); r != want {
		t.Fatalf("Result after sent, queued, dropped by the limit, dropped while closing = %+v, want %+v", r, want)
	}
}
