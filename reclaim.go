package rally

import (
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Connections come and go in waves: a connect storm after a deploy, a mass
// disconnect when a network link drops. After either, the process keeps
// far more memory than its connections use. After a connect storm the
// handshakes' garbage (net/http's reader and writer of each hijacked
// connection, the request: about ten times what an idle connection keeps)
// has grown the heap to the collector's goal, twice what is live; after a
// disconnect the connections' memory is garbage, which the Go runtime
// collects only when the program allocates again, maybe minutes later.
// Either way the pages stay resident. So after a wave (at least reclaimMin
// connections, and the count doubled since the last reclaim, or halved
// from its peak) rally collects the garbage and gives the freed memory
// back to the system (debug.FreeOSMemory), once per wave: when no
// connection has opened or ended for reclaimDelay (at most reclaimWait
// after the wave began). Ordinary churn (connections opening as others
// end) never triggers it, and a steady growth does only each time the
// count doubles.
//
// It is off unless the program asks for it (ReturnMemoryAfterWaves):
// debug.FreeOSMemory is a forced collection, process-wide, and a library
// must not stall a program's other goroutines on its own.

const (
	reclaimMin   = 1000
	reclaimDelay = time.Second
	reclaimWait  = 10 * time.Second
)

var reclaim struct {
	on        atomic.Bool  // ReturnMemoryAfterWaves(true)
	live      atomic.Int64 // connections opened and not ended
	base      atomic.Int64 // live at the last reclaim
	peak      atomic.Int64 // the most live since the last reclaim
	pending   atomic.Bool
	lastEvent atomic.Int64 // when a connection of the wave last opened or ended (unix ns)
}

// ReturnMemoryAfterWaves turns on (or off again) the return of memory to
// the system after a wave of connections: once at least 1,000 connections
// have opened (their number doubled) or ended (halved from its peak) and
// none has opened or ended for a second (at most 10 s after the wave
// began), rally calls debug.FreeOSMemory once, so that the memory of the
// handshakes or of the connections gone leaves the process's RSS. That is
// a forced garbage collection of the whole process, whose marking stalls
// busy goroutines (tens of milliseconds with a heap of 1 GiB), so it is
// off by default: a server whose memory is mostly its connections may
// want it (rally serve turns it on); a client, or a program with a large
// heap of its own, should not. Connections of every Server, Accept and
// Dial count. Safe for concurrent use.
func ReturnMemoryAfterWaves(on bool) {
	if on {
		n := reclaim.live.Load()
		reclaim.base.Store(n)
		reclaim.peak.Store(n)
	}
	reclaim.on.Store(on)
}

// testHookReclaimed, when a test sets it, is called after each reclaim.
var testHookReclaimed atomic.Pointer[func()]

// reclaimOpened counts a connection opened (newConn) and schedules the
// reclaim after a connect storm.
func reclaimOpened() {
	n := reclaim.live.Add(1)
	for {
		p := reclaim.peak.Load()
		if n <= p || reclaim.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if b := reclaim.base.Load(); n-b >= reclaimMin && n >= 2*b {
		reclaimWave()
	}
}

// reclaimClosed counts a connection ended (finish) and schedules the
// reclaim after a mass disconnect.
func reclaimClosed() {
	n := reclaim.live.Add(-1)
	if p := reclaim.peak.Load(); p-n >= reclaimMin && n <= p/2 {
		reclaimWave()
	}
}

// reclaimWave notes an event of a wave, and schedules the reclaim if none
// is.
func reclaimWave() {
	if !reclaim.on.Load() {
		return
	}
	now := time.Now()
	reclaim.lastEvent.Store(now.UnixNano())
	if reclaim.pending.CompareAndSwap(false, true) {
		reclaimAfter(reclaimDelay, now)
	}
}

// reclaimAfter gives the memory back after d, or later if the wave that
// began at start goes on.
func reclaimAfter(d time.Duration, start time.Time) {
	time.AfterFunc(d, func() {
		quiet := time.Since(time.Unix(0, reclaim.lastEvent.Load()))
		if quiet < reclaimDelay && time.Since(start) < reclaimWait {
			reclaimAfter(reclaimDelay-quiet, start)
			return
		}
		if reclaim.on.Load() {
			debug.FreeOSMemory()
		}
		n := reclaim.live.Load()
		reclaim.base.Store(n)
		reclaim.peak.Store(n)
		reclaim.pending.Store(false)
		if h := testHookReclaimed.Load(); h != nil {
			(*h)()
		}
	})
}
