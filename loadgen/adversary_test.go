package loadgen_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

func TestAdversaryDrawsTheSameClientsFromTheSameSeed(t *testing.T) {
	a, b := loadgen.DrawAdversary(7, 200), loadgen.DrawAdversary(7, 200)
	if !slices.Equal(a, b) {
		t.Fatal("seed 7 drew two different sets of clients")
	}
	if slices.Equal(a, loadgen.DrawAdversary(8, 200)) {
		t.Error("seeds 7 and 8 drew the same clients")
	}
	seen := map[string]bool{}
	for _, behaviour := range a {
		seen[behaviour] = true
	}
	if len(seen) != 14 {
		t.Errorf("200 clients of seed 7 picked %d behaviours, want all 14: %v", len(seen), seen)
	}
}

// A short seeded adversary against an in-process `rally serve` (h2c on,
// history on the flooded topic), in both engines: once every client has left, the server holds no connection and
// nothing charged to its memory budget, and it still answers. Only these
// functional invariants are asserted; the figures (probe p99, the fast
// subscriber's rates, memory) are logged, not judged, as the machine
// running the test may be busy.
func TestAdversaryLeavesRallyServeHoldingNoConnectionAndNoCharge(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of attack per engine; runs without -short")
	}
	for _, eventLoop := range []bool{false, true} {
		name := "goroutines"
		if eventLoop {
			name = "event-loop"
		}
		t.Run(name, func(t *testing.T) {
			addr := serveRally(t, server.Config{EventLoop: eventLoop, Logger: slog.New(slog.DiscardHandler),
				H2C: true, History: server.HistoryConfig{Topics: []string{"adversary"}}})
			res, err := loadgen.RunHostile(context.Background(), loadgen.HostileConfig{
				Scenario: "adversary", URL: "ws://" + addr + "/ws", Seed: 3, Conns: 40,
				// 3 s on an idle machine: on a busy one the pair and
				// the clients need longer to connect at all.
				Duration: slowness.Scale(3 * time.Second), Settle: time.Millisecond,
				MaxRSS: 1 << 40, MaxProbeP99: time.Hour,
			})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			res.WriteSummary(&out)
			t.Logf("%s", out.String())
			drawn := int64(0)
			for _, n := range res.Behaviours {
				drawn += n
			}
			if res.Seed != 3 || drawn != 40 {
				t.Errorf("seed %d, %d clients drawn (%v); want seed 3 and 40 clients", res.Seed, drawn, res.Behaviours)
			}
			if res.ConnsAfter != 0 || res.ChargedAfter != 0 {
				t.Errorf("after every client left the server held %d connections and %d bytes charged to its budget, want none", res.ConnsAfter, res.ChargedAfter)
			}
			if res.Probes == 0 || res.ProbeFailures == res.Probes {
				t.Errorf("%d probes, %d failed: the server did not answer a fresh client during the attack", res.Probes, res.ProbeFailures)
			}
			// The seed draws the behaviours over HTTP/2 and with history
			// positions (what the server answered them is logged above).
			for _, b := range []string{"h2-non-reader", "h2-partial", "reconnect-old"} {
				if res.Behaviours[b] == 0 {
					t.Errorf("seed 3 drew no %s: %v", b, res.Behaviours)
				}
			}
			if res.Published == 0 || res.FastSoloRate == 0 {
				t.Errorf("published %d, fast subscriber %.0f/s alone: the well-behaved pair did not run", res.Published, res.FastSoloRate)
			}
			if res.Behaviours["subscriber"] > 0 && res.FastPeersRate == 0 {
				t.Errorf("seed 3 drew %d subscribers, but the fast subscriber had no rate beside them before the attack", res.Behaviours["subscriber"])
			}
		})
	}
}

// serveRally runs a `rally serve` server in this process on a loopback
// port until the test ends, and returns its address.
func serveRally(t *testing.T, cfg server.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// The fast subscriber of the adversary on a topic with history, closed
// with 4010 when it falls behind (here: a proxy holds back what the
// server sends it until its queue overflows), connects again, subscribes
// from the last position it saw and is told the missed messages follow:
// every message published after its first ack is counted once, before
// and after the 4010.
func TestTheFastSubscriberClosedWith4010ReconnectsFromItsLastPositionAndKeepsCounting(t *testing.T) {
	addr := serveRally(t, server.Config{Logger: slog.New(slog.DiscardHandler),
		History: server.HistoryConfig{Topics: []string{"adversary"}, Size: 1000},
		// Little room for what waits to be sent to a subscriber, so
		// that a few dozen messages overflow it, then 500 more waiting
		// in the server (half the history: it lags, then is closed with
		// 4010 while it can still recover); no other way to be let go
		// (no slow-subscriber cut, no write stall), and time for the
		// close handshake on a busy machine.
		BufferLimit: 16 << 10, SubscriberSendBuffer: 4 << 10,
		SlowSubscriberTimeout: -1, WriteStallTimeout: -1, ShutdownTimeout: time.Minute})
	proxy := startHoldingProxy(t, addr)
	f, err := loadgen.StartFastSubscriber("ws://" + proxy.addr + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	waitFor(t, "the ack of the subscribe, with the topic's position", func() bool {
		return f.Answers()["fast subscriber: first position"] == 1
	})

	published := int64(0)
	publish := func(n int) {
		t.Helper()
		for range n {
			resp, err := http.Post("http://"+addr+"/publish/adversary", "text/plain", strings.NewReader(strings.Repeat("x", 1000)))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("publish: %s", resp.Status)
			}
			published++
		}
	}
	publish(10)
	waitFor(t, "10 deliveries", func() bool { return f.Delivered() >= 10 })

	proxy.hold()
	for metricValue(scrapeMetrics(t, "http://"+addr+"/metrics"), `rally_drops_total{reason="buffer_limit"}`) == 0 {
		if published > 100000 {
			t.Fatalf("%d messages published while the subscriber read none, and none dropped for it", published)
		}
		publish(10)
	}
	proxy.release()
	waitFor(t, "a recovery", func() bool {
		a := f.Answers()
		for k := range a {
			if strings.HasPrefix(k, "fast subscriber: not recovered") || strings.HasPrefix(k, "fast subscriber: reconnect failed") {
				t.Fatalf("answers %v, want the subscriber recovered", a)
			}
		}
		return a["fast subscriber: recovered"] == 1
	})
	publish(10)
	waitFor(t, "every message published counted", func() bool { return f.Delivered() >= published })
	if n := f.Delivered(); n != published {
		t.Errorf("%d deliveries of %d messages published, want each counted once", n, published)
	}
	a := f.Answers()
	want := map[string]int64{"fast subscriber: first position": 1, "fast subscriber: close 4010": 1,
		"fast subscriber: reconnected": 1, "fast subscriber: recovered": 1}
	if !maps.Equal(a, want) {
		t.Errorf("answers %v, want %v", a, want)
	}
}

// metricValue returns the value of the sample named name (labels
// included, as the metrics page writes them), 0 if there is none.
func metricValue(metrics, name string) float64 {
	for line := range strings.Lines(metrics) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// The fast subscriber reads the type and position of each frame by
// scanning it rather than decoding it, which must give what decoding
// would whatever the members hold and in whatever order they come, and
// costs no allocation.
func TestTheFastSubscriberReadsAFramesPositionAsDecodingWould(t *testing.T) {
	for _, tc := range []struct {
		frame, typ, epoch string
		offset            uint64
		positioned        bool
	}{
		// What rally serve sends on a topic with history, and without.
		{`{"type":"message","topic":"adversary","offset":58,"epoch":"k3j9x2","data":"hi"}`, `"message"`, `"k3j9x2"`, 58, true},
		{`{"type":"message","topic":"adversary","data":{"offset":1,"epoch":"no"}}`, `"message"`, ``, 0, false},
		{`{"type":"ack","id":1,"topic":"t","offset":57,"epoch":"k3j9x2","recovered":false,"reason":"expired"}`, `"ack"`, `"k3j9x2"`, 57, true},
		// Members that look like the position inside the data, before
		// the position: strings with escaped quotes, nested values.
		{`{"data":{"offset":1,"epoch":"no","s":"\"}]","a":[{"offset":2}]},"type":"message","offset":7,"epoch":"e"}`, `"message"`, `"e"`, 7, true},
		{`{"data":"\\","type":"message","offset":7,"epoch":"e"}`, `"message"`, `"e"`, 7, true},
		{`{"data":"\\\"offset\":1","type":"message","offset":7,"epoch":"e"}`, `"message"`, `"e"`, 7, true},
		{" { \"type\" : \"message\" ,\n\t\"offset\" : 3 , \"epoch\" : \"e\\\"q\" } ", `"message"`, `"e\"q"`, 3, true},
		// The largest offset, and values that are not one.
		{`{"type":"message","offset":18446744073709551615,"epoch":"e"}`, `"message"`, `"e"`, 18446744073709551615, true},
		{`{"type":"message","offset":18446744073709551616,"epoch":"e"}`, `"message"`, `"e"`, 0, false},
		{`{"type":"message","offset":-1,"epoch":"e"}`, `"message"`, `"e"`, 0, false},
		{`{"type":"message","offset":5.5,"epoch":"e"}`, `"message"`, `"e"`, 0, false},
		{`{"type":"message","offset":"5","epoch":"e"}`, `"message"`, `"e"`, 0, false},
		{`{"type":"message","offset":5,"epoch":5}`, `"message"`, ``, 5, false},
		// Not an object, or cut short.
		{`["type","message"]`, ``, ``, 0, false},
		{`{"type":"message","offset":5,"epoch":"e`, `"message"`, ``, 5, false},
		{``, ``, ``, 0, false},
	} {
		typ, offset, epoch, positioned := loadgen.ScanDelivery([]byte(tc.frame))
		if string(typ) != tc.typ || string(epoch) != tc.epoch || positioned != tc.positioned || positioned && offset != tc.offset {
			t.Errorf("%s: type %s, offset %d, epoch %s, positioned %v; want %s, %d, %s, %v",
				tc.frame, typ, offset, epoch, positioned, tc.typ, tc.offset, tc.epoch, tc.positioned)
		}
	}
	frame := []byte(`{"type":"message","topic":"adversary","offset":58,"epoch":"k3j9x2","data":"` + strings.Repeat("x", 1000) + `"}`)
	if n := testing.AllocsPerRun(100, func() { loadgen.ScanDelivery(frame) }); n != 0 {
		t.Errorf("scanning a delivery allocated %.0f times, want 0", n)
	}
}

// holdingProxy forwards TCP connections to a server. What the server
// sends on the first one can be held back and let go again: a client
// that stops reading for a while, whatever its own code does.
type holdingProxy struct {
	addr string
	mu   sync.Mutex
	gate chan struct{} // closed while the first connection's bytes flow
}

// startHoldingProxy runs a holdingProxy to server until the test ends.
func startHoldingProxy(t *testing.T, server string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: ln.Addr().String(), gate: make(chan struct{})}
	close(p.gate)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			// A small receive window: what the server sends waits in
			// its own queue, not in this proxy's kernel buffer.
			s.(*net.TCPConn).SetReadBuffer(4 << 10)
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(s, c)
				s.Close()
			})
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 4<<10)
				for {
					n, err := s.Read(buf)
					if first {
						p.mu.Lock()
						gate := p.gate
						p.mu.Unlock()
						<-gate
					}
					if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.release()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// hold stops the server's bytes to the first connection.
func (p *holdingProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

// release lets them flow again.
func (p *holdingProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}
