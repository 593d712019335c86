package rally

import (
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"
)

// After a connect storm and after a mass disconnect the process gives the
// memory it no longer uses back to the system, once per wave; connections
// opening as others end do not trigger it.
func TestConnectStormsAndMassDisconnectsGiveTheMemoryBackOncePerWave(t *testing.T) {
	// What the heap keeps free without giving it back, right after each
	// reclaim.
	reclaimed := make(chan uint64, 10)
	hook := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		reclaimed <- m.HeapIdle - m.HeapReleased
	}
	testHookReclaimed.Store(&hook)
	defer testHookReclaimed.Store(nil)
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
			if kept > 1<<20 {
				t.Errorf("%s: after the reclaim the heap keeps %d free bytes from the system", what, kept)
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
}

// Unless the program asks for it, rally never forces a collection: 5,000
// connections opened and ended in waves of 1,000 (each wave one that
// ReturnMemoryAfterWaves would answer) leave the runtime's count of forced
// collections as it was, and no return of memory is even scheduled.
// rally used to call debug.FreeOSMemory after each wave in any process.
func TestConnectionWavesForceNoCollectionUnlessAskedFor(t *testing.T) {
	forced := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	read := func() uint64 {
		metrics.Read(forced)
		return forced[0].Value.Uint64()
	}
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
	if after := read(); after != before {
		t.Fatalf("%d forced collections during the waves, want 0", after-before)
	}
}
