package server

import (
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// A server forces no collection of the process unless
// Protection.ReturnMemory asks for it: a mass disconnect (what the memory
// watch answers with runtime.GC and debug.FreeOSMemory when asked) leaves
// the runtime's count of forced collections as it was. With the option,
// the same disconnect is answered, at most twice (a collection, then the
// return to the system).
func TestAServerForcesCollectionsOnlyWithReturnMemory(t *testing.T) {
	for _, on := range []bool{false, true} {
		forced := forcedAcrossMassDisconnect(t, on)
		switch {
		case !on && forced != 0:
			t.Errorf("ReturnMemory off: %d forced collections, want 0", forced)
		case on && (forced == 0 || forced > 2):
			t.Errorf("ReturnMemory on: %d forced collections, want 1 or 2", forced)
		}
	}
}

// forcedAcrossMassDisconnect opens and closes twice massDisconnect
// connections to a server and counts the collections forced until its
// memory watch has seen them gone and turned twice more.
func forcedAcrossMassDisconnect(t *testing.T, returnMemory bool) uint64 {
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
	return forcedCount() - before
}

func forcedCount() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}
