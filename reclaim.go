package rally

import (
	"runtime/debug"
	"sync/atomic"
	"time"
)

// After a mass disconnect (many connections closing at once: a deploy, a
// network cut, the end of a load test), the memory those connections held
// is garbage, but the Go runtime collects it only when the program
// allocates again, which a server left with few connections may not do for
// minutes: its resident memory stays at the peak. So when at least
// reclaimMin connections have ended and at most half of the peak is left,
// rally collects the garbage and gives the freed memory back to the system
// (debug.FreeOSMemory), once per wave: when no connection has ended for
// reclaimDelay (at most reclaimWait after the wave began). Ordinary churn
// (connections opening as others close) never triggers it.

const (
	reclaimMin   = 1000
	reclaimDelay = time.Second
	reclaimWait  = 10 * time.Second
)

var reclaim struct {
	live, peak atomic.Int64
	pending    atomic.Bool
	lastEnd    atomic.Int64 // when a connection last ended (unix ns)
}

// testHookReclaimed, when a test sets it, is called after each reclaim.
var testHookReclaimed atomic.Pointer[func()]

// reclaimOpened counts a connection opened (newConn).
func reclaimOpened() {
	n := reclaim.live.Add(1)
	for {
		p := reclaim.peak.Load()
		if n <= p || reclaim.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// reclaimClosed counts a connection ended (finish) and schedules the
// collection after a mass disconnect.
func reclaimClosed() {
	n := reclaim.live.Add(-1)
	p := reclaim.peak.Load()
	if p-n < reclaimMin || n > p/2 {
		return
	}
	now := time.Now()
	reclaim.lastEnd.Store(now.UnixNano())
	if reclaim.pending.CompareAndSwap(false, true) {
		reclaimAfter(reclaimDelay, now)
	}
}

// reclaimAfter gives the memory back after d, or later if connections
// still end (a wave that began at start).
func reclaimAfter(d time.Duration, start time.Time) {
	time.AfterFunc(d, func() {
		quiet := time.Since(time.Unix(0, reclaim.lastEnd.Load()))
		if quiet < reclaimDelay && time.Since(start) < reclaimWait {
			reclaimAfter(reclaimDelay-quiet, start) // the wave goes on
			return
		}
		debug.FreeOSMemory()
		reclaim.peak.Store(reclaim.live.Load())
		reclaim.pending.Store(false)
		if h := testHookReclaimed.Load(); h != nil {
			(*h)()
		}
	})
}
