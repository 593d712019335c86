package server

import (
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// A server forces no collection of the process unless
// Protection.ReturnMemory asks for it: a connect wave and a mass
// disconnect (what the memory watch answers with runtime.GC and
// debug.FreeOSMemory when asked) leave the runtime's count of forced
// collections as it was, and rally_memory_returns_total at 0. With the
// option, the wave of new connections is answered once when it is over
// (connect_wave), and the disconnect by a collection and the return to
// the system, once more after the interval if the connections are still
// going (a loaded machine): two to four forced collections.
func TestAServerForcesCollectionsOnlyWithReturnMemory(t *testing.T) {
	for _, on := range []bool{false, true} {
		forced, waves := forcedAcrossMassDisconnect(t, on)
		switch {
		case !on && forced != 0:
			t.Errorf("ReturnMemory off: %d forced collections, want 0", forced)
		case !on && waves != 0:
			t.Errorf("ReturnMemory off: %v returns after the connect wave, want 0", waves)
		case on && (forced == 0 || forced > 4):
			t.Errorf("ReturnMemory on: %d forced collections, want 1 to 4", forced)
		case on && waves != 1:
			t.Errorf("ReturnMemory on: %v returns after the connect wave, want 1", waves)
		}
	}
}

// forcedAcrossMassDisconnect opens twice massDisconnect connections to a
// server, waits for the return of memory that answers that wave (or,
// without returnMemory, as long as one would take), closes them and counts
// the collections forced until its memory watch has seen them gone and
// turned twice more. It returns that count, and the returns counted after
// connect waves by then.
func forcedAcrossMassDisconnect(t *testing.T, returnMemory bool) (forced uint64, waves float64) {
	turns := make(chan *Server, 16)
	hook := func(s *Server) {
		select {
		case turns <- s:
		default:
		}
	}
	testHookMemoryWatched.Store(&hook)
	defer testHookMemoryWatched.Store(nil)
	s := serve(t, Config{Protection: Protection{ReturnMemory: returnMemory}})
	// next waits for a turn of s's watch that ends after the call: turns ended earlier
	// wait in the channel's buffer (a busy machine makes many while the
	// connections open) and would let the test run ahead of the watch.
	next := func() {
		for {
			select {
			case <-turns:
				continue
			default:
			}
			break
		}
		for <-turns != s.Server { // another test's server
		}
	}
	// A turn of the watch before the connections, so that they count as
	// a disconnect from a peak.
	next()
	var peers []*rawpeer.Peer
	for range 2 * massDisconnect {
		p, _, err := rawpeer.DialClient(strings.TrimPrefix(s.http, "http://"), "/echo", nil, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, p)
	}
	for s.conns.Load() < 2*massDisconnect {
		next()
	}
	// The watch sees the wave over once the count held for
	// connectWaveSteady, a few turns.
	wave := func() float64 { return metric(t, s.http, `rally_memory_returns_total{after="connect_wave"}`) }
	if returnMemory {
		for turns := 0; wave() < 1; turns++ {
			if turns == 4000 {
				t.Fatal("no return of memory after the wave of connections")
			}
			next()
		}
	} else {
		start := time.Now()
		for time.Since(start) < 3*connectWaveSteady {
			next()
		}
	}
	// The watch sees the peak before any goes.
	next()
	before := forcedCount()
	for _, p := range peers {
		p.Close()
	}
	for s.conns.Load()+s.httpConns.Load() > 0 {
		next()
	}
	next()
	next()
	return forcedCount() - before, wave()
}

func forcedCount() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}
