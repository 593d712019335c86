package rally_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// loopEcho is an echo Server in event-loop mode.
func loopEcho(rec *recorder) *rally.Server {
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 2,
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if err := c.Write(context.Background(), typ, p); err != nil {
				panic(err)
			}
		},
	}
	if rec != nil {
		s.Close = rec.close
	}
	return s
}

func TestEventLoopServerEchoesAndClosesWithAHandshake(t *testing.T) {
	rec := newRecorder()
	p := dialPeer(t, serve(t, loopEcho(rec)))
	p.WriteRaw(maskedZero(hx("81 05 68 65 6c 6c 6f")))
	wantWire(t, p, "81 05 68 65 6c 6c 6f")
	// A message spread over many reads, gathered across loop turns.
	p.WriteChopped(maskedZero(hx("82 7e 01 00"+zeros(256))), 7)
	wantWire(t, p, "82 7e 01 00"+zeros(256))
	p.WriteRaw(maskedZero(hx("88 02 03 e8")))
	wantWire(t, p, "88 02 03 e8")
	p.ExpectEOF(t)
	p.Close()
	if ce := rec.waitClose(t); ce.Code != 1000 {
		t.Fatalf("Server.Close got %v, want 1000", ce)
	}
}

func TestEventLoopServerReadsTheFramesSentBehindTheRequest(t *testing.T) {
	addr := serve(t, loopEcho(nil))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	frames := maskedZero(hx("81 02 68 69  81 01 21"))
	nc.Write(append([]byte(req), frames...))
	buf := make([]byte, 0, 512)
	want := "\x81\x02hi\x81\x01!"
	for !contains(buf, want) {
		tmp := make([]byte, 256)
		n, err := nc.Read(tmp)
		if err != nil {
			t.Fatalf("read %q then %v", buf, err)
		}
		buf = append(buf, tmp[:n]...)
	}
}

func contains(b []byte, s string) bool {
	return len(s) <= len(b) && string(b[len(b)-len(s):]) == s
}

func TestServerServesARawListenerInBothModes(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("EventLoop=%v", loop), func(t *testing.T) {
			s := loopEcho(nil)
			s.EventLoop = loop
			ln := listen(t)
			served := make(chan error, 1)
			go func() { served <- s.Serve(ln) }()
			p := dialPeer(t, ln.Addr().String())
			p.WriteRaw(maskedZero(hx("81 02 68 69")))
			wantWire(t, p, "81 02 68 69")
			shutdownAnswering(t, s, served, p)
		})
	}
}

// shutdownAnswering shuts s down while each peer answers the server's 1001
// close frame and sees the connection end, then checks that Shutdown
// returned cleanly and that Serve (whose result served carries) returned
// http.ErrServerClosed.
func shutdownAnswering(t *testing.T, s *rally.Server, served <-chan error, peers ...*rawpeer.Peer) {
	t.Helper()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for _, p := range peers {
		p.ExpectClose(t, 1001)
		p.WriteRaw(maskedZero(hx("88 02 03 e9")))
		p.ExpectEOF(t)
		p.Close()
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

func TestServerServeRefusesAServerWithAnUpgradeCallback(t *testing.T) {
	s := &rally.Server{Upgrade: func(http.ResponseWriter, *http.Request) (any, bool) { return nil, true }}
	ln := listen(t)
	if err := s.Serve(ln); err == nil || !strings.Contains(err.Error(), "Authorize") {
		t.Fatalf("Serve with Server.Upgrade set = %v, want an error pointing to Options.Authorize", err)
	}
}

func TestEventLoopServerPassesTheConformanceSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	strictConformance(t, "ws://"+serve(t, loopConformanceServer())+"/", "rally-event-loop")
}

// loopConformanceServer is an echo Server on event loops, with
// permessage-deflate, for the conformance suite.
func loopConformanceServer() *rally.Server {
	return &rally.Server{
		EventLoop: true,
		Options: &rally.AcceptOptions{
			Compression: &rally.CompressionOptions{ServerNoContextTakeover: true},
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Write(context.Background(), typ, p)
		},
	}
}

// strictConformance runs every case of the conformance suite against the
// server at url and fails unless every verdict is OK or INFORMATIONAL.
func strictConformance(t *testing.T, url, agent string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), slowness.Scale(3*time.Minute))
	defer cancel()
	rep, err := conform.RunServer(ctx, url, &conform.Options{Agent: agent, Scale: 1.0 / 64, Cases: []string{"*"},
		// A strict server answers each case; its verdict must not depend on
		// how long a loaded machine takes to echo 1 MiB (1.1.9, 1.2.9
		// "observed nothing" at load 13 with the default 2 s).
		Timeout: slowness.Scale(2 * time.Second), CloseTimeout: slowness.Scale(2 * time.Second),
		FailFastWait: slowness.Scale(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep.Counts())
	if !rep.Passed() {
		t.Fatalf("not strict: %s", strings.Join(rep.Failures(), "; "))
	}
}

func TestEventLoopLeavesNoGoroutineNorDescriptorAfterItsConnectionsEnd(t *testing.T) {
	fdsBefore, gBefore := rally.OpenFDs(t), runtime.NumGoroutine()
	rec := newRecorder()
	rec.closed = make(chan *rally.CloseError, 64)
	s := loopEcho(rec)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	const n = 30
	peers := make([]*rawpeer.Peer, n)
	for i := range peers {
		p, _, err := rawpeer.DialClient(ln.Addr().String(), "/", nil, wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		peers[i] = p
		p.WriteRaw(maskedZero(hx("81 02 68 69")))
		wantWire(t, p, "81 02 68 69")
	}
	for i, p := range peers {
		switch i % 3 {
		case 0: // a close handshake
			p.WriteRaw(maskedZero(hx("88 02 03 e8")))
			wantWire(t, p, "88 02 03 e8")
			p.ExpectEOF(t)
			p.Close()
		case 1: // the peer goes away without a close frame
			p.Close()
		}
	}
	// The rest are told to go by Shutdown.
	var rest []*rawpeer.Peer
	for i, p := range peers {
		if i%3 == 2 {
			rest = append(rest, p)
		}
	}
	shutdownAnswering(t, s, served, rest...)
	for range n {
		select {
		case <-rec.closed:
		case <-time.After(wireTimeout()):
			t.Fatal("Server.Close was not called for every connection")
		}
	}
	rally.WaitNothingLeft(t, fdsBefore, gBefore, wireTimeout())
}

func TestEventLoopTurnWritesEachConnectionOnceWhateverItsCallbacksSent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	conns := make(chan *rally.Conn, 2)
	var other atomic.Pointer[rally.Conn]
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 1,
		Open:       func(c *rally.Conn) { conns <- c },
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			for i := range 10 {
				if st, err := other.Load().Send(rally.Text, []byte{'0' + byte(i)}); st != rally.Sent || err != nil {
					panic(fmt.Sprint(st, err))
				}
			}
			c.Write(context.Background(), typ, p)
			c.Write(context.Background(), typ, p)
		},
	}
	addr := serve(t, s)
	pa := dialPeer(t, addr)
	<-conns
	pb := dialPeer(t, addr)
	other.Store(<-conns)
	before := rally.LoopWrites()
	pa.WriteRaw(maskedZero(hx("81 02 68 69")))
	wantWire(t, pa, "81 02 68 69")
	wantWire(t, pa, "81 02 68 69")
	for i := range 10 {
		wantWire(t, pb, fmt.Sprintf("81 01 %02x", '0'+i))
	}
	if n := rally.LoopWrites() - before; n != 2 {
		t.Fatalf("%d write system calls for one turn's 12 frames to two connections, want 2", n)
	}
}

func TestEventLoopConnectionRefusesToBeReadByTheApplication(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	conns := make(chan *rally.Conn, 1)
	s := &rally.Server{EventLoop: true, Open: func(c *rally.Conn) { conns <- c }}
	dialPeer(t, serve(t, s))
	c := <-conns
	if _, _, err := c.Read(ctxT(t)); err == nil || !strings.Contains(err.Error(), "event loop") {
		t.Fatalf("Read on a loop-driven connection = %v, want an error naming the event loop", err)
	}
	if _, _, err := c.Reader(ctxT(t)); err == nil {
		t.Fatal("Reader on a loop-driven connection returned no error")
	}
}

// warnings is a slog.Handler that hands every warning to a channel.
type warnings chan string

func (w warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w <- r.Message
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

func TestEventLoopLogsACallbackThatBlocksIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	logged := make(warnings, 4)
	release := make(chan struct{})
	s := &rally.Server{
		EventLoop: true,
		Options:   &rally.AcceptOptions{ConnOptions: rally.ConnOptions{Logger: slog.New(logged)}},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			<-release
			c.Write(context.Background(), typ, p)
		},
	}
	p := dialPeer(t, serve(t, s))
	p.WriteRaw(maskedZero(hx("81 02 68 69")))
	select {
	case msg := <-logged:
		if !strings.Contains(msg, "event loop is blocked") {
			t.Fatalf("logged %q", msg)
		}
	case <-time.After(4 * wireTimeout()):
		t.Fatal("a callback blocked the loop and nothing was logged")
	}
	close(release)
	wantWire(t, p, "81 02 68 69")
}

func TestEventLoopWriteInACallbackDoesNotWaitForASlowPeer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	results := make(chan error, 1)
	s := &rally.Server{
		EventLoop: true,
		Options:   &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: 1 << 20}},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			// The peer reads nothing: a Write that waited for the kernel
			// would never return. Each returns at once, until the
			// buffer limit refuses one.
			big := make([]byte, 256<<10)
			for range 1000 {
				if err := c.Write(context.Background(), rally.Binary, big); err != nil {
					results <- err
					return
				}
			}
			results <- nil
		},
	}
	p := dialStalledPeer(t, serve(t, s), nil)
	p.WriteRaw(maskedZero(hx("81 02 67 6f")))
	select {
	case err := <-results:
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("Write on the loop past the buffer limit = %v, want the limit's error", err)
		}
	case <-time.After(4 * wireTimeout()):
		t.Fatal("a Write in a callback waited for a peer that does not read")
	}
}

func TestEventLoopPingsAQuietPeerAndClosesAnIdleOneWith1001(t *testing.T) {
	s := &rally.Server{
		EventLoop: true,
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
			PingInterval: 50 * time.Millisecond,
			IdleTimeout:  300 * time.Millisecond,
		}},
	}
	p := dialPeer(t, serve(t, s))
	for {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for a ping: %v", err)
		}
		if f.Opcode == rawpeer.OpPing {
			break
		}
	}
	// The peer stays silent (it does not even answer the pings).
	f := p.ExpectClose(t, 1001)
	if _, reason, _ := rawpeer.ParseClose(f.Payload); string(reason) != "idle timeout" {
		t.Fatalf("close reason %q, want \"idle timeout\"", reason)
	}
}

func TestEventLoopDeliversNothingAfterACallbackCutTheConnection(t *testing.T) {
	rec := newRecorder()
	s := &rally.Server{
		EventLoop: true,
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			rec.add("message " + string(p))
			c.CloseNow()
		},
		Close: rec.close,
	}
	p := dialPeer(t, serve(t, s))
	p.WriteRaw(maskedZero(hx("81 01 61  81 01 62  81 01 63")))
	p.ExpectEOF(t)
	if ce := rec.waitClose(t); ce.Code != 1006 {
		t.Fatalf("Server.Close got %v, want 1006", ce)
	}
	if got := rec.log(); len(got) != 2 || got[0] != "message a" {
		t.Fatalf("callbacks %q, want one message, then the close", got)
	}
}

func TestEventLoopsDeliverEveryBroadcastInOrderAcrossLoopsAndGoroutines(t *testing.T) {
	const peers, each = 6, 40
	var (
		mu    sync.Mutex
		conns []*rally.Conn
	)
	opened := make(chan struct{}, peers)
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 2,
		Open: func(c *rally.Conn) {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			opened <- struct{}{}
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			mu.Lock()
			all := slices.Clone(conns)
			mu.Unlock()
			for _, r := range all {
				if st, err := r.Send(typ, p); st == rally.Dropped {
					panic(fmt.Sprint("dropped: ", err))
				}
			}
		},
	}
	addr := serve(t, s)
	ps := make([]*rawpeer.Peer, peers)
	for i := range ps {
		ps[i] = dialPeer(t, addr)
		<-opened
	}
	// Peers send from their goroutines; the test's goroutine broadcasts
	// too, from outside the loops.
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			for j := range each {
				p.WriteRaw(maskedZero(rawpeer.Build(rawpeer.Text(fmt.Sprintf("%d:%d", i, j)))))
			}
		})
	}
	wg.Go(func() {
		mu.Lock()
		all := slices.Clone(conns)
		mu.Unlock()
		for j := range each {
			for _, r := range all {
				r.Send(rally.Text, fmt.Appendf(nil, "%d:%d", peers, j))
			}
		}
	})
	for _, p := range ps {
		next := make([]int, peers+1)
		for range (peers + 1) * each {
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatalf("reading the broadcasts: %v", err)
			}
			var from, j int
			if _, err := fmt.Sscanf(string(f.Payload), "%d:%d", &from, &j); err != nil || j != next[from] {
				t.Fatalf("got %q, want %d:%d next", f.Payload, from, next[from])
			}
			next[from]++
		}
	}
	wg.Wait()
}

func TestEventLoopEchoesTheCloseOfAPeerThatShutItsSideRightAfter(t *testing.T) {
	rec := newRecorder()
	p := dialPeer(t, serve(t, loopEcho(rec)))
	p.WriteRaw(maskedZero(hx("88 02 03 e8")))
	if err := tcpOf(p.NetConn()).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "88 02 03 e8")
	p.ExpectEOF(t)
	if ce := rec.waitClose(t); ce.Code != 1000 {
		t.Fatalf("Server.Close got %v, want 1000", ce)
	}
}
