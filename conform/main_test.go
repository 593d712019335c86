package conform

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
)

// TestMain fails the run if goroutines of the suite outlive the tests:
// every reader, runner and test peer must have ended.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func leakedGoroutines() string {
	var leaked []string
	// Goroutines that were told to stop may need a moment to be scheduled.
	for deadline := time.Now().Add(slowness.Scale(5 * time.Second)); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "leakedGoroutines") || !strings.Contains(g, "rallyws/rally/") {
				continue
			}
			leaked = append(leaked, g)
		}
		if len(leaked) == 0 {
			return ""
		}
	}
	return strings.Join(leaked, "\n\n")
}
