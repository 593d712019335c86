package server

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rallyws/rally"
)

// serveModes are the engines `rally serve` runs its WebSockets on: a
// goroutine per connection (the default) and the event loops
// (--event-loop). What a client observes must not depend on which.
var serveModes = []struct {
	name      string
	eventLoop bool
}{
	{"goroutines", false},
	{"event-loop", true},
}

// eventLoopUnderTest is the mode TestEveryEndpointBehavesTheSameInEveryMode
// is running a test in; serve() starts its servers in that mode.
var eventLoopUnderTest bool

// inMode makes the servers that serve() starts for the rest of t use the
// event loops or not.
func inMode(t *testing.T, eventLoop bool) {
	eventLoopUnderTest = eventLoop
	t.Cleanup(func() { eventLoopUnderTest = false })
}

// endpointTests are the tests of what the endpoints do, for a client, that
// must hold in both modes: /echo, /ws pub/sub, POST /publish, /chat.
// (The conformance suite runs on /echo in both modes by itself:
// TestConformanceOfRallyServe.)
var endpointTests = []struct {
	name string
	test func(*testing.T)
}{
	{"echo", TestEchoReturnsEveryMessageWithItsFrameType},
	{"shutdown", TestShutdownClosesEveryWebSocketWith1001},
	{"ws/publish-and-self", TestSubscriberReceivesPublishAndPublisherOnlyWithSelf},
	{"ws/no-id-no-ack", TestRequestsWithoutIDAreNotAcknowledged},
	{"ws/unsubscribe", TestUnsubscribeStopsDeliveries},
	{"ws/errors", TestProblemsAreAnsweredWithErrorFramesAndTheConnectionStays},
	{"ws/violations", TestProtocolViolationsCloseTheConnection},
	{"ws/too-large", TestMessageOverTheLimitClosesWith1009},
	{"ws/subscription-limit", TestSubscriptionsPerConnectionAreLimited},
	{"pusher/connect", TestPusherConnect},
	{"pusher/over-quota", TestPusherOverQuota},
	{"pusher/over-capacity", TestPusherOverCapacity},
	{"pusher/channels", TestPusherPublicAndPrivateChannels},
	{"pusher/presence", TestPusherPresence},
	{"pusher/client-events", TestPusherClientEventRules},
	{"pusher/cache", TestPusherCacheChannel},
	{"pusher/signin", TestPusherSigninAndTerminate},
	{"ws/deflate", TestDeliveriesAreCompressedWhenTheClientOffersDeflate},
	{"publish/json-text-bytes", TestHTTPPublishDeliversJSONTextAndBytes},
	{"publish/no-subscribers", TestHTTPPublishToATopicWithoutSubscribersSaysNoneReceivedIt},
	{"publish/bad-requests", TestHTTPPublishRefusesBadRequests},
	{"publish/slashes", TestTopicsWithSlashesArePublishedWithoutEscaping},
	{"chat", TestChatRelaysEveryMessageToEveryClientTheSenderIncluded},
}

func TestEveryEndpointBehavesTheSameInEveryMode(t *testing.T) {
	for _, mode := range serveModes {
		t.Run(mode.name, func(t *testing.T) {
			for _, et := range endpointTests {
				t.Run(et.name, func(t *testing.T) {
					inMode(t, mode.eventLoop)
					et.test(t)
				})
			}
		})
	}
}

func TestReusePortNeedsAFixedPort(t *testing.T) {
	_, err := New(Config{Addr: "127.0.0.1:0", ReusePort: true})
	if err == nil || !strings.Contains(err.Error(), "--reuse-port needs a fixed port") {
		t.Errorf("New with --reuse-port and port 0: %v, want an error saying it needs a fixed port", err)
	}
}

// listenReusePort opens a listener on a free loopback port with
// SO_REUSEPORT set, so that servers with ReusePort can join it there.
func listenReusePort(t *testing.T) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// syncBuffer is a bytes.Buffer safe for a server's banner and a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestReusePortLetsTwoServersShareAPortAndBothServe(t *testing.T) {
	if !reusePortSupported {
		t.Skip("SO_REUSEPORT spreading is Linux only")
	}
	// The placeholder holds the port until both servers listen on it;
	// without SO_REUSEPORT they could not.
	placeholder := listenReusePort(t)
	addr := placeholder.Addr().String()
	if _, err := net.Listen("tcp", addr); err == nil {
		t.Fatal("a listener without SO_REUSEPORT could join the port")
	}
	var servers [2]*Server
	var banners [2]*syncBuffer
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range servers {
		s, err := New(Config{Addr: addr, ReusePort: true, ShutdownTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		servers[i], banners[i] = s, &syncBuffer{}
		listening := make(chan struct{})
		wg.Go(func() {
			if err := s.ListenAndServe(ctx, &announcer{w: banners[i], ready: listening}); err != nil {
				t.Errorf("server %d: %v", i, err)
			}
		})
		<-listening
	}
	placeholder.Close()
	// Connections are spread by a hash of their addresses: of 64, each
	// server gets some, unless something is wrong (the chance that a
	// working kernel gives all 64 to one is 2^-63).
	var clients []*client
	for range 64 {
		clients = append(clients, dial(t, "ws://"+addr+"/echo", nil))
	}
	for i, s := range servers {
		if s.conns.Load() == 0 {
			t.Errorf("server %d served none of 64 connections", i)
		}
		if !strings.Contains(banners[i].String(), "--reuse-port") {
			t.Errorf("server %d banner does not say the port is shared:\n%s", i, banners[i])
		}
	}
	for _, c := range clients {
		c.c.CloseNow()
	}
}

// announcer passes a banner on and closes ready at its first line, once
// the server listens.
type announcer struct {
	w     *syncBuffer
	ready chan struct{}
	once  sync.Once
}

func (a *announcer) Write(p []byte) (int, error) {
	a.once.Do(func() { close(a.ready) })
	return a.w.Write(p)
}

func TestEventLoopIsSetOnEveryWebSocketEndpoint(t *testing.T) {
	for _, mode := range serveModes {
		s, err := New(Config{EventLoop: mode.eventLoop, EventLoops: 3, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for name, ws := range map[string]*rally.Server{"/echo": s.echo, "/ws": s.ws, "/chat": s.chat} {
			if ws.EventLoop != mode.eventLoop || ws.EventLoops != 3 {
				t.Errorf("%s: %s has EventLoop %v, EventLoops %d (want 3)", mode.name, name, ws.EventLoop, ws.EventLoops)
			}
		}
		s.shutdownNodes()
	}
	// By default, one loop a CPU for each endpoint: the clients of one
	// loop cannot take every core's work from the others'.
	s, err := New(Config{EventLoop: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.ws.EventLoops; n != runtime.GOMAXPROCS(0) {
		t.Errorf("/ws has %d event loops by default, want GOMAXPROCS (%d)", n, runtime.GOMAXPROCS(0))
	}
	s.shutdownNodes()
	for _, n := range []int{-1, maxEventLoops + 1} {
		if _, err := New(Config{EventLoop: true, EventLoops: n, Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "--event-loops") {
			t.Errorf("EventLoops %d: %v, want an error naming --event-loops", n, err)
		}
	}
}

// rawWebSocket opens a WebSocket on path by hand (no client goroutine)
// and returns it once the 101 was read.
func rawWebSocket(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rawHandshake(t, nc, addr, path)
	return nc
}

// rawHandshake makes nc a WebSocket on path by hand and returns the
// reader of what the server sent, the 101 read.
func rawHandshake(t *testing.T, nc net.Conn, addr, path string) *bufio.Reader {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := nc.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return br
}

func TestEventLoopModeHoldsIdleConnectionsWithoutAGoroutineEach(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loops are Linux only")
	}
	const n = 64
	for _, mode := range serveModes {
		t.Run(mode.name, func(t *testing.T) {
			ts := serve(t, Config{EventLoop: mode.eventLoop})
			addr := strings.TrimPrefix(ts.ws, "ws://")
			before := runtime.NumGoroutine()
			for range n {
				rawWebSocket(t, addr, "/ws")
			}
			if !mode.eventLoop {
				if grown := runtime.NumGoroutine() - before; grown < n {
					t.Fatalf("goroutine mode: %d idle connections, %d more goroutines", n, grown)
				}
				return
			}
			// net/http's goroutine of each connection ends once the loop took
			// it over: yield until it has (bounded).
			grown := 0
			for range 100000 {
				if grown = runtime.NumGoroutine() - before; grown < n/4 {
					return
				}
				runtime.Gosched()
			}
			t.Fatalf("event-loop mode: %d idle connections still hold %d more goroutines", n, grown)
		})
	}
}
