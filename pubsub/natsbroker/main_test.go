package natsbroker

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// The tests of this package run real NATS servers in this process
// (StartEmbedded on loopback, free ports) and real rally connections.

// testTimeout bounds every wait of a test.
const testTimeout = 20 * time.Second

// TestMain fails the run if the tests leave goroutines behind (brokers,
// servers, connections not closed), after giving them time to wind down.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		leaked := leftovers()
		for leaked != "" && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			leaked = leftovers()
		}
		if leaked != "" {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines leaked by the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leftovers returns the stacks of goroutines that belong to no test:
// all but this one and those of the runtime and the testing package.
func leftovers() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "natsbroker.TestMain") || strings.Contains(g, "os/signal.") || strings.Contains(g, "testing.(*") || strings.Contains(g, "testing.runFuzz") {
			continue
		}
		left = append(left, g)
	}
	return strings.Join(left, "\n\n")
}

func startEmbedded(t testing.TB, addr string, routes []string, clusterAddr string) *Embedded {
	t.Helper()
	e, err := StartEmbedded(addr, routes, clusterAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// eventually waits until cond holds, failing the test at testTimeout. It
// is for states that offer no event to wait on (a NATS server's view of
// routes and interest), and polls them.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// interest returns how many subscriptions e knows for topic, its own
// clients' and those routed from other servers.
func interest(e *Embedded, topic string) int {
	return e.srv.GlobalAccount().Interest(subjectOf("rally", topic))
}

// errorLog collects the errors reported to a hub, and signals each.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	c    chan error
}

func newErrorLog() *errorLog { return &errorLog{c: make(chan error, 1024)} }

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
	select {
	case l.c <- err:
	default:
	}
}

// has reports whether an error whose text contains s was reported.
func (l *errorLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// waitFor waits for an error whose text contains s.
func (l *errorLog) waitFor(t testing.TB, s string) error {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case err := <-l.c:
			if strings.Contains(err.Error(), s) {
				return err
			}
		case <-timer.C:
			t.Fatalf("no error containing %q reported", s)
		}
	}
}

// node is one rally node: a hub on a NATS broker, serving rally
// connections that speak a tiny test protocol in text messages:
// "sub TOPIC" subscribes (answered "ok TOPIC"), "pub TOPIC PAYLOAD"
// publishes PAYLOAD as text.
type node struct {
	name   string
	broker *Broker
	hub    *pubsub.Hub
	errs   *errorLog
	url    string
}

func newNode(t testing.TB, name, natsURL string, opts ...Option) *node {
	t.Helper()
	n := &node{name: name, errs: newErrorLog()}
	b, err := New(natsURL, append([]Option{WithName(name), WithReconnectWait(10 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	n.broker = b
	n.hub, err = pubsub.NewHub(&pubsub.Options{Broker: b, Node: name, OnError: n.errs.add})
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.hub.Close() })
	srv := &rally.Server{Message: n.message}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	n.url = "ws" + strings.TrimPrefix(ts.URL, "http")
	return n
}

func (n *node) message(c *rally.Conn, typ rally.MessageType, p []byte) {
	verb, rest, _ := strings.Cut(string(p), " ")
	switch verb {
	case "sub":
		n.hub.Subscribe(c, rest)
		c.Send(rally.Text, []byte("ok "+rest))
	case "pub":
		topic, payload, _ := strings.Cut(rest, " ")
		n.hub.PublishFrom(c, topic, rally.Text, []byte(payload))
	}
}

// client is a rally connection to a node.
type client struct {
	t testing.TB
	c *rally.Conn
}

func dial(t testing.TB, n *node) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _, err := rally.Dial(ctx, n.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(rally.CloseNormal, "") })
	return &client{t: t, c: c}
}

func (cl *client) send(s string) {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := cl.c.Write(ctx, rally.Text, []byte(s)); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *client) read() string {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, p, err := cl.c.Read(ctx)
	if err != nil {
		cl.t.Fatalf("read: %v", err)
	}
	if typ != rally.Text {
		cl.t.Fatalf("read a %v message %q, want text", typ, p)
	}
	return string(p)
}

func (cl *client) subscribe(topic string) {
	cl.t.Helper()
	cl.send("sub " + topic)
	if got := cl.read(); got != "ok "+topic {
		cl.t.Fatalf("subscribe answered %q", got)
	}
}

// recorder is a pubsub.Receiver that keeps what it is handed.
type recorder struct {
	mu   sync.Mutex
	msgs []pubsub.Message
	c    chan pubsub.Message
	errs *errorLog
}

func newRecorder() *recorder {
	return &recorder{c: make(chan pubsub.Message, 1<<16), errs: newErrorLog()}
}

func (r *recorder) Deliver(m pubsub.Message) {
	m.Payload = append([]byte(nil), m.Payload...)
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	r.c <- m
}

func (r *recorder) Error(err error) { r.errs.add(err) }

func (r *recorder) next(t testing.TB) pubsub.Message {
	t.Helper()
	select {
	case m := <-r.c:
		return m
	case <-time.After(testTimeout):
		t.Fatal("no message delivered")
	}
	return pubsub.Message{}
}

func timeAfter() <-chan time.Time { return time.After(testTimeout) }
