package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// Over TLS rally cannot reach the socket, so writes take the portable
// path: a blocking Write writes from its own goroutine, sends queue behind
// it, a flusher takes over what is left. Every message must still arrive
// whole, in order per sender, with its type.
func TestConcurrentWritersOverTLSEachMessageArrivesWholeInOrder(t *testing.T) {
	s := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Write(context.Background(), typ, p)
	}}
	ts := httptest.NewTLSServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, "wss"+strings.TrimPrefix(ts.URL, "https"), &rally.DialOptions{
		TLSConfig:   &tls.Config{InsecureSkipVerify: true},
		ConnOptions: rally.ConnOptions{BufferLimit: -1}, // no Send may be dropped here
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				typ := rally.Text
				if i%3 == 0 {
					typ = rally.Binary
				}
				msg := fmt.Appendf(nil, "%d:%d:", w, i)
				msg = append(msg, bytes.Repeat([]byte{'x'}, (i*97)%20000)...)
				var err error
				if i%2 == 0 {
					err = c.Write(ctx, typ, msg)
				} else {
					_, err = c.Send(typ, msg)
				}
				if err != nil {
					t.Errorf("writer %d message %d: %v", w, i, err)
					return
				}
			}
		})
	}
	next := make([]int, writers)
	for range writers * each {
		typ, p, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var w, i int
		if _, err := fmt.Sscanf(string(p), "%d:%d:", &w, &i); err != nil {
			t.Fatalf("unparsable echo %.30q", p)
		}
		want := rally.Text
		if i%3 == 0 {
			want = rally.Binary
		}
		if i != next[w] || typ != want || len(p) != len(fmt.Sprintf("%d:%d:", w, i))+(i*97)%20000 {
			t.Fatalf("writer %d: got message %d (%v, %d bytes), want message %d (%v)", w, i, typ, len(p), next[w], want)
		}
		next[w]++
	}
	wg.Wait()
}

// With rally's own TLS socket beneath (Dial for wss://, NewTLSListener on
// a server), a send over TLS reports Sent when the kernel took the
// ciphertext, as over plain TCP: small sends to a peer that keeps up are
// never Queued and never fire OnDrain.
func TestSendsOverRallysTLSReportSentWhenTheKernelTakesThem(t *testing.T) {
	var queued, drained int
	var mu sync.Mutex
	got := make(chan []string, 1)
	s := &rally.Server{
		Open: func(c *rally.Conn) {
			var out []string
			for i := range 50 {
				st, err := c.Send(rally.Text, fmt.Appendf(nil, "m%d", i))
				if err != nil {
					t.Errorf("Send %d: %v", i, err)
				}
				out = append(out, st.String())
				if st == rally.Queued {
					mu.Lock()
					queued++
					mu.Unlock()
				}
			}
			got <- out
		},
		Drain: func(*rally.Conn) {
			mu.Lock()
			drained++
			mu.Unlock()
		},
	}
	ts := httptest.NewUnstartedServer(s)
	ts.Listener = rally.NewTLSListener(ts.Listener, tlsServerConfig(t))
	ts.Start()
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, "wss"+strings.TrimPrefix(ts.URL, "http"), &rally.DialOptions{
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i := range 50 {
		_, p, err := c.Read(ctx)
		if err != nil || string(p) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %q, %v", i, p, err)
		}
	}
	statuses := <-got
	for i, st := range statuses {
		if st != "sent" {
			t.Fatalf("Send %d over TLS reported %s, want sent (statuses %v)", i, st, statuses)
		}
	}
	// The client side too: its sends go through its own TLS socket.
	for i := range 50 {
		if st, err := c.Send(rally.Binary, []byte{byte(i)}); st != rally.Sent || err != nil {
			t.Fatalf("client Send %d over TLS = %v, %v; want sent", i, st, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if queued != 0 || drained != 0 {
		t.Fatalf("%d sends queued and %d drains over TLS to a peer that keeps up, want none", queued, drained)
	}
}

// tlsServerConfig is a TLS config with httptest's certificate.
func tlsServerConfig(t *testing.T) *tls.Config {
	ts := httptest.NewTLSServer(nil)
	cfg := ts.TLS.Clone()
	ts.Close()
	cfg.NextProtos = []string{"http/1.1"}
	return cfg
}

// Under backpressure over rally's TLS socket, sends queue (the kernel took
// only part of the ciphertext), BufferedAmount counts them, every
// completion reports nil once its frame's ciphertext is in the kernel, the
// messages arrive whole and in order, and OnDrain fires when the queue
// empties.
func TestBackpressureOverRallysTLSQueuesCompletesAndDrains(t *testing.T) {
	const n, size = 64, 64 << 10
	type result struct {
		statuses map[string]int
		buffered int
	}
	res := make(chan result, 1)
	completions := make(chan error, n)
	drained := make(chan struct{}, 4)
	var sendAll func(c *rally.Conn)
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}},
		Open: func(c *rally.Conn) {
			go sendAll(c) // from outside the callback: not gathered by its cork
		},
		Drain: func(*rally.Conn) { drained <- struct{}{} },
	}
	sendAll = func(c *rally.Conn) {
		r := result{statuses: map[string]int{}}
		for i := range n {
			msg := bytes.Repeat([]byte{byte(i)}, size)
			st, err := c.SendDone(rally.Binary, msg, func(err error) { completions <- err })
			if err != nil {
				t.Errorf("SendDone %d: %v", i, err)
			}
			r.statuses[st.String()]++
		}
		r.buffered = c.BufferedAmount()
		res <- r
	}
	ts := httptest.NewUnstartedServer(s)
	ts.Listener = rally.NewTLSListener(ts.Listener, tlsServerConfig(t))
	ts.Start()
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, "wss"+strings.TrimPrefix(ts.URL, "http"), &rally.DialOptions{
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	r := <-res // the client has read nothing yet
	if r.statuses["queued"] == 0 || r.buffered == 0 {
		t.Fatalf("4 MiB sent over TLS to a peer not reading: statuses %v, BufferedAmount %d; want some queued and counted", r.statuses, r.buffered)
	}
	for i := range n {
		typ, p, err := c.Read(ctx)
		if err != nil || typ != rally.Binary || len(p) != size || p[0] != byte(i) || p[size-1] != byte(i) {
			t.Fatalf("message %d: %v, %d bytes, %v", i, typ, len(p), err)
		}
	}
	for i := range n {
		select {
		case err := <-completions:
			if err != nil {
				t.Fatalf("completion %d: %v", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d completions", i, n)
		}
	}
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatal("OnDrain did not fire after the queue emptied")
	}
}
