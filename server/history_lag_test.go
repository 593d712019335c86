package server

import (
	"encoding/json"
	"fmt"
	"net/http"
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
// clients that were only slow for a moment. In both engines and over
// HTTP/2, where the subscriber's stream window (16 KiB) stays closed
// while it does not read and its queue is resumed by the same drain.
func TestAHistorySubscriberThatPausesGetsEveryMessageWithoutBeingClosed(t *testing.T) {
	inModesAndH2C(t, testPausedHistorySubscriber)
}

func testPausedHistorySubscriber(t *testing.T, h2 bool) {
	budget := rally.NewMemoryBudget(1 << 30)
	cfg := historyConfig()
	cfg.Protection.MemoryBudget = budget
	cfg.SubscriberSendBuffer = 64 << 10
	cfg.H2C = h2
	s := serve(t, cfg)
	slow := pausedSubscriber(t, s, "h.lag", h2)
	// Publish until deliveries wait in the hub for its queue (they are
	// charged to the recovery category), then a few more. Incompressible:
	// the rally client over HTTP/2 negotiates permessage-deflate.
	data := []byte(`"` + incompressible(8<<10) + `"`)
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
	// Whatever sent that one released what it had kept under the topic's
	// lock, which this publish takes: the subscriber is live and nothing
	// stays charged.
	if _, err := s.history.publish(nil, "h.lag", []byte(`"live"`), false); err != nil {
		t.Fatal(err)
	}
	if lagged() {
		t.Errorf("%d B still charged for waiting deliveries after the subscriber caught up", budget.Stats()[rally.MemoryRecovery].Used)
	}
	readInOrder(t, slow, "h.lag", published+2, published+2)
}

// textReader reads a connection's next text message, as a test sees it.
type textReader func() ([]byte, error)

// pausedSubscriber subscribes a client to topic and reads its ack; it
// reads nothing more until the test does (readInOrder). Over sockets a
// raw peer; over HTTP/2 a rally client on a transport of its own whose
// streams have 16 KiB of window.
func pausedSubscriber(t *testing.T, s *testServer, topic string, h2 bool) textReader {
	t.Helper()
	subscribe := `{"type":"subscribe","topic":"` + topic + `","id":1}`
	if h2 {
		tr := &http.Transport{ForceAttemptHTTP2: true, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10}}
		t.Cleanup(tr.CloseIdleConnections)
		c := dial(t, s.ws+"/ws", &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr})
		if !c.c.HTTP2() {
			t.Fatal("the subscriber is not over HTTP/2")
		}
		c.send(subscribe)
		if ack := c.next(); !strings.Contains(ack, `"ack"`) {
			t.Fatalf("subscribe: %s", ack)
		}
		return func() ([]byte, error) {
			typ, b, err := c.c.Read(testContext(t))
			if err == nil && typ != rally.Text {
				return nil, fmt.Errorf("a %v message (%.100q)", typ, b)
			}
			return b, err
		}
	}
	p, _, err := rawpeer.DialClient(strings.TrimPrefix(s.http, "http://"), "/ws", nil, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.WriteFrame(rawpeer.Text(subscribe)); err != nil {
		t.Fatal(err)
	}
	if f, err := p.ReadFrame(); err != nil || !strings.Contains(string(f.Payload), `"ack"`) {
		t.Fatalf("subscribe: %q, %v", f.Payload, err)
	}
	return func() ([]byte, error) {
		f, err := p.ReadFrame()
		if err == nil && f.Opcode != rawpeer.OpText {
			return nil, fmt.Errorf("a frame of opcode %d (%.100q)", f.Opcode, f.Payload)
		}
		return f.Payload, err
	}
}

// readInOrder reads the messages of topic at offsets from to to, each
// once and in order; anything else (a close, a gap) fails the test.
func readInOrder(t *testing.T, next textReader, topic string, from, to int) {
	t.Helper()
	for want := from; want <= to; want++ {
		b, err := next()
		if err != nil {
			t.Fatalf("waiting for message %d: %v", want, err)
		}
		var m frame
		if err := json.Unmarshal(b, &m); err != nil || m.Type != "message" || m.Topic != topic || m.Offset == nil {
			t.Fatalf("waiting for message %d: got %.100q", want, b)
		}
		if *m.Offset != uint64(want) {
			t.Fatalf("got message %d, want %d", *m.Offset, want)
		}
	}
}
