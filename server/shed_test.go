package server

import (
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

func TestUnderHighMemoryPressureTheSubscriberWithTheLargestQueueIsCut(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 30)
	// The slow-subscriber rule would cut the subscriber that never reads
	// first: off, so that the memory watch is what cuts it.
	s := serve(t, Config{Protection: Protection{MemoryBudget: budget}, SlowSubscriberTimeout: -1})
	ended := make(chan struct{}, 4)
	s.closedHook = func() { ended <- struct{}{} }
	// A raw peer that subscribes and then never reads.
	slow, _, err := rawpeer.DialClient(strings.TrimPrefix(s.http, "http://"), "/ws", nil, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if err := slow.WriteFrame(rawpeer.Text(`{"type":"subscribe","topic":"flood","id":1}`)); err != nil {
		t.Fatal(err)
	}
	fast := dial(t, s.ws+"/ws", nil)
	fast.send(`{"type":"subscribe","topic":"quiet","id":1}`)
	fast.expect(`{"type":"ack","id":1}`)
	// The slow subscriber never reads again: publish until its queue is
	// full (past the 1 MiB buffer limit, a message is dropped for it).
	payload := []byte(`"` + strings.Repeat("x", 32<<10) + `"`)
	for {
		res, err := s.Hub().Publish("flood", rally.Text, payload)
		if err != nil {
			t.Fatal(err)
		}
		if res.Dropped == 1 {
			break
		}
	}
	if !budget.Reserve(rally.MemoryHandshakes, 950<<20) {
		t.Fatal("reserve refused")
	}
	<-ended // the memory watch cut the slow subscriber
	budget.Release(rally.MemoryHandshakes, 950<<20)
	// Either of the two shedders may cut it first: the server's memory
	// watch (a quarter-second tick: rally_memory_shed_connections_total)
	// or the budget itself, making room for a charge that did not fit
	// (rally_memory_shed_queues_total). Whichever it was, the one
	// subscriber was cut once and is counted once.
	if v, q := metric(t, s.http, "rally_memory_shed_connections_total"), metric(t, s.http, "rally_memory_shed_queues_total"); v+q != 1 {
		t.Errorf("rally_memory_shed_connections_total = %v and rally_memory_shed_queues_total = %v, want one cut in all", v, q)
	}
	// The subscriber with nothing waiting is still served.
	fast.send(`{"type":"subscribe","topic":"other","id":2}`)
	fast.expect(`{"type":"ack","id":2}`)
}
