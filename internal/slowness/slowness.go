// Package slowness scales the bounds tests put on a wait by how busy the
// machine is, measured, so that a wait for an event that will come is not
// cut short on a loaded machine. It is for tests' generous bounds (a read
// that must see a frame, a callback that must run), never for a time a
// test asserts.
package slowness

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxFactor caps the scaling, so that a test that waits for an event that
// never comes still fails in bounded time.
const maxFactor = 20

// seen is the highest factor measured so far in this process, and when
// it was last measured.
var seen struct {
	sync.Mutex
	at     time.Time
	factor float64
}

// Factor returns how many times slower than an idle machine this one runs
// now, at least 1: the runnable threads per core (the one-minute load
// average over the cores Go may use). It is measured again at most once a
// second, and the highest value seen in the process is kept: a test binary
// that started on a quiet machine runs its later tests at the load that
// came meanwhile, and a short lull does not cut a wait short. It is 1
// where the load average cannot be read.
func Factor() float64 {
	seen.Lock()
	defer seen.Unlock()
	if now := time.Now(); seen.at.IsZero() || now.Sub(seen.at) >= time.Second {
		seen.at = now
		seen.factor = max(seen.factor, measure())
	}
	return seen.factor
}

// Scale returns d times Factor: a bound that is d on an idle machine.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Factor())
}

func measure() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 1
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 1
	}
	return min(max(1, load/float64(runtime.GOMAXPROCS(0))), maxFactor)
}
