package natsbroker

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

func TestNodeFailsOverToAnotherServerOfTheClusterWhenItsServerStops(t *testing.T) {
	s1 := startEmbedded(t, "127.0.0.1:0", nil, "127.0.0.1:0")
	s2 := startEmbedded(t, "127.0.0.1:0", []string{s1.ClusterURL()}, "127.0.0.1:0")
	eventually(t, "the servers are routed", func() bool { return s1.srv.NumRoutes() > 0 && s2.srv.NumRoutes() > 0 })
	// The user's own handler runs besides the broker's.
	theirs := make(chan struct{})
	a := newNode(t, "a", s1.ClientURL()+","+s2.ClientURL(), WithNATSOptions(
		nats.DontRandomize(),
		nats.ReconnectHandler(func(*nats.Conn) { close(theirs) }),
	))
	b := newNode(t, "b", s2.ClientURL())
	subA, subB := dial(t, a), dial(t, b)
	subA.subscribe("x")
	subB.subscribe("x")
	eventually(t, "both servers know both nodes' interest", func() bool { return interest(s1, "x") == 2 && interest(s2, "x") == 2 })

	s1.Shutdown()
	a.errs.waitFor(t, "lost the connection to NATS")
	select {
	case <-theirs:
	case <-timeAfter():
		t.Fatal("the ReconnectHandler passed with WithNATSOptions was not called")
	}
	// s2 has read a's subscription again once it answers a's ping.
	if err := a.broker.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	eventually(t, "s2 has dropped s1's route", func() bool { return s2.srv.NumRoutes() == 0 })
	if n := interest(s2, "x"); n != 2 {
		t.Fatalf("s2 knows %d subscriptions of x, want a's and b's", n)
	}

	checkExactlyOnce(t, dial(t, a), "x", 20, map[string]*client{"a's subscriber": subA, "b's subscriber": subB})
	checkExactlyOnce(t, dial(t, b), "x", 20, map[string]*client{"a's subscriber": subA, "b's subscriber": subB})
	if s := a.broker.Stats(); s.Disconnects != 1 || s.Reconnects != 1 || s.Lost != 0 {
		t.Fatalf("a's stats %+v, want 1 disconnect, 1 reconnect, nothing lost", s)
	}
}

func TestNodesWithDifferentSubjectPrefixesDoNotSeeEachOther(t *testing.T) {
	e := startEmbedded(t, "127.0.0.1:0", nil, "")
	open := func(prefix, node string) (*Broker, *recorder) {
		b, err := New(e.ClientURL(), WithSubjectPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		r := newRecorder()
		if err := b.Attach(node, r); err != nil {
			t.Fatal(err)
		}
		if err := b.Interest("t", true); err != nil {
			t.Fatal(err)
		}
		if err := b.nc.FlushTimeout(testTimeout); err != nil {
			t.Fatal(err)
		}
		return b, r
	}
	_, ra := open("app.one", "a")
	_, rb := open("app.two", "b")
	c, _ := open("app.two", "c")
	msg := func(node, payload string) pubsub.Message {
		return pubsub.Message{Topic: "t", Type: rally.Text, Payload: []byte(payload), Node: node}
	}
	if err := c.Publish(msg("c", "for app.two")); err != nil {
		t.Fatal(err)
	}
	// Had the message reached a, it would be queued for a before the
	// answer to c's ping, and so before the message a reads next.
	if err := c.nc.FlushTimeout(testTimeout); err != nil {
		t.Fatal(err)
	}
	if m := rb.next(t); string(m.Payload) != "for app.two" || m.Node != "c" {
		t.Fatalf("b got %+v", m)
	}
	d, _ := open("app.one", "d")
	if err := d.Publish(msg("d", "for app.one")); err != nil {
		t.Fatal(err)
	}
	if m := ra.next(t); string(m.Payload) != "for app.one" {
		t.Fatalf("a's first delivery is %q, want d's (c's prefix is not a's)", m.Payload)
	}
}
