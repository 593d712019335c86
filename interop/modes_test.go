package interop_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// serverMode is an engine a rally server runs its WebSocket connections
// on: a goroutine per connection, or rally's event loops
// (rally.Server.EventLoop, `rally serve --event-loop`; Linux, elsewhere
// the same as goroutines). What a real peer sees must not depend on it.
type serverMode struct {
	name      string
	eventLoop bool
	// leaks is set in event-loop mode: the servers started in the mode
	// report their connections to it (see inModes).
	leaks *leakCheck
}

// serverModes are the modes every test with rally as the server runs in.
var serverModes = []serverMode{{name: "goroutines"}, {name: "event-loop", eventLoop: true}}

// inModes runs test once per server mode, as subtests named after the
// mode ("goroutines", "event-loop"). In event-loop mode it checks, once
// the test and its cleanups are done (its peers stopped, its servers
// closed), that every connection the test's servers opened was reported
// closed (their Close callbacks, or `rally serve` having shut down), and
// that the process has no more goroutines and open descriptors than
// before the test.
func inModes(t *testing.T, test func(t *testing.T, mode serverMode)) {
	for _, mode := range serverModes {
		t.Run(mode.name, func(t *testing.T) {
			if mode.eventLoop {
				mode.leaks = startLeakCheck(t)
			}
			test(t, mode)
		})
	}
}

// serveRally starts ws, in mode, behind an httptest server on loopback
// serving h (ws itself when h is nil), closed when t ends.
func serveRally(t testing.TB, mode serverMode, ws *rally.Server, h http.Handler) *httptest.Server {
	t.Helper()
	ws.EventLoop = mode.eventLoop
	if l := mode.leaks; l != nil {
		l.watch(ws)
	}
	if h == nil {
		h = ws
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// leakCheck counts what a test in event-loop mode holds: the connections
// its servers have open, and, before it started, the process's goroutines
// and descriptors.
type leakCheck struct {
	goroutines, fds int
	fdsBefore       map[string]string

	mu      sync.Mutex
	open    int           // connections opened and not yet reported closed
	changed chan struct{} // signalled when a connection is reported closed
}

// startLeakCheck counts the goroutines and descriptors now and checks
// them again when t ends, after every other cleanup of t (nil where
// there are no event loops).
func startLeakCheck(t *testing.T) *leakCheck {
	if runtime.GOOS != "linux" {
		return nil // no event loops, and no /proc/self/fd
	}
	l := &leakCheck{goroutines: runtime.NumGoroutine(), fds: openFDs(t), fdsBefore: fdTargets(), changed: make(chan struct{}, 1)}
	t.Cleanup(func() { l.check(t) })
	return l
}

// watch counts ws's connections from its Open and Close callbacks (kept,
// and called first).
func (l *leakCheck) watch(ws *rally.Server) {
	open, closed := ws.Open, ws.Close
	ws.Open = func(c *rally.Conn) {
		l.mu.Lock()
		l.open++
		l.mu.Unlock()
		if open != nil {
			open(c)
		}
	}
	ws.Close = func(c *rally.Conn, ce *rally.CloseError) {
		if closed != nil {
			closed(c, ce)
		}
		l.mu.Lock()
		l.open--
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// leakWait bounds the wait for the servers' Close callbacks and for the
// goroutines and descriptors to go.
const leakWait = 10 * time.Second

func (l *leakCheck) check(t *testing.T) {
	if t.Failed() {
		return // the test's own failure says more
	}
	deadline := time.After(leakWait)
	for {
		l.mu.Lock()
		open := l.open
		l.mu.Unlock()
		if open <= 0 {
			break
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("after the test: the server reported %d connections still open", open)
		}
	}
	// The connections are reported closed, their sockets closed before
	// (the loop closes a socket, then calls Close). A loop's goroutine and
	// epoll descriptors go once it has no connection left, and peers'
	// goroutines and pipes as their processes are reaped: nothing signals
	// those ends, so poll, bounded. The collections free what only a
	// finalizer closes: the pipes the runtime keeps in a pool for splice
	// (io.Copy between two TCP connections, as the proxies do).
	end := time.Now().Add(leakWait)
	for {
		runtime.GC()
		g, fds := runtime.NumGoroutine(), openFDs(t)
		if g <= l.goroutines && fds <= l.fds {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("after the test's peers and servers closed: %d goroutines (%d before), %d open descriptors (%d before); new descriptors:\n%s\ngoroutines:\n%s",
				g, l.goroutines, fds, l.fds, newFDs(l.fdsBefore), goroutineStacks())
		}
		time.Sleep(10 * time.Millisecond) // polling the runtime and /proc: there is no event to wait on
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting open descriptors: %v", err)
	}
	return len(ents)
}

// fdTargets maps the process's open descriptors to what they point to.
func fdTargets() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		m[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
	}
	return m
}

// newFDs lists the descriptors open now that were not, or pointed
// elsewhere, in before; for a pipe, the processes holding it too.
func newFDs(before map[string]string) string {
	var b strings.Builder
	for fd, target := range fdTargets() {
		if before[fd] == target {
			continue
		}
		b.WriteString(fd + " -> " + target)
		if strings.HasPrefix(target, "pipe:") {
			b.WriteString(" held by" + pipeHolders(target))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// pipeHolders names the processes (pid, command, descriptor) holding
// the pipe named target.
func pipeHolders(target string) string {
	var b strings.Builder
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if !p.IsDir() || p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, f := range fds {
			if t, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + f.Name()); t == target {
				comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm")
				b.WriteString(" " + p.Name() + "/" + strings.TrimSpace(string(comm)) + "/fd" + f.Name())
			}
		}
	}
	return b.String()
}

// goroutineStacks returns the stacks of every goroutine.
func goroutineStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
