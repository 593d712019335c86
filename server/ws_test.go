package server

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/rallyws/rally"
)

func TestSubscriberReceivesPublishAndPublisherOnlyWithSelf(t *testing.T) {
	ts := serve(t, Config{})
	a := dial(t, ts.ws+"/ws", nil)
	b := dial(t, ts.ws+"/ws", nil)
	a.send(`{"type":"subscribe","topic":"room","id":1}`)
	a.expect(`{"type":"ack","id":1}`)
	b.send(`{"type":"subscribe","topic":"room","id":"b1"}`)
	b.expect(`{"type":"ack","id":"b1"}`)

	a.send(`{"type":"publish","topic":"room","data":{"text":"hi","n":[1,2]},"id":2}`)
	a.expect(`{"type":"ack","id":2}`) // and no message of its own before it
	b.expect(`{"type":"message","topic":"room","data":{"text":"hi","n":[1,2]}}`)

	a.send(`{"type":"publish","topic":"room","data":"again","self":true,"id":3}`)
	a.expect(`{"type":"message","topic":"room","data":"again"}`)
	a.expect(`{"type":"ack","id":3}`)
	b.expect(`{"type":"message","topic":"room","data":"again"}`)

	if got := metric(t, ts.http, `rally_publishes_total{source="ws"}`); got != 2 {
		t.Errorf("rally_publishes_total{source=\"ws\"} = %v, want 2", got)
	}
	if got := metric(t, ts.http, `rally_deliveries_total`); got != 3 {
		t.Errorf("rally_deliveries_total = %v, want 3", got)
	}
}

func TestRequestsWithoutIDAreNotAcknowledged(t *testing.T) {
	ts := serve(t, Config{})
	a := dial(t, ts.ws+"/ws", nil)
	a.send(`{"type":"subscribe","topic":"t"}`)
	a.send(`{"type":"publish","topic":"t","data":1,"self":true}`)
	a.expect(`{"type":"message","topic":"t","data":1}`)
}

func TestUnsubscribeStopsDeliveries(t *testing.T) {
	ts := serve(t, Config{})
	a := dial(t, ts.ws+"/ws", nil)
	b := dial(t, ts.ws+"/ws", nil)
	b.send(`{"type":"subscribe","topic":"t","id":1}`)
	b.expect(`{"type":"ack","id":1}`)
	b.send(`{"type":"subscribe","topic":"u","id":2}`)
	b.expect(`{"type":"ack","id":2}`)
	b.send(`{"type":"unsubscribe","topic":"t","id":3}`)
	b.expect(`{"type":"ack","id":3}`)
	a.send(`{"type":"publish","topic":"t","data":"lost","id":1}`)
	a.expect(`{"type":"ack","id":1}`)
	a.send(`{"type":"publish","topic":"u","data":"kept","id":2}`)
	a.expect(`{"type":"ack","id":2}`)
	b.expect(`{"type":"message","topic":"u","data":"kept"}`)
}

func TestProblemsAreAnsweredWithErrorFramesAndTheConnectionStays(t *testing.T) {
	ts := serve(t, Config{})
	a := dial(t, ts.ws+"/ws", nil)
	for _, tc := range []struct{ send, code string }{
		{`{"type":"subscribe","topic":"","id":1}`, codeInvalidTopic},
		{`{"type":"subscribe","id":1}`, codeInvalidTopic},
		{`{"type":"subscribe","topic":"` + strings.Repeat("x", MaxTopicLength+1) + `","id":1}`, codeInvalidTopic},
		{`{"type":"subscribe","topic":"a b","id":1}`, codeInvalidTopic},
		{`{"type":"subscribe","topic":"news.*","id":1}`, codeInvalidTopic},
		{`{"type":"publish","topic":"a>b","data":1,"id":1}`, codeInvalidTopic},
		{`{"type":"unsubscribe","topic":"é","id":1}`, codeInvalidTopic},
		{`{"type":"publish","topic":"t","id":1}`, codeBadRequest},
		{`{"topic":"t","id":1}`, codeBadRequest},
		{`{"type":"dance","topic":"t","id":1}`, codeUnknownType},
	} {
		a.send(tc.send)
		got := a.next()
		if !strings.Contains(got, `"type":"error"`) || !strings.Contains(got, `"id":1,`) || !strings.Contains(got, `"code":"`+tc.code+`"`) {
			t.Errorf("%s\n  answered %s, want an error frame with id 1 and code %s", tc.send, got, tc.code)
		}
	}
	a.send(`{"type":"subscribe","topic":"t","id":{"x":1}}`)
	if got := a.next(); !strings.Contains(got, `"code":"bad_request"`) || strings.Contains(got, `"id"`) {
		t.Errorf("an object as id: answered %s, want bad_request without id", got)
	}
	a.send(`{"type":"subscribe","topic":"Chat-1_a.b:c/d@e","id":"ok"}`)
	a.expect(`{"type":"ack","id":"ok"}`)
}

func TestProtocolViolationsCloseTheConnection(t *testing.T) {
	ts := serve(t, Config{})
	for _, tc := range []struct {
		name string
		typ  rally.MessageType
		p    string
		code uint16
	}{
		{"binary message", rally.Binary, `{"type":"subscribe","topic":"t"}`, rally.CloseUnsupportedData},
		{"not JSON", rally.Text, `subscribe t`, rally.ClosePolicyViolation},
		{"JSON but not an object", rally.Text, `["subscribe","t"]`, rally.ClosePolicyViolation},
		{"type not a string", rally.Text, `{"type":1}`, rally.ClosePolicyViolation},
		{"invalid UTF-8", rally.Text, "{\"type\":\"\xff\"}", rally.CloseInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := dial(t, ts.ws+"/ws", nil)
			if err := a.c.Write(testContext(t), tc.typ, []byte(tc.p)); err != nil {
				t.Fatal(err)
			}
			if got := a.closed(); got != tc.code {
				t.Fatalf("closed with %d, want %d", got, tc.code)
			}
		})
	}
}

func TestMessageOverTheLimitClosesWith1009(t *testing.T) {
	ts := serve(t, Config{MaxMessageBytes: 1024})
	a := dial(t, ts.ws+"/ws", nil)
	a.send(`{"type":"publish","topic":"t","data":"` + strings.Repeat("x", 1024) + `"}`)
	if got := a.closed(); got != rally.CloseTooBig {
		t.Fatalf("closed with %d, want 1009", got)
	}
}

func TestSubscriptionsPerConnectionAreLimited(t *testing.T) {
	ts := serve(t, Config{MaxSubscriptions: 2})
	a := dial(t, ts.ws+"/ws", nil)
	a.send(`{"type":"subscribe","topic":"a","id":1}`)
	a.expect(`{"type":"ack","id":1}`)
	a.send(`{"type":"subscribe","topic":"b","id":2}`)
	a.expect(`{"type":"ack","id":2}`)
	a.send(`{"type":"subscribe","topic":"a","id":3}`) // again: not a new one
	a.expect(`{"type":"ack","id":3}`)
	a.send(`{"type":"subscribe","topic":"c","id":4}`)
	if got := a.next(); !strings.Contains(got, `"code":"limit"`) {
		t.Fatalf("third topic: got %s, want a limit error", got)
	}
	a.send(`{"type":"unsubscribe","topic":"a","id":5}`)
	a.expect(`{"type":"ack","id":5}`)
	a.send(`{"type":"subscribe","topic":"c","id":6}`)
	a.expect(`{"type":"ack","id":6}`)
	if got := metric(t, ts.http, `rally_limit_refusals_total{limit="subscriptions"}`); got != 1 {
		t.Errorf("subscription refusals counted %v, want 1", got)
	}
}

func TestDeliveriesAreCompressedWhenTheClientOffersDeflate(t *testing.T) {
	ts := serve(t, Config{})
	opts := &rally.DialOptions{Compression: &rally.CompressionOptions{}}
	c, resp, err := rally.Dial(testContext(t), ts.ws+"/ws", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	ext := resp.Header.Get("Sec-WebSocket-Extensions")
	if !strings.Contains(ext, "permessage-deflate") || !strings.Contains(ext, "server_no_context_takeover") {
		t.Fatalf("extensions %q, want permessage-deflate with server_no_context_takeover", ext)
	}
	a := &client{t: t, c: c}
	a.send(`{"type":"subscribe","topic":"t","id":1}`)
	a.expect(`{"type":"ack","id":1}`)
	big := strings.Repeat("abc", 1000)
	a.send(`{"type":"publish","topic":"t","data":"` + big + `","self":true}`)
	a.expect(`{"type":"message","topic":"t","data":"` + big + `"}`)
}

func TestTopicPatternsMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "anything", true},
		{"news", "news", true},
		{"news", "news2", false},
		{"chat.*", "chat.lobby", true},
		{"chat.*", "chat.", true},
		{"chat.*", "chat", false},
		{"*.admin", "x.y.admin", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"user/*/inbox", "user/42/inbox", true},
		{"user/*/inbox", "user/42/outbox", false},
	} {
		if got := matchTopic(tc.pattern, tc.topic); got != tc.want {
			t.Errorf("matchTopic(%q, %q) = %v, want %v", tc.pattern, tc.topic, got, tc.want)
		}
	}
}

// The session rally serve keeps for each WebSocket connection is three
// words when the connection uses no history, presence or expiring token:
// the rest is made when one of them is first used.
func TestAnIdleConnectionsSessionIsThreeWords(t *testing.T) {
	if n := unsafe.Sizeof(wsSession{}); n > 24 {
		t.Errorf("wsSession is %d bytes, want at most 24", n)
	}
}
