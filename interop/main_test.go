package interop_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when goroutines outlive the tests: every peer,
// tap and connection a test starts must be gone once it ends. The
// Chromium the tests share runs from before the first test to after the
// last (a run of tests without a browser pays its start, under 3 s).
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	startSharedBrowser()
	code := m.Run()
	stopSharedBrowser()
	if code == 0 {
		if leaked := leakedGoroutines(before); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the interop tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits (bounded) for the goroutine count to come back to
// what it was and returns the stacks of the extra ones if it does not.
func leakedGoroutines(before int) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if runtime.NumGoroutine() <= before {
			return ""
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the runtime: there is no event to wait on
	}
	buf := make([]byte, 1<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	var extra []string
	for _, s := range stacks {
		if !strings.Contains(s, "testing.(*M).Run") && !strings.Contains(s, "main.main") {
			extra = append(extra, s)
		}
	}
	return strings.Join(extra, "\n\n")
}
