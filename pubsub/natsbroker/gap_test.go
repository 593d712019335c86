package natsbroker

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
)

func TestReceivingBrokerCountsAndReportsGapsInEachSendersSequence(t *testing.T) {
	b := &Broker{}
	r := newRecorder()
	b.att.Store(&attachment{node: "me", r: r})
	sub := &topicSub{b: b, topic: "t", last: map[string]*position{}}
	send := func(node string, stream uint32, seq uint64) {
		sub.handle(&nats.Msg{Data: appendMessage(nil, head{typ: rally.Text, node: node, stream: stream, seq: seq}, []byte("x"))})
	}
	send("a", 1, 7) // the first message seen from a: no gap before it
	send("a", 1, 8)
	send("b", 5, 1) // b numbers on its own
	send("a", 1, 11)
	if lost, got := b.lost.Load(), b.received.Load(); lost != 2 || got != 4 {
		t.Fatalf("%d lost and %d received, want 2 lost (a's 9 and 10) and 4 received", lost, got)
	}
	if err := r.errs.waitFor(t, "lost"); !strings.Contains(err.Error(), `lost 2 messages of topic "t" from node "a" (sequence 8 to 11)`) {
		t.Fatalf("reported %q", err)
	}
	send("a", 2, 1) // a restarted: a new stream starts afresh
	send("a", 2, 2)
	send("me", 3, 9) // a node's own message is not handed back
	if lost, got := b.lost.Load(), b.received.Load(); lost != 2 || got != 6 {
		t.Fatalf("%d lost and %d received, want still 2 lost and 6 received", lost, got)
	}
	sub.handle(&nats.Msg{Data: []byte{9, 9}})
	if bad, got := b.malformed.Load(), b.received.Load(); bad != 1 || got != 6 {
		t.Fatalf("%d malformed and %d received, want 1 and 6", bad, got)
	}
	if len(r.msgs) != 6 || r.msgs[3].Node != "a" || r.msgs[2].Node != "b" {
		t.Fatalf("delivered %+v", r.msgs)
	}
}
