package room

import (
	"slices"
	"sync"
	"testing"
)

func TestRoomMembersAreASnapshotThatJoinAndLeaveDoNotChange(t *testing.T) {
	var r Room[int]
	if len(r.Members()) != 0 {
		t.Fatal("a new room has members")
	}
	r.Join(1)
	r.Join(2)
	snap := r.Members()
	r.Leave(1)
	r.Join(3)
	if !slices.Equal(snap, []int{1, 2}) {
		t.Errorf("snapshot changed to %v", snap)
	}
	if got := r.Members(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("members %v, want [2 3]", got)
	}
	r.Leave(42)
	if got := r.Members(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("leaving a stranger changed the room to %v", got)
	}
}

func TestRoomIsSafeForConcurrentJoinLeaveAndMembers(t *testing.T) {
	var r Room[int]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				r.Join(i*1000 + j)
				_ = r.Members()
				r.Leave(i*1000 + j)
			}
		}()
	}
	wg.Wait()
	if n := len(r.Members()); n != 0 {
		t.Fatalf("%d members left after everyone left", n)
	}
}
