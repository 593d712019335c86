package shrinkmap

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// A Map answers as a Go map would, whatever the order of sets and
// deletes, across its rebuilds.
func TestMapAnswersAsAGoMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var m Map[int, int]
	model := map[int]int{}
	for round := range 20 {
		grow := r.IntN(3*Min) + Min
		for range grow {
			k := r.IntN(8 * Min)
			m.Set(k, round)
			model[k] = round
		}
		for range grow + r.IntN(Min) {
			k := r.IntN(8 * Min)
			m.Delete(k)
			delete(model, k)
		}
		if m.Len() != len(model) {
			t.Fatalf("round %d: len %d, want %d", round, m.Len(), len(model))
		}
		for k, v := range model {
			if got, ok := m.Get(k); !ok || got != v {
				t.Fatalf("round %d: Get(%d) = %d, %v; want %d, true", round, k, got, ok, v)
			}
		}
		for k := range m.All() {
			if _, ok := model[k]; !ok {
				t.Fatalf("round %d: %d is in the map, not in the model", round, k)
			}
		}
	}
}

// The room of a crowd that has left is given back: after 100,000 entries
// and the deletion of all but 100, a Map keeps a small fraction of what a
// Go map that went through the same keeps.
func TestMapGivesBackTheRoomOfEntriesDeleted(t *testing.T) {
	const crowd, stay = 100_000, 100
	live := func(keep func()) uint64 {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		keep()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
	}
	var plain map[*int]struct{}
	var shrunk Map[*int, struct{}]
	keys := make([]*int, crowd)
	for i := range keys {
		keys[i] = new(int)
	}
	plainBytes := live(func() {
		plain = map[*int]struct{}{}
		for _, k := range keys {
			plain[k] = struct{}{}
		}
		for _, k := range keys[stay:] {
			delete(plain, k)
		}
	})
	shrunkBytes := live(func() {
		for _, k := range keys {
			shrunk.Set(k, struct{}{})
		}
		for _, k := range keys[stay:] {
			shrunk.Delete(k)
		}
	})
	if len(plain) != stay || shrunk.Len() != stay {
		t.Fatalf("left %d and %d entries, want %d", len(plain), shrunk.Len(), stay)
	}
	t.Logf("%d entries left of %d: a Go map keeps %d bytes, a Map %d", stay, crowd, plainBytes, shrunkBytes)
	if shrunkBytes*20 > plainBytes {
		t.Errorf("a Map keeps %d bytes, more than a twentieth of a Go map's %d", shrunkBytes, plainBytes)
	}
	runtime.KeepAlive(keys)
}
