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
// rally runs one garbage collection, reclaimDelay after the first of those
// ends (so that one collection covers a whole wave); the runtime's
// scavenger then gives the freed pages back to the system within seconds.
// Ordinary churn (connections opening as others close) never triggers it.

const (
	reclaimMin   = 1000
	reclaimDelay = time.Second
)

var reclaim struct {
	live, peak atomic.Int64
	pending    atomic.Bool
}

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
	if p-n < reclaimMin || n > p/2 || !reclaim.pending.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(reclaimDelay, func() {
		debug.FreeOSMemory()
		reclaim.peak.Store(reclaim.live.Load())
		reclaim.pending.Store(false)
	})
}
