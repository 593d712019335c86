package pubsub_test

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// TestPublishAllocatesAtMostOnce holds a publish to at most one
// allocation, its frame, which every subscriber shares: whatever the
// number of subscribers (1, 32, 1,000), whether each publish goes out at
// once or 16 of them are batched from a connection's cork (PublishFrom in
// a Server callback), at 16 B and 1 KiB. The shapes are BenchmarkPublish's.
func TestPublishAllocatesAtMostOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector: run it without -race")
	}
	const batch = 16
	hub := mustHub(t, nil)
	ch := newChat(hub)
	addr := ch.start(t)
	shapes := []int{1, 32, 1000}
	var conns []*rally.Conn
	for range shapes[len(shapes)-1] {
		p, c := ch.join(t, addr)
		discard(p)
		conns = append(conns, c)
	}
	for _, n := range shapes {
		for _, c := range conns[:n] {
			if err := hub.Subscribe(c, "t"+strconv.Itoa(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	outside := newChat(hub) // a sender that subscribes to nothing
	_, origin := outside.join(t, outside.start(t))
	for _, n := range shapes {
		topic := "t" + strconv.Itoa(n)
		for _, size := range []int{16, 1 << 10} {
			payload := bytes.Repeat([]byte("x"), size)
			check := func(r pubsub.Result, err error) {
				if err != nil || r.Received()+r.Dropped != n {
					t.Errorf("publish to %d subscribers = %+v, %v: not offered to each", n, r, err)
				}
			}
			each := allocsPerPublish(20, 1, func() { check(hub.Publish(topic, rally.Binary, payload)) })
			batched := allocsPerPublish(20, batch, func() {
				origin.Cork(func() {
					for range batch {
						check(hub.PublishFrom(origin, topic, rally.Binary, payload))
					}
				})
			})
			t.Logf("%d subscribers, %d B: %.3f allocations per publish one at a time, %.3f batched by %d", n, size, each, batched, batch)
			if int(each) > 1 || int(batched) > 1 {
				t.Errorf("a publish of %d B to %d subscribers allocates %.3f times one at a time, %.3f batched by %d; want at most 1 (its frame): "+
					"see go test -run '^$' -bench Publish -benchmem -memprofile mem.out ./pubsub", size, n, each, batched, batch)
			}
		}
	}
}

// allocsPerPublish is testing.AllocsPerRun per publish: f makes publishes
// publishes; it runs once unmeasured (the first batch grows each
// receiver's send queue, once per connection), then runs times. Whole
// allocations count, as AllocsPerRun counts them per run: a pool refilled
// once per batch of 16 is less than one per publish.
func allocsPerPublish(runs, publishes int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs*publishes)
}
