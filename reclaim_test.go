package rally

import (
	"flag"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// After a connect storm and after a mass disconnect the process gives the
// memory it no longer uses back to the system, once per wave; connections
// opening as others end do not trigger it.
func TestConnectStormsAndMassDisconnectsGiveTheMemoryBackOncePerWave(t *testing.T) {
	// What the heap keeps free without giving it back, right after each
	// reclaim. debug.FreeOSMemory cannot give back the free pages each
	// running P keeps in its page cache (up to 64 pages of 8 KiB): in a
	// process whose heap earlier work has broken up, as in a full run of
	// the package, those pages are ones that were never returned, up to
	// 512 KiB a P, where a fresh process caches pages never used.
	const pageCache = 64 * 8 << 10
	limit := uint64(1<<20 + runtime.GOMAXPROCS(0)*pageCache)
	reclaimed := make(chan uint64, 10)
	hook := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		reclaimed <- m.HeapIdle - m.HeapReleased
	}
	testHookReclaimed.Store(&hook)
	defer testHookReclaimed.Store(nil)
	forcedBefore := forcedCollections()
	// What earlier tests held does not count.
	ReturnMemoryAfterWaves(true)
	defer ReturnMemoryAfterWaves(false)

	open := func(n int) ([]*Conn, []int) {
		conns, peers := make([]*Conn, 0, n), make([]int, 0, n)
		for range n {
			nc, peer := socketPairFD(t)
			conns = append(conns, newConn(nc, nil, true, "", nil))
			peers = append(peers, peer)
		}
		return conns, peers
	}
	end := func(c *Conn, peer int) {
		c.CloseNow()
		syscall.Close(peer)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case kept := <-reclaimed:
			if kept > limit {
				t.Errorf("%s: after the reclaim the heap keeps %d free bytes from the system, want at most %d", what, kept, limit)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: no reclaim a minute later", what)
		}
	}

	// Churn: as many connections open as end, well past reclaimMin.
	c, p := open(1)
	for range 2 * reclaimMin {
		c2, p2 := open(1)
		end(c[0], p[0])
		c, p = c2, p2
	}
	end(c[0], p[0])

	// A connect storm.
	n := reclaimMin + reclaimMin/2
	conns, peers := open(n)
	wait("connect storm")

	// A mass disconnect in two bursts, the second while the first's
	// reclaim waits.
	for i := range reclaimMin {
		end(conns[i], peers[i])
	}
	for i := reclaimMin; i < n; i++ {
		end(conns[i], peers[i])
	}
	wait("mass disconnect")
	select {
	case <-reclaimed:
		t.Fatal("a third reclaim: the churn, or each burst of a wave, triggered one")
	default:
	}
	// Each reclaim is one forced collection (debug.FreeOSMemory): two
	// waves, two at most.
	if n := forcedCollections() - forcedBefore; n > 2 {
		t.Fatalf("%d forced collections for two waves, want at most 2", n)
	}
}

// forcedCollections is the runtime's count of collections forced
// (runtime.GC, debug.FreeOSMemory) since the process started.
func forcedCollections() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var heapGiB = flag.Float64("rally.heap-gib", 0, "GiB of pointer-heavy heap TestConnectionWavesForceNoCollectionUnlessAskedFor holds while connections come and go (default 1/4, 1/16 with -short or -race; RALLY_TEST_HEAP_GIB too; the check of record is 4)")

// pointerHeap allocates about gib GiB of small objects that point at each
// other, the heap a forced collection takes longest to mark.
func pointerHeap(gib float64) []*heapNode {
	type block [1 << 14]heapNode // 1 MiB of nodes
	n := int(gib * 1024)
	blocks := make([]*heapNode, 0, n)
	var prev *heapNode
	for range n {
		b := new(block)
		for i := range b {
			b[i].next, b[i].other = prev, &b[(i*7919)%len(b)]
			prev = &b[i]
		}
		blocks = append(blocks, &b[0])
	}
	return blocks
}

type heapNode struct {
	next, other *heapNode
	_           [6]uintptr
}

// Unless the program asks for it, rally never forces a collection: in a
// program holding a large pointer-heavy heap (-rally.heap-gib=4 or
// RALLY_TEST_HEAP_GIB=4 for 4 GiB, about a minute; 1/4 GiB by default,
// 1/16 with -short or -race), 5,000 connections opened and ended in waves of
// 1,000 (each wave one that ReturnMemoryAfterWaves would answer) leave the
// runtime's count of forced collections as it was, and no return of
// memory is even scheduled. rally used to call debug.FreeOSMemory after
// each wave in any process.
func TestConnectionWavesForceNoCollectionUnlessAskedFor(t *testing.T) {
	gib := *heapGiB
	if v, err := strconv.ParseFloat(os.Getenv("RALLY_TEST_HEAP_GIB"), 64); err == nil && gib == 0 {
		gib = v
	}
	if gib == 0 {
		gib = 0.25
		if testing.Short() || raceEnabled {
			gib = 1.0 / 16
		}
	}
	heap := pointerHeap(gib)
	read := forcedCollections
	before := read()
	for range 5 {
		conns := make([]*Conn, 0, reclaimMin)
		peers := make([]int, 0, reclaimMin)
		for range reclaimMin {
			nc, peer := socketPairFD(t)
			conns = append(conns, newConn(nc, nil, true, "", nil))
			peers = append(peers, peer)
		}
		for i, c := range conns {
			c.CloseNow()
			syscall.Close(peers[i])
		}
	}
	if reclaim.pending.Load() {
		t.Fatal("a return of memory to the system was scheduled without ReturnMemoryAfterWaves")
	}
	after := read()
	runtime.KeepAlive(heap)
	t.Logf("%.3g GiB heap held, %d forced collections during 5 waves of %d connections", gib, after-before, reclaimMin)
	if after != before {
		t.Fatalf("%d forced collections during the waves, want 0", after-before)
	}
}
