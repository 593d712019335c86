package pubsub

import (
	"math/rand/v2"
	"testing"

	"github.com/rallyws/rally"
)

// A topic's subscribers are found by a scan while they are few and by an
// index past smallTopic; random joins and leaves across that boundary,
// against a model set, keep exactly the subscribers that joined and did
// not leave, and an index that says where each one is.
func TestATopicKeepsItsSubscribersAcrossTheSwitchToAnIndexAndBack(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	conns := make([]*rally.Conn, 3*smallTopic)
	for i := range conns {
		conns[i] = new(rally.Conn)
	}
	ts := newSubscribers("t")
	in := map[*rally.Conn]bool{}
	for step := range 20000 {
		c := conns[r.IntN(len(conns))]
		if in[c] {
			left := ts.remove(c)
			delete(in, c)
			if left != len(in) {
				t.Fatalf("step %d: remove says %d left, want %d", step, left, len(in))
			}
		} else {
			ts.add(c)
			in[c] = true
		}
		if len(ts.subs) != len(in) {
			t.Fatalf("step %d: %d subscribers, want %d", step, len(ts.subs), len(in))
		}
		for i, s := range ts.subs {
			if !in[s] {
				t.Fatalf("step %d: a subscriber that left (or never joined) is at %d", step, i)
			}
			if ts.find(s) != i {
				t.Fatalf("step %d: the subscriber at %d is found at %d", step, i, ts.find(s))
			}
		}
		if ts.indexed() && ts.index.Len() != len(ts.subs) {
			t.Fatalf("step %d: index of %d for %d subscribers", step, ts.index.Len(), len(ts.subs))
		}
		if len(ts.subs) > smallTopic && !ts.indexed() {
			t.Fatalf("step %d: %d subscribers without an index", step, len(ts.subs))
		}
		if len(ts.subs) <= smallTopic/2 && ts.indexed() {
			t.Fatalf("step %d: %d subscribers keep an index", step, len(ts.subs))
		}
	}
}
