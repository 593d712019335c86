package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/internal/h2env"
	"github.com/rallyws/rally/internal/slowness"
)

// The servers of these tests accept WebSockets over HTTP/2 only when the
// test binary starts with GODEBUG=http2xconnect=1: it re-executes itself
// with it, as `rally serve` does.
func init() { h2env.Reexec("") }

// The conformance suite against rally serve's /echo with every case on a
// stream of one HTTP/2 connection (h2c): the same verdicts as over
// HTTP/1.1, case by case.
func TestConformanceOfRallyServeOverHTTP2SameAsOverHTTP1(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	addr, stop := serveConfig(t, Config{ShutdownTimeout: 2 * time.Second, H2C: true, HandshakeRate: -1})
	defer stop()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer rcancel()
	url := "ws://" + addr + "/echo"
	h1, err := conform.RunServer(rctx, url, conformOptions("rally-serve"))
	if err != nil {
		t.Fatal(err)
	}
	o := conformOptions("rally-serve-h2c")
	o.HTTP2 = true
	h2, err := conform.RunServer(rctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	report(t, h2)
	sameVerdicts(t, h1, h2)
	metrics := scrape(t, "http://"+addr+"/metrics")
	if want := fmt.Sprintf(`rally_connections_by_protocol_total{protocol="h2c"} %d`, len(h2.Results)); !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

func sameVerdicts(t *testing.T, h1, h2 *conform.Report) {
	t.Helper()
	if len(h1.Results) != len(h2.Results) {
		t.Fatalf("%d cases over HTTP/1.1, %d over HTTP/2", len(h1.Results), len(h2.Results))
	}
	for i, r := range h1.Results {
		g := h2.Results[i]
		if g.ID != r.ID || g.Behavior != r.Behavior || g.CloseBehavior != r.CloseBehavior {
			t.Errorf("case %s: %s/%s over HTTP/1.1, %s/%s over HTTP/2 (%q %q)", r.ID, r.Behavior, r.CloseBehavior,
				g.Behavior, g.CloseBehavior, g.BehaviorNotes, g.CloseNotes)
		}
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The client side of the suite speaks HTTP/1.1 only (it serves the classic
// fuzzing-server paths on a listener). To judge rally's client over HTTP/2,
// a relay takes each of its extended CONNECT streams, opens the same path
// on the suite with an HTTP/1.1 upgrade carrying the client's offer, and
// then copies bytes both ways without looking at them: the suite sees the
// client's frames exactly as the client sent them on its stream, and the
// ends of the stream map to the ends of the TCP connection (END_STREAM to
// FIN, the suite's FIN to END_STREAM).
func TestConformanceOfRallyClientOverHTTP2SameAsOverHTTP1(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h1, err := conform.RunClient(ctx, conformOptions("rally-client"), driveRallyClient)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	h2, err := conform.RunClient(ctx, conformOptions("rally-client-h2c"), func(ctx context.Context, addr string) error {
		relay := httptest.NewUnstartedServer(h2Relay(addr))
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		relay.Config.Protocols = p
		relay.Start()
		defer relay.Close()
		return driveRallyClientWith(ctx, relay.Listener.Addr().String(), &rally.DialOptions{
			ConnOptions: rally.ConnOptions{ReadLimit: 64 << 20}, HTTP2: rally.HTTP2Require, HTTP2Transport: tr,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	report(t, h2)
	sameVerdicts(t, h1, h2)
}

// driveRallyClientWith is driveRallyClient with the client's options.
func driveRallyClientWith(ctx context.Context, addr string, opts *rally.DialOptions) error {
	base := "ws://" + addr
	run := func(url string, onMessage func(*rally.Conn, rally.MessageType, []byte) error) error {
		c, _, err := rally.Dial(ctx, url, opts)
		if err != nil {
			return err
		}
		defer c.CloseNow()
		if !c.HTTP2() {
			return fmt.Errorf("%s: not over HTTP/2", url)
		}
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				// The end of the connection is the suite's to judge. Let the
				// close handshake finish (the answer to the suite's close
				// may still be queued) rather than cut it with CloseNow.
				select {
				case <-c.Done():
				case <-ctx.Done():
				}
				return nil
			}
			if onMessage != nil {
				if err := onMessage(c, typ, p); err != nil {
					return err
				}
			}
		}
	}
	var count int
	if err := run(base+"/getCaseCount", func(c *rally.Conn, typ rally.MessageType, p []byte) error {
		n, err := strconv.Atoi(string(p))
		count = n
		return err
	}); err != nil {
		return fmt.Errorf("case count: %w", err)
	}
	for i := 1; i <= count; i++ {
		run(fmt.Sprintf("%s/runCase?case=%d&agent=rally-client-h2c", base, i), func(c *rally.Conn, typ rally.MessageType, p []byte) error {
			return c.Write(ctx, typ, p)
		})
	}
	return run(base+"/updateReports?agent=rally-client-h2c", nil)
}

// h2Relay answers extended CONNECT streams by relaying them, as bytes, to
// an HTTP/1.1 WebSocket upgrade of the same request target on addr.
func h2Relay(addr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Header.Get(":protocol") != "websocket" {
			http.Error(w, "extended CONNECT only", http.StatusBadRequest)
			return
		}
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer nc.Close()
		var req strings.Builder
		fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", r.URL.RequestURI(), addr)
		fmt.Fprintf(&req, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
		for _, name := range []string{"Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
			for _, v := range r.Header[name] {
				fmt.Fprintf(&req, "%s: %s\r\n", name, v)
			}
		}
		req.WriteString("\r\n")
		io.WriteString(nc, req.String())
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			http.Error(w, "upstream refused the upgrade", http.StatusBadGateway)
			return
		}
		for _, name := range []string{"Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
			if v := resp.Header[name]; len(v) > 0 {
				w.Header()[name] = slices.Clone(v)
			}
		}
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		rc.Flush()
		go func() {
			io.Copy(nc, r.Body)
			nc.(*net.TCPConn).CloseWrite()
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		// The suite closed its side: returning ends the stream
		// (END_STREAM; net/http resets a client side still open with
		// RST_STREAM NO_ERROR).
	})
}

// rally serve advertises frames of 16 KiB at most (SETTINGS_MAX_FRAME_SIZE,
// RFC 9113 6.5.2) and windows of 128 KiB, not net/http's 1 MiB each:
// net/http keeps a read buffer the size of the largest frame a connection
// sent for as long as the connection, and holds what the window lets a
// client send before it is read; each HTTP/2 connection is charged both.
func TestRallyServeAdvertisesHTTP2FramesOf16KiBAndWindowsOf128KiB(t *testing.T) {
	addr, stop := serveConfig(t, Config{H2C: true, HandshakeRate: -1})
	defer stop()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(slowness.Scale(10 * time.Second)))
	// The preface and an empty SETTINGS frame (RFC 9113 3.4, 6.5).
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	readFrame := func() (typ byte, stream uint32, p []byte) {
		var head [9]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			t.Fatal(err)
		}
		p = make([]byte, int(head[0])<<16|int(head[1])<<8|int(head[2]))
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatal(err)
		}
		return head[3], binary.BigEndian.Uint32(head[5:]) &^ (1 << 31), p
	}
	typ, _, p := readFrame()
	if typ != 0x4 {
		t.Fatalf("the server's first frame is of type %d, not SETTINGS", typ)
	}
	frame, window := -1, 65535
	for ; len(p) >= 6; p = p[6:] {
		switch v := int(binary.BigEndian.Uint32(p[2:])); binary.BigEndian.Uint16(p) {
		case 0x4:
			window = v
		case 0x5:
			frame = v
		}
	}
	if frame != 16<<10 || window != 128<<10 {
		t.Fatalf("SETTINGS_MAX_FRAME_SIZE %d and SETTINGS_INITIAL_WINDOW_SIZE %d, want 16384 and 131072", frame, window)
	}
	// The connection's window starts at 65,535 and the server raises it
	// at once (RFC 9113 6.9.2).
	for range 4 {
		typ, stream, p := readFrame()
		if typ == 0x8 && stream == 0 {
			if got := 65535 + int(binary.BigEndian.Uint32(p)); got != 128<<10 {
				t.Fatalf("the connection's window is %d, want 131072", got)
			}
			return
		}
	}
	t.Fatal("the server did not raise the connection's window")
}

// rally serve closes a connection that carries nothing once it has been
// idle for its idle timeout (2 minutes; 200 ms here): an HTTP/1.1
// connection between two requests, an HTTP/2 connection with no stream
// open. It does so itself, so that net/http's HTTP/2 server keeps no idle
// timer: Go 1.26's restarts that timer while it closes the streams of a
// connection that ended, which kept every such connection in memory for
// the whole timeout. An HTTP/2 connection with a WebSocket open is not
// idle.
func TestRallyServeClosesIdleConnectionsAndKeepsThoseCarryingAWebSocket(t *testing.T) {
	old := httpIdleTimeout
	httpIdleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { httpIdleTimeout = old })
	addr, stop := serveConfig(t, Config{H2C: true, HandshakeRate: -1})
	defer stop()
	closedByServer := func(t *testing.T, c net.Conn, r io.Reader) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(slowness.Scale(30 * time.Second)))
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatalf("the idle connection was not closed by the server: %v", err)
		}
	}
	t.Run("http/1.1", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: rally\r\n\r\n")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		closedByServer(t, c, r)
	})
	t.Run("h2c", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		closedByServer(t, c, c)
	})
	t.Run("h2c with a WebSocket open", func(t *testing.T) {
		tr := &http.Transport{ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		ws := dial(t, "ws://"+addr+"/echo", &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr})
		for range 3 {
			time.Sleep(2 * httpIdleTimeout)
			ws.send("still here")
			if got := ws.next(); got != "still here" {
				t.Fatalf("echo over a connection idle for longer than the timeout: %q", got)
			}
		}
	})
}

// An HTTP/2 connection whose client went away with a WebSocket open is
// let go once its streams ended, not an idle timeout later: with
// http.Server.IdleTimeout set, Go 1.26's HTTP/2 server restarts its idle
// timer while it closes such a connection's streams, and the timer keeps
// the connection, its buffers included. Each accepted socket is watched
// through a weak pointer.
func TestAnHTTP2ConnectionLeftWithAWebSocketOpenIsNotKeptInMemory(t *testing.T) {
	old := httpIdleTimeout
	httpIdleTimeout = time.Hour
	t.Cleanup(func() { httpIdleTimeout = old })
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &watchedListener{Listener: tcp}
	s, err := New(Config{H2C: true, HandshakeRate: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	// A transport that opens a connection for each WebSocket
	// (DisableKeepAlives), so that cutting it cuts that WebSocket alone.
	var client net.Conn
	tr := &http.Transport{ForceAttemptHTTP2: true, DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		client = c
		return c, err
	}}
	const conns = 20
	for range conns {
		// A WebSocket over HTTP/2 echoes a message of 16 KiB (net/http
		// reads it in frames of up to 16 KiB, and its frame buffer grows
		// to them), and the client cuts the TCP connection under it.
		ctx := testContext(t)
		c, _, err := rally.Dial(ctx, "ws://"+tcp.Addr().String()+"/echo", &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("x"), 16<<10)
		if err := c.Write(ctx, rally.Binary, msg); err != nil {
			t.Fatal(err)
		}
		if _, got, err := c.Read(ctx); err != nil || len(got) != len(msg) {
			t.Fatalf("echoed %d bytes, %v; want %d", len(got), err, len(msg))
		}
		client.Close()
		c.CloseNow()
	}
	deadline := time.Now().Add(slowness.Scale(30 * time.Second))
	for {
		open := s.conns.Load() + s.httpConns.Load()
		runtime.GC()
		runtime.GC()
		kept := ln.kept()
		if open == 0 && kept == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections still in memory (%d open) after their clients went away", kept, conns, open)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchedListener keeps a weak pointer to each connection it accepted.
type watchedListener struct {
	net.Listener
	mu    sync.Mutex
	conns []weak.Pointer[net.TCPConn]
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		l.mu.Lock()
		l.conns = append(l.conns, weak.Make(tc))
		l.mu.Unlock()
	}
	return c, err
}

// kept returns how many of the accepted connections are still reachable.
func (l *watchedListener) kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.conns {
		if w.Value() != nil {
			n++
		}
	}
	return n
}
