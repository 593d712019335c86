package server

import (
	"fmt"
	"testing"

	"github.com/rallyws/rally"
)

// charged returns what s's budget holds in cat now.
func charged(s *testServer, cat rally.MemoryCategory) rally.MemoryStats {
	return s.MemoryBudget().Stats()[cat]
}

// awaitCharge waits until s's budget holds nothing in cats.
func awaitCharge(t *testing.T, s *testServer, cats ...rally.MemoryCategory) {
	t.Helper()
	for _, cat := range cats {
		pollUntil(t, func() (bool, string) {
			used := charged(s, cat).Used
			return used == 0, fmt.Sprintf("%v: %d bytes still charged after every client left", cat, used)
		})
	}
}

func TestPresenceEntriesAreChargedAndGivenBack(t *testing.T) {
	s := serve(t, presenceConfig())
	plain := dial(t, userURL(t, s, "alice"), nil)
	before := charged(s, rally.MemorySubscriptions).Used
	plain.send(`{"type":"subscribe","topic":"x.room","id":1}`)
	plain.expect(`{"type":"ack","id":1}`)
	withoutPresence := charged(s, rally.MemorySubscriptions).Used - before
	member := dial(t, userURL(t, s, "alice"), nil)
	before = charged(s, rally.MemorySubscriptions).Used
	member.join("p.room")
	withPresence := charged(s, rally.MemorySubscriptions).Used - before
	if withPresence-withoutPresence < memberCost {
		t.Fatalf("a subscription with a presence entry charged %d bytes, one without %d: the entry is not charged", withPresence, withoutPresence)
	}
	plain.c.CloseNow()
	member.c.CloseNow()
	awaitCharge(t, s, rally.MemorySubscriptions)
}

func TestAReplayIsChargedWhileItIsWrittenAndGivenBack(t *testing.T) {
	s := serve(t, historyConfig())
	sub := dial(t, s.ws+"/ws", nil)
	ack := sub.subscribeAt("h.r", nil)
	if charged(s, rally.MemorySubscriptions).Used < histSubCost {
		t.Fatalf("a history subscription charged %d bytes", charged(s, rally.MemorySubscriptions).Used)
	}
	sub.c.CloseNow()
	pub := dial(t, s.ws+"/ws", nil)
	publishN(pub, "h.r", 1, 99)
	pub.send(`{"type":"publish","topic":"h.r","data":100,"id":"last"}`)
	if f := pub.frame(); f.Type != "ack" {
		t.Fatalf("publish: %+v", f)
	}
	back := dial(t, s.ws+"/ws", nil)
	from := position{*ack.Offset, ack.Epoch}
	if a := back.subscribeAt("h.r", &from); a.Recovered == nil || !*a.Recovered || a.Replayed != 100 {
		t.Fatalf("recovery: %+v", a)
	}
	for want := 1; want <= 100; want++ {
		if _, n := back.message("h.r"); n != want {
			t.Fatalf("replay: got %d, want %d", n, want)
		}
	}
	if peak := charged(s, rally.MemoryRecovery).Peak; peak < 100*histMsgCost {
		t.Fatalf("a replay of 100 messages peaked at %d bytes charged", peak)
	}
	back.c.CloseNow()
	pub.c.CloseNow()
	awaitCharge(t, s, rally.MemoryRecovery, rally.MemorySubscriptions)
}
