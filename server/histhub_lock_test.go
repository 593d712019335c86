package server

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// A topic's lock is held for a whole delivery to its subscribers. A
// subscribe to that topic waits for it, and must not hold up the
// deliveries to other topics meanwhile: before, it waited holding the
// hub's lock, which every delivery takes.
func TestASubscribeWaitingForABusyTopicDoesNotHoldUpOtherTopics(t *testing.T) {
	h := newHistHub(10, 10)
	h.add(new(rally.Conn), "busy")
	h.mu.RLock()
	busy, _ := h.topics.Get("busy")
	h.mu.RUnlock()
	busy.mu.Lock() // a delivery to "busy" under way
	added := make(chan struct{})
	go func() {
		h.add(new(rally.Conn), "busy")
		close(added)
	}()
	waitUntilParked(t, "server.(*histHub).add")

	delivered := make(chan struct{})
	go func() {
		h.deliver(nil, "other", 1, 0, framed([]byte("m")))
		h.add(new(rally.Conn), "other")
		close(delivered)
	}()
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("a delivery to another topic and a subscribe to it waited for the subscribe to the busy topic")
	}
	busy.mu.Unlock()
	<-added
	if n := h.count("busy"); n != 2 {
		t.Errorf("%d subscribers of the busy topic, want 2", n)
	}
}

// A subscribe to a topic whose last subscriber is leaving lands in the
// topic that replaces it, not in the one being taken out.
func TestASubscribeRacingTheLastUnsubscribeOfItsTopicIsKept(t *testing.T) {
	h := newHistHub(10, 10)
	for range 1000 {
		a, b := new(rally.Conn), new(rally.Conn)
		h.add(a, "t")
		done := make(chan struct{})
		go func() {
			h.add(b, "t")
			close(done)
		}()
		h.remove(a, "t")
		<-done
		if n := h.count("t"); n != 1 {
			t.Fatalf("%d subscribers after one left and one came, want 1", n)
		}
		h.remove(b, "t")
		if n := h.count("t"); n != 0 {
			t.Fatalf("%d subscribers after both left, want 0", n)
		}
	}
}

// waitUntilParked waits until a goroutine running fn is parked on a lock.
func waitUntilParked(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, "[sync.Mutex.Lock") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no goroutine in %s parked on a lock within 10 s", fn)
}
