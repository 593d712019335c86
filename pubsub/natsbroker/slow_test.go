package natsbroker

import (
	"strconv"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// gatedReceiver blocks in its first Deliver until open is closed, and
// signals on drained when it is handed the message drainedAt.
type gatedReceiver struct {
	entered, open chan struct{}
	first         bool
	drainedAt     string
	drained, last chan struct{}
	errs          *errorLog
}

func (r *gatedReceiver) Deliver(m pubsub.Message) {
	if !r.first {
		r.first = true
		close(r.entered)
		<-r.open
	}
	switch string(m.Payload) {
	case r.drainedAt:
		close(r.drained)
	case "last":
		close(r.last)
	}
}

func (r *gatedReceiver) Error(err error) { r.errs.add(err) }

func TestMessagesBeyondTheInboxOfASlowNodeAreCountedLostAndReported(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	a, b := twoBrokers(t, e.ClientURL())
	// The inbox holds 1 to inboxLen while the receiver is busy with 0.
	r := &gatedReceiver{
		entered: make(chan struct{}), open: make(chan struct{}),
		drainedAt: strconv.Itoa(inboxLen), drained: make(chan struct{}), last: make(chan struct{}),
		errs: newErrorLog(),
	}
	if err := a.Attach("a", newRecorder()); err != nil {
		t.Fatal(err)
	}
	if err := b.Attach("b", r); err != nil {
		t.Fatal(err)
	}
	if err := b.Interest("t", true); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	publish := func(p string) {
		if err := a.Publish(pubsub.Message{Topic: "t", Type: rally.Text, Payload: []byte(p), Node: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	publish("0")
	select {
	case <-r.entered:
	case <-timeAfter():
		t.Fatal("first message not delivered")
	}
	const extra = 1000
	for i := 1; i <= inboxLen+extra; i++ {
		publish(strconv.Itoa(i))
	}
	// Once each has its answer to a ping, the server has sent b every
	// message and b's client has queued or dropped each.
	if err := a.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	close(r.open)
	select {
	case <-r.drained:
	case <-timeAfter():
		t.Fatal("the messages in the inbox were not delivered")
	}
	publish("last")
	select {
	case <-r.last:
	case <-timeAfter():
		t.Fatal("the message after the drops did not arrive")
	}
	s := b.Stats()
	if s.Lost != extra || s.Received != inboxLen+2 {
		t.Fatalf("stats %+v, want %d lost and %d received", s, extra, inboxLen+2)
	}
	if s.AsyncErrors == 0 {
		t.Errorf("stats %+v: the slow consumer was not counted", s)
	}
	// The loss is reported before the next message is delivered; NATS
	// reports the slow consumer from a goroutine of its own.
	if !r.errs.has(`lost 1000 messages of topic "t" from node "a"`) {
		t.Errorf("the loss was not reported; errors: %v", r.errs.errs)
	}
	r.errs.waitFor(t, "slow consumer")
}
