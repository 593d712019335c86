package rally

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// After a mass disconnect the memory of the connections goes back to the
// system once, at the end of the wave; connections coming and going as
// others end do not trigger it.
func TestAMassDisconnectGivesTheMemoryBackOncePerWave(t *testing.T) {
	reclaimed := make(chan struct{}, 10)
	hook := func() { reclaimed <- struct{}{} }
	testHookReclaimed.Store(&hook)
	defer testHookReclaimed.Store(nil)
	reclaim.peak.Store(reclaim.live.Load()) // what earlier tests held does not count

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

	// Churn: as many connections open as end, well past reclaimMin.
	c, p := open(1)
	for range 2 * reclaimMin {
		c2, p2 := open(1)
		end(c[0], p[0])
		c, p = c2, p2
	}
	end(c[0], p[0])

	// A wave: 1.5 reclaimMin connections end in two bursts, the second
	// while the first's reclaim waits.
	n := reclaimMin + reclaimMin/2
	conns, peers := open(n)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range reclaimMin {
		end(conns[i], peers[i])
	}
	for i := reclaimMin; i < n; i++ {
		end(conns[i], peers[i])
	}
	select {
	case <-reclaimed:
	case <-time.After(time.Minute):
		t.Fatal("no reclaim a minute after the connections ended")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapReleased <= before.HeapReleased {
		t.Errorf("the heap released %d bytes to the system before the reclaim, %d after", before.HeapReleased, after.HeapReleased)
	}
	select {
	case <-reclaimed:
		t.Fatal("two reclaims: the churn, or each burst of the wave, triggered one")
	default:
	}
}
