package rally_test

import (
	"bytes"
	"crypto/tls"
	"net/http/httptest"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// yieldPath is a way a peer reaches a Server's reading goroutine, each
// through a transport of its own.
type yieldPath struct {
	name string
	// onLoops: RALLY_TEST_EVENT_LOOP=1 puts these connections on event
	// loops, which share their turns instead.
	onLoops bool
	dial    func(t *testing.T, s *rally.Server) *rawpeer.Peer
}

func yieldPaths() []yieldPath {
	return []yieldPath{
		{"TCP", true, func(t *testing.T, s *rally.Server) *rawpeer.Peer {
			return dialPeer(t, serve(t, s))
		}},
		{"rally's TLS (NewTLSListener, as rally serve terminates it)", true, func(t *testing.T, s *rally.Server) *rawpeer.Peer {
			ts := httptest.NewUnstartedServer(s)
			ts.Listener = rally.NewTLSListener(ts.Listener, tlsServerConfig(t))
			ts.Start()
			t.Cleanup(ts.Close)
			return dialTLSPeer(t, ts.Listener.Addr().String())
		}},
		{"TLS made by net/http", false, func(t *testing.T, s *rally.Server) *rawpeer.Peer {
			ts := httptest.NewTLSServer(s)
			t.Cleanup(ts.Close)
			return dialTLSPeer(t, ts.Listener.Addr().String())
		}},
		{"HTTP/2", false, func(t *testing.T, s *rally.Server) *rawpeer.Peer {
			requireH2(t)
			ca := newTestCA(t)
			cfg := ca.clientConfig()
			cfg.ServerName = "localhost"
			h2, err := rawpeer.DialH2(startH2Server(t, s, ca).Listener.Addr().String(), cfg, wireTimeout())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h2.Close)
			p, _, err := h2.DialClient("/", nil, wireTimeout())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return p
		}},
	}
}

// dialTLSPeer opens a raw client peer to addr over TLS (any
// certificate), handshake done.
func dialTLSPeer(t *testing.T, addr string) *rawpeer.Peer {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	p := rawpeer.NewPeer(nc, true)
	t.Cleanup(func() { p.Close() })
	p.SetTimeout(wireTimeout())
	key := rawpeer.NewKey()
	if err := p.WriteRaw(rawpeer.HandshakeRequest(addr, "/", key, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadResponse(key); err != nil {
		t.Fatal(err)
	}
	return p
}

// forEachYieldPath runs f as a subtest for each path a goroutine reads.
func forEachYieldPath(t *testing.T, f func(t *testing.T, path yieldPath)) {
	for _, path := range yieldPaths() {
		t.Run(path.name, func(t *testing.T) {
			if path.onLoops && os.Getenv("RALLY_TEST_EVENT_LOOP") == "1" {
				t.Skip("every Server runs on event loops here (RALLY_TEST_EVENT_LOOP), which share their turns instead")
			}
			f(t, path)
		})
	}
}

// A connection's reading goroutine (goroutine mode) whose peer streams a
// large message lets the others run between its reads, once every 256 KiB
// its full reads bring, instead of reading on until the scheduler
// preempts it: the goroutine-mode side of the event loop's bound on a
// turn. It does so whatever carries the connection: TCP, TLS and HTTP/2
// streams alike. (Before, a thousand clients sending messages of 1 MiB
// kept a fresh client's echo waiting 1.2 s; over TLS and HTTP/2 the
// reading goroutine never yielded.)
func TestAReadingGoroutineLetsOthersRunWhileItsPeerStreams(t *testing.T) {
	const size = 8 << 20
	wire := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: make([]byte, size)})
	forEachYieldPath(t, func(t *testing.T, path yieldPath) {
		var yields atomic.Int64
		rally.OnStreamYield(t, func() { yields.Add(1) })
		done := make(chan struct{})
		s := &rally.Server{
			Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: size}},
			Message: func(c *rally.Conn, _ rally.MessageType, p []byte) {
				if len(p) != size {
					t.Errorf("a message of %d bytes, want %d", len(p), size)
				}
				close(done)
			},
		}
		p := path.dial(t, s)
		go p.WriteRaw(wire)
		waitOrFail(t, done, "the streamed message")
		n := yields.Load()
		if n == 0 {
			t.Errorf("the reading goroutine read a message of 8 MiB streamed at once over %s without letting the others run", path.name)
		}
		t.Logf("it let the others run %d times", n)
	})
}

// Reads of small messages never yield, over any transport, though a peer
// that pipelines them fills every read: yielding cost chat a third.
func TestAReadingGoroutineNeverYieldsForSmallMessages(t *testing.T) {
	const count = 1 << 14 // 2 MiB of frames of 122 bytes
	var wire []byte
	for range count {
		wire = append(wire, rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: make([]byte, 116)})...)
	}
	forEachYieldPath(t, func(t *testing.T, path yieldPath) {
		var yields atomic.Int64
		rally.OnStreamYield(t, func() { yields.Add(1) })
		done := make(chan struct{})
		got := 0
		s := &rally.Server{
			Message: func(c *rally.Conn, _ rally.MessageType, p []byte) {
				if got++; got == count {
					close(done)
				}
			},
		}
		p := path.dial(t, s)
		go p.WriteRaw(wire)
		waitOrFail(t, done, "every small message")
		if n := yields.Load(); n != 0 {
			t.Errorf("the reading goroutine let the others run %d times while its peer pipelined small messages over %s", n, path.name)
		}
	})
}

// While readers whose peers stream wait for their turn (the gate that
// lets one a processor into the run queue is full), another connection's
// first read of a large message takes 4 KiB and then waits for its turn
// behind them, as an event loop serves a connection's first delivery:
// a thousand clients that connect and stream at once are not a thousand
// reads of 256 KiB ahead of a fresh client (its echo waited 0.5-0.7 s at
// p99 in goroutine mode; 20 ms since). The message arrives whole once
// the others had their turns; with the gate free, nothing is cut.
func TestAFirstLargeReadWaitsItsTurnBehindStreamingReaders(t *testing.T) {
	if os.Getenv("RALLY_TEST_EVENT_LOOP") == "1" {
		t.Skip("every Server runs on event loops here (RALLY_TEST_EVENT_LOOP), which share their turns instead")
	}
	const size = 1 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	wire := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: payload})
	var cut atomic.Int64
	firstCut := make(chan struct{}, 1)
	release := rally.HoldStreamGate(t, func() {
		cut.Add(1)
		select {
		case firstCut <- struct{}{}:
		default:
		}
	})
	got := make(chan []byte, 1)
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: size}},
		Message: func(c *rally.Conn, _ rally.MessageType, p []byte) { got <- bytes.Clone(p) },
	}
	url := serve(t, s)
	p := dialPeer(t, url)
	go p.WriteRaw(wire)
	select {
	case <-firstCut:
	case m := <-got:
		t.Fatalf("a message of %d bytes was read whole while the gate was full, its first read not cut", len(m))
	case <-time.After(wireTimeout()):
		t.Fatal("no read was cut to a first share while the gate was full")
	}
	release()
	m := waitOrFail(t, got, "the message once the gate has room")
	if !bytes.Equal(m, payload) {
		t.Fatalf("the message arrived changed (%d bytes, want %d)", len(m), size)
	}
	before := cut.Load()
	go p.WriteRaw(wire)
	waitOrFail(t, got, "a second message")
	if n := cut.Load() - before; n != 0 {
		t.Errorf("with the gate free, %d reads were cut", n)
	}
}

// At most one reader a processor waits in the scheduler's run queue for
// its turn while its peer streams; the others wait parked, outside it, so
// that a goroutine the network wakes (a fresh client's accept, request,
// echo) is behind a processor's worth of them, not behind all of them.
// Eight peers stream messages of 8 MiB at once; each reader's turn is
// held open for a millisecond (the hook runs inside it), long enough for
// the others to pile up if nothing kept them out.
func TestAtMostOneStreamingReaderAProcessorWaitsForItsTurn(t *testing.T) {
	if os.Getenv("RALLY_TEST_EVENT_LOOP") == "1" {
		t.Skip("every Server runs on event loops here (RALLY_TEST_EVENT_LOOP), which share their turns instead")
	}
	const peers, size = 8, 8 << 20
	var waiting, most, turns atomic.Int64
	rally.OnStreamYield(t, func() {
		n := waiting.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		turns.Add(1)
		time.Sleep(time.Millisecond)
		waiting.Add(-1)
	})
	done := make(chan struct{}, peers)
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: size}},
		Message: func(c *rally.Conn, _ rally.MessageType, p []byte) { done <- struct{}{} },
	}
	url := serve(t, s)
	wire := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: make([]byte, size)})
	for range peers {
		p := dialPeer(t, url)
		go p.WriteRaw(wire)
	}
	for range peers {
		waitOrFail(t, done, "a streamed message")
	}
	procs := int64(runtime.GOMAXPROCS(0))
	if turns.Load() == 0 {
		t.Fatal("no reader let the others run while 8 peers streamed 8 MiB each")
	}
	if m := most.Load(); m > procs {
		t.Errorf("%d readers waited for their turn at once, more than one a processor (%d)", m, procs)
	}
	t.Logf("%d turns, at most %d waiting at once (%d processors)", turns.Load(), most.Load(), procs)
}
