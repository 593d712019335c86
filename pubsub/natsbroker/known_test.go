package natsbroker

import (
	"strconv"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// AfterInterest runs its function once the NATS server knows of the
// broker's new subscription: a publish through the server from then on
// reaches the broker, every time. With nothing new, it runs at once.
func TestAfterInterestWaitsUntilTheServerKnowsTheSubscription(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a, b := twoBrokers(t, e.ClientURL())
	ra := newRecorder()
	if err := a.Attach("a", ra); err != nil {
		t.Fatal(err)
	}
	if err := b.Attach("b", newRecorder()); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		topic := "t" + strconv.Itoa(i)
		if err := a.Interest(topic, true); err != nil {
			t.Fatal(err)
		}
		known := make(chan int, 1)
		a.AfterInterest(func() { known <- interest(e, topic) })
		select {
		case n := <-known:
			if n != 1 {
				t.Fatalf("topic %d: the server knew %d subscriptions when AfterInterest ran, want 1", i, n)
			}
		case <-timeAfter():
			t.Fatalf("topic %d: AfterInterest never ran", i)
		}
		if err := b.Publish(pubsub.Message{Topic: topic, Type: rally.Text, Payload: []byte(topic), Node: "b"}); err != nil {
			t.Fatal(err)
		}
		if m := ra.next(t); m.Topic != topic || string(m.Payload) != topic {
			t.Fatalf("a got %q on %q, want %q", m.Payload, m.Topic, topic)
		}
		ran := false
		a.AfterInterest(func() { ran = true })
		if !ran {
			t.Fatalf("topic %d: AfterInterest with nothing new did not run at once", i)
		}
	}
}

// twoBrokers connects two brokers to the NATS server at url, closed when
// the test ends.
func twoBrokers(t *testing.T, url string) (a, b *Broker) {
	t.Helper()
	for _, p := range []**Broker{&a, &b} {
		br, err := New(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { br.Close() })
		*p = br
	}
	return a, b
}
