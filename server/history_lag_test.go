package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// A subscriber of a history topic that stops reading for a while, long
// enough for its queue to refuse deliveries, and then reads again, gets
// every message once and in order, without being closed: its deliveries
// waited in the server (it lagged) and went once its queue emptied. It
// used to be closed with 4010 at the first refused delivery, and had to
// reconnect and recover, which under load is a reconnect storm of
// clients that were only slow for a moment. In both engines.
func TestAHistorySubscriberThatPausesGetsEveryMessageWithoutBeingClosed(t *testing.T) {
	for _, mode := range serveModes {
		t.Run(mode.name, func(t *testing.T) {
			budget := rally.NewMemoryBudget(1 << 30)
			cfg := historyConfig()
			cfg.EventLoop = mode.eventLoop
			cfg.Protection.MemoryBudget = budget
			cfg.SubscriberSendBuffer = 64 << 10
			s := serve(t, cfg)
			slow := pausedSubscriber(t, s, "h.lag")
			// Publish until deliveries wait in the hub for its queue (they
			// are charged to the recovery category), then a few more.
			data := []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
			published := 0
			lagged := func() bool { return budget.Stats()[rally.MemoryRecovery].Used > 0 }
			for ; !lagged() || published%64 != 0; published++ {
				if published >= cfg.History.Size/2 {
					t.Fatalf("%d messages of 8 KiB published and none waits for the subscriber's queue", published)
				}
				if _, err := s.history.publish(nil, "h.lag", data, false); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%d messages published, %d B charged for those waiting", published, budget.Stats()[rally.MemoryRecovery].Used)
			// It reads again: every message, in order, then the next ones.
			readInOrder(t, slow, "h.lag", 1, published)
			if _, err := s.history.publish(nil, "h.lag", []byte(`"live"`), false); err != nil {
				t.Fatal(err)
			}
			readInOrder(t, slow, "h.lag", published+1, published+1)
			// Whatever sent that one released what it had kept under the
			// topic's lock, which this publish takes: the subscriber is
			// live and nothing stays charged.
			if _, err := s.history.publish(nil, "h.lag", []byte(`"live"`), false); err != nil {
				t.Fatal(err)
			}
			if lagged() {
				t.Errorf("%d B still charged for waiting deliveries after the subscriber caught up", budget.Stats()[rally.MemoryRecovery].Used)
			}
			readInOrder(t, slow, "h.lag", published+2, published+2)
		})
	}
}

// pausedSubscriber subscribes a raw peer to topic and reads its ack; it
// reads nothing more until the test does (readInOrder).
func pausedSubscriber(t *testing.T, s *testServer, topic string) *rawpeer.Peer {
	t.Helper()
	p, _, err := rawpeer.DialClient(strings.TrimPrefix(s.http, "http://"), "/ws", nil, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.WriteFrame(rawpeer.Text(`{"type":"subscribe","topic":"` + topic + `","id":1}`)); err != nil {
		t.Fatal(err)
	}
	if f, err := p.ReadFrame(); err != nil || !strings.Contains(string(f.Payload), `"ack"`) {
		t.Fatalf("subscribe: %q, %v", f.Payload, err)
	}
	return p
}

// readInOrder reads the messages of topic at offsets from to to, each
// once and in order; anything else (a close, a gap) fails the test.
func readInOrder(t *testing.T, p *rawpeer.Peer, topic string, from, to int) {
	t.Helper()
	for want := from; want <= to; want++ {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for message %d: %v", want, err)
		}
		if f.Opcode != rawpeer.OpText {
			t.Fatalf("waiting for message %d: got a frame of opcode %d (%q)", want, f.Opcode, f.Payload)
		}
		var m frame
		if err := json.Unmarshal(f.Payload, &m); err != nil || m.Type != "message" || m.Topic != topic || m.Offset == nil {
			t.Fatalf("waiting for message %d: got %.100q", want, f.Payload)
		}
		if *m.Offset != uint64(want) {
			t.Fatalf("got message %d, want %d", *m.Offset, want)
		}
	}
}
