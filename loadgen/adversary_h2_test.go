package loadgen_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/h2env"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

// The servers of these tests accept WebSockets over HTTP/2 only when the
// test binary starts with GODEBUG=http2xconnect=1: it re-executes itself
// with it, as `rally serve` does.
func init() { h2env.Reexec("") }

// waitFor polls cond every 20 ms until it holds or a minute (a generous
// bound for a busy machine) has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("still waiting after a minute for %s", what)
		}
	}
}

// heldNow returns the process's goroutines and the heap and stack memory
// in use, after a collection.
func heldNow() (goroutines int, bytes uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapInuse + ms.StackInuse
}

// An idle WebSocket over HTTP/2 served by rally serve is one goroutine on
// the server (net/http's handler goroutine, which reads the stream), not
// one more to pump the stream's body into a buffer of its own. The
// figure per stream (goroutines and memory, the attacker's side included)
// is logged: it is what rally.MemoryStreams is charged per stream.
func TestAnIdleHTTP2WebSocketCostsRallyServeOneGoroutine(t *testing.T) {
	addr := serveRally(t, server.Config{H2C: true, HandshakeRate: -1, Logger: slog.New(slog.DiscardHandler)})
	g0, b0 := heldNow()
	const conns, streams = 4, 100
	o, err := loadgen.OpenH2NonReaders("ws://"+addr+"/ws", conns, streams, "")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	waitFor(t, "every stream accepted", func() bool {
		a, r, c := o.Counts()
		if r+c > 0 {
			t.Fatalf("%d streams refused and %d reset of %d: %v", r, c, conns*streams, o.Answers())
		}
		return a == conns*streams
	})
	// The handlers start serving right after their 200: wait until the
	// count stops rising.
	g1, b1 := heldNow()
	for g, _ := heldNow(); g != g1; g, _ = heldNow() {
		g1 = g
		time.Sleep(100 * time.Millisecond)
	}
	g1, b1 = heldNow()
	n := float64(conns * streams)
	t.Logf("%d idle streams on %d connections: %.2f goroutines and %.1f KiB of heap and stacks per stream (both sides)",
		conns*streams, conns, float64(g1-g0)/n, float64(int64(b1)-int64(b0))/n/1024)
	// One per stream, plus each connection's reader and writer on the
	// server and its reader here.
	if g1-g0 > conns*streams+3*conns+10 {
		t.Errorf("%d goroutines more for %d idle streams on %d connections, want one per stream and a few per connection", g1-g0, conns*streams, conns)
	}
}

// A WebSocket over HTTP/2 that never reads (its window is 0) while its
// topic is flooded is let go like a connection that never reads: the
// write stall cuts it, the stream is reset (RST_STREAM), and the server
// holds no HTTP/2 connection and no budget charge for it afterwards.
func TestAnHTTP2WebSocketThatNeverReadsIsResetAndLeavesNothingCharged(t *testing.T) {
	addr := serveRally(t, server.Config{H2C: true, HandshakeRate: -1, WriteStallTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	const streams = 20
	o, err := loadgen.OpenH2NonReaders("ws://"+addr+"/ws", 1, streams, "flood")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		body := strings.Repeat("x", 1000)
		for {
			select {
			case <-done:
				return
			default:
			}
			if resp, err := http.Post("http://"+addr+"/publish/flood", "text/plain", strings.NewReader(body)); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	waitFor(t, "every stream reset", func() bool {
		_, r, c := o.Counts()
		if r > 0 {
			t.Fatalf("%d streams refused: %v", r, o.Answers())
		}
		return c == streams
	})
	waitFor(t, "no h2c connection and nothing charged", func() bool {
		m := scrapeMetrics(t, "http://"+addr+"/metrics")
		return strings.Contains(m, "\nrally_connections_by_protocol{protocol=\"h2c\"} 0\n") && chargedBytes(m) == 0
	})
	if a := o.Answers(); a["h2 reset (INTERNAL_ERROR)"] != streams {
		t.Errorf("answers %v, want every stream reset with INTERNAL_ERROR", a)
	}
}

func scrapeMetrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// chargedBytes sums rally_memory_budget_used_bytes over its categories.
func chargedBytes(metrics string) int64 {
	var sum int64
	for line := range strings.Lines(metrics) {
		if !strings.HasPrefix(line, "rally_memory_budget_used_bytes") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += int64(v)
		}
	}
	return sum
}

// A stream refused with 503 (the memory budget is spent) by a client
// whose window is 0 cannot take the refusal's body: the server resets it
// instead of keeping its handler goroutine waiting on the window for as
// long as the client keeps the connection.
func TestAnHTTP2StreamRefusedWith503ThatCannotTakeTheBodyIsReset(t *testing.T) {
	// Room for the connection (112 KiB: see serveH2C) and two streams
	// (32 KiB each), within the 75% that what connections hold may take
	// (192 KiB), not more.
	budget := rally.NewMemoryBudget(256 << 10)
	ln := serveH2C(t, &rally.Server{Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}}})
	g0, _ := heldNow()
	const streams = 20
	o, err := loadgen.OpenH2NonReaders("ws://"+ln.Addr().String()+"/ws", 1, streams, "")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	waitFor(t, "an answer to every stream", func() bool {
		a, r, _ := o.Counts()
		return a+r == streams
	})
	if a, r, _ := o.Counts(); a != 2 || r != streams-2 {
		t.Fatalf("%d accepted, %d refused of %d: want 2 accepted (%v)", a, r, streams, o.Answers())
	}
	waitFor(t, "every refused stream reset", func() bool {
		_, _, c := o.Counts()
		return c == streams-2
	})
	// What is left: the two accepted streams' handlers, the connection's
	// goroutines on both sides.
	waitFor(t, "the refused streams' handlers to return", func() bool {
		g, _ := heldNow()
		return g-g0 <= 2+4
	})
}

// A WebSocket over HTTP/2 that a handler reads with Conn.Read (not a
// Server's) reads through a pump, whose goroutine and buffer are charged
// on top of the stream's; the whole charge goes back when the client
// goes.
func TestAnHTTP2WebSocketReadWithReadIsChargedItsPumpUntilItEnds(t *testing.T) {
	budget := rally.NewMemoryBudget(64 << 20)
	used := func() int64 {
		for _, st := range budget.Stats() {
			if st.Category == rally.MemoryStreams {
				return st.Used
			}
		}
		return -1
	}
	ln := serveH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := rally.Accept(w, r, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}})
		if err != nil {
			return
		}
		for {
			if _, _, err := c.Read(r.Context()); err != nil {
				c.CloseNow()
				return
			}
		}
	}))
	o, err := loadgen.OpenH2NonReaders("ws://"+ln.Addr().String()+"/ws", 1, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	// The connection (112 KiB: see serveH2C), the stream (32 KiB) and
	// its pump (24 KiB).
	waitFor(t, "the stream and its pump charged", func() bool { return used() == 168<<10 })
	o.Close()
	waitFor(t, "the charge back to zero", func() bool { return used() == 0 })
}

// serveH2C serves h over HTTP/1.1 and h2c on a loopback listener until
// the test ends, with frames of 16 KiB and windows of 64 KiB: an HTTP/2
// connection carrying WebSockets is charged 112 KiB (32 KiB and those).
func serveH2C(t *testing.T, h http.Handler) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Protocols: p, Handler: h, HTTP2: &http.HTTP2Config{MaxReadFrameSize: 16 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln
}
