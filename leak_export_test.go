package rally

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// OpenFDs counts the process's open file descriptors (the test is skipped
// where /proc/self/fd does not exist).
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// WaitNothingLeft waits, up to within, until the process holds no more
// descriptors and goroutines than fdsBefore and gBefore, and fails the
// test with every goroutine's stack if it still does then. Nothing
// signals the end of a goroutine or of a descriptor: it polls.
func WaitNothingLeft(t testing.TB, fdsBefore, gBefore int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		fds, gs := OpenFDs(t), runtime.NumGoroutine()
		if fds <= fdsBefore && gs <= gBefore {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after every connection ended: %d descriptors open (%d before), %d goroutines (%d before):\n%s",
				fds, fdsBefore, gs, gBefore, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}
