package pubsub_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

// The tests of pubsub talk to it through raw peers (internal/rawpeer), so
// they state what reaches each subscriber on the wire. This file holds the
// goroutine-leak check that runs after them and the helpers they share.

// wireTimeout bounds every network step: each read of a raw peer, each
// wait for a callback.
const wireTimeout = 5 * time.Second

// leakWait bounds how long goroutines get to wind down after the tests
// (close handshakes in flight).
const leakWait = 10 * time.Second

// TestMain runs the tests, then fails the run if goroutines started by
// them are still alive after a bounded wait.
func TestMain(m *testing.M) {
	before := map[string]bool{}
	for _, g := range goroutines() {
		before[goroutineID(g)] = true
	}
	code := m.Run()
	if code == 0 {
		if leaked := leaks(before); leaked != "" {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines still alive %v after the tests:\n\n%s\n", leakWait, leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leaks(before map[string]bool) string {
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	deadline := time.Now().Add(leakWait)
	for {
		var left []string
		for _, g := range goroutines() {
			if !before[goroutineID(g)] && !strings.Contains(g, "os/signal.") && !strings.Contains(g, "testing.(*M).startAlarm") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		// Nothing signals that a goroutine has exited: look again
		// shortly, within the deadline.
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutines returns the stack of every goroutine but the caller's.
func goroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(strings.TrimSpace(string(buf[:n])), "\n\n")[1:]
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goroutineID(stack string) string {
	if f := strings.Fields(stack); len(f) > 1 {
		return f[1]
	}
	return ""
}

// chat is a rally.Server whose connections subscribe to topics as they
// open and publish what they send, for the tests to drive.
type chat struct {
	hub    *pubsub.Hub
	topics []string // subscribed by every connection on open
	opened chan *rally.Conn
	closed chan *rally.Conn
	// publish, when set, is the topic each message is published on with
	// PublishFrom; results receives each publish's result.
	publish string
	results chan pubsub.Result
}

func newChat(hub *pubsub.Hub, topics ...string) *chat {
	return &chat{hub: hub, topics: topics, opened: make(chan *rally.Conn, 1024),
		closed: make(chan *rally.Conn, 1024), results: make(chan pubsub.Result, 1024)}
}

// server returns the rally.Server of the chat.
func (ch *chat) server() *rally.Server {
	return &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{CloseTimeout: wireTimeout}},
		Open: func(c *rally.Conn) {
			for _, topic := range ch.topics {
				if err := ch.hub.Subscribe(c, topic); err != nil {
					panic(err)
				}
			}
			ch.opened <- c
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if ch.publish == "" {
				return
			}
			r, err := ch.hub.PublishFrom(c, ch.publish, typ, p)
			if err != nil {
				panic(err)
			}
			ch.results <- r
		},
		Close: func(c *rally.Conn, _ *rally.CloseError) { ch.closed <- c },
	}
}

// start serves the chat on loopback TCP and returns its address.
func (ch *chat) start(t testing.TB) string {
	t.Helper()
	ts := httptest.NewServer(ch.server())
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// join connects a raw client to the chat at addr and returns it with the
// server's side of the connection, once Open has run.
func (ch *chat) join(t testing.TB, addr string) (*rawpeer.Peer, *rally.Conn) {
	t.Helper()
	p, _, err := rawpeer.DialClient(addr, "/", nil, wireTimeout)
	if err != nil {
		t.Fatalf("raw client handshake: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	c := receive(t, ch.opened, "Server.Open")
	t.Cleanup(func() { c.CloseNow() })
	return p, c
}

// receive waits for one value on ch.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wireTimeout):
		t.Fatalf("%s did not happen within %v", what, wireTimeout)
		var zero T
		return zero
	}
}

// next reads one message frame and returns it as "text:..." or
// "binary:...".
func next(t testing.TB, p *rawpeer.Peer) string {
	t.Helper()
	f, err := p.ReadFrame()
	if err != nil {
		t.Fatalf("reading a message: %v", err)
	}
	return describe(f)
}

func describe(f rawpeer.Frame) string {
	kind := fmt.Sprintf("opcode%#x", f.Opcode)
	switch f.Opcode {
	case rawpeer.OpText:
		kind = "text"
	case rawpeer.OpBinary:
		kind = "binary"
	}
	if !f.Fin || f.Masked {
		kind += "(not final or masked)"
	}
	return kind + ":" + string(f.Payload)
}

// expect reads len(want) messages and fails unless they are want.
func expect(t testing.TB, p *rawpeer.Peer, who string, want ...string) {
	t.Helper()
	var got []string
	for range want {
		got = append(got, next(t, p))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s received %q, want %q", who, got, want)
	}
}

// say sends a text message from a raw client.
func say(t testing.TB, p *rawpeer.Peer, msg string) {
	t.Helper()
	if err := p.WriteFrame(rawpeer.Text(msg)); err != nil {
		t.Fatal(err)
	}
}

func mustHub(t testing.TB, opts *pubsub.Options) *pubsub.Hub {
	t.Helper()
	h, err := pubsub.NewHub(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// discard reads and drops whatever reaches p, without a deadline, until p
// is closed.
func discard(p *rawpeer.Peer) {
	nc := p.NetConn()
	nc.SetReadDeadline(time.Time{})
	go io.Copy(io.Discard, nc)
}
