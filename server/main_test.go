package server

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain runs the tests and then fails the run if goroutines they
// started are still alive after a bounded wind-down (close handshakes,
// NATS shutdown).
func TestMain(m *testing.M) {
	before := map[string]bool{}
	for _, g := range stacks() {
		before[firstLine(g)] = true
	}
	code := m.Run()
	if code == 0 {
		if left := leftover(before, 10*time.Second); left != "" {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines still alive after the tests:\n\n%s\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

func leftover(before map[string]bool, wait time.Duration) string {
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, g := range stacks() {
			if !before[firstLine(g)] && !strings.Contains(g, "os/signal.") && !strings.Contains(g, "testing.(*M).startAlarm") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stacks returns the stack of every goroutine but the caller's.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := strings.Split(string(buf), "\n\n")
	return all[1:]
}

// firstLine is "goroutine N [state]:", whose N identifies the goroutine.
func firstLine(g string) string {
	line, _, _ := strings.Cut(g, "\n")
	id, _, _ := strings.Cut(line, " [")
	return id
}
