package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// wssLoopServer is an echo Server with event loops that records, for each
// connection, whether its callbacks ran on a loop that owns its TLS
// socket, and how each connection ended.
type wssLoopServer struct {
	*rally.Server
	mu      sync.Mutex
	offLoop int // callbacks that ran elsewhere
	onLoop  int
	closes  chan *rally.CloseError
}

func newWSSLoopServer() *wssLoopServer {
	w := &wssLoopServer{closes: make(chan *rally.CloseError, 100)}
	note := func(c *rally.Conn) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if rally.ServedByLoopOverTLS(c) {
			w.onLoop++
		} else {
			w.offLoop++
		}
	}
	w.Server = &rally.Server{
		EventLoop:  true,
		EventLoops: 2,
		Open:       note,
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			note(c)
			if string(p) == "bye" {
				c.Close(rally.CloseNormal, "server says bye")
				return
			}
			c.Send(typ, p)
		},
		Close: func(c *rally.Conn, err *rally.CloseError) { w.closes <- err },
	}
	return w
}

func (w *wssLoopServer) counts() (on, off int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.onLoop, w.offLoop
}

// serveWSS serves w on a TLS listener of its own (Server.Serve over
// NewTLSListener) and returns the wss:// URL.
func serveWSS(t *testing.T, s *rally.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(rally.NewTLSListener(ln, tlsServerConfig(t))) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*wireTimeout())
		defer cancel()
		s.Shutdown(ctx)
		<-served
	})
	return "wss://" + ln.Addr().String() + "/"
}

func dialWSS(t *testing.T, url string) *rally.Conn {
	t.Helper()
	c, _, err := rally.Dial(context.Background(), url, &rally.DialOptions{
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// echoOver sends each message and reads its echo.
func echoOver(t *testing.T, c *rally.Conn, msgs ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*wireTimeout())
	defer cancel()
	for _, m := range msgs {
		if err := c.Write(ctx, rally.Binary, m); err != nil {
			t.Fatalf("writing %d bytes: %v", len(m), err)
		}
		_, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading the echo of %d bytes: %v", len(m), err)
		}
		if !bytes.Equal(p, m) {
			t.Fatalf("echo of %d bytes came back as %d bytes, different", len(m), len(p))
		}
	}
}

// wssMessages are a small message, one spread over several TLS records,
// and one larger than the socket buffers take at once (backpressure: its
// ciphertext waits for the loop to see the socket writable).
func wssMessages() [][]byte {
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	return [][]byte{[]byte("hello"), bytes.Repeat([]byte("r"), 40<<10), big}
}

// A Server with EventLoop that terminates TLS itself (Serve on
// NewTLSListener) serves its wss connections on the loops: every callback
// runs on the loop that owns the connection's TLS socket, messages of any
// size echo whole, and both the client's and the server's close
// handshakes complete with their codes.
func TestEventLoopServesWssOnTheLoopEchoesAndCloses(t *testing.T) {
	w := newWSSLoopServer()
	url := serveWSS(t, w.Server)
	ctx := context.Background()

	c := dialWSS(t, url)
	echoOver(t, c, wssMessages()...)
	if err := c.Close(4000, "client done"); err != nil {
		t.Fatalf("client close: %v", err)
	}
	if ce := <-w.closes; ce.Code != 4000 || ce.Reason != "client done" {
		t.Fatalf("server saw the end as %v; want 4000 client done", ce)
	}

	c2 := dialWSS(t, url)
	echoOver(t, c2, []byte("second"))
	if err := c2.Write(ctx, rally.Text, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	_, _, err := c2.Read(ctx)
	var ce *rally.CloseError
	if !errors.As(err, &ce) || ce.Code != rally.CloseNormal || ce.Reason != "server says bye" {
		t.Fatalf("client read %v; want the server's 1000 close", err)
	}
	if ce := <-w.closes; ce.Code != rally.CloseNormal {
		t.Fatalf("server saw the end as %v; want 1000", ce)
	}

	on, off := w.counts()
	if off != 0 || on == 0 {
		t.Fatalf("%d callbacks ran on a loop owning the TLS socket, %d elsewhere; want all on the loop", on, off)
	}
}

// The same through net/http (ServeHTTP behind an http.Server whose
// listener is NewTLSListener, as rally serve --tls-cert does): the
// handshake on net/http's goroutine, then the loop.
func TestEventLoopServesWssThroughNetHTTPOnTheLoop(t *testing.T) {
	w := newWSSLoopServer()
	ts := httptest.NewUnstartedServer(w.Server)
	ts.Listener = rally.NewTLSListener(ts.Listener, tlsServerConfig(t))
	ts.Start()
	t.Cleanup(ts.Close)
	c := dialWSS(t, "wss"+strings.TrimPrefix(ts.URL, "http")+"/")
	echoOver(t, c, wssMessages()...)
	c.Close(rally.CloseNormal, "")
	if ce := <-w.closes; ce.Code != rally.CloseNormal {
		t.Fatalf("server saw the end as %v; want 1000", ce)
	}
	if on, off := w.counts(); off != 0 || on == 0 {
		t.Fatalf("%d callbacks ran on a loop owning the TLS socket, %d elsewhere; want all on the loop", on, off)
	}
}

// Compressed wss messages (permessage-deflate) echo on the loop too.
func TestEventLoopServesCompressedWssOnTheLoop(t *testing.T) {
	w := newWSSLoopServer()
	w.Server.Options = &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}
	url := serveWSS(t, w.Server)
	c, _, err := rally.Dial(context.Background(), url, &rally.DialOptions{
		TLSConfig:   &tls.Config{InsecureSkipVerify: true},
		Compression: &rally.CompressionOptions{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	echoOver(t, c, []byte("hello hello hello"), bytes.Repeat([]byte("compressible "), 100<<10))
	if on, off := w.counts(); off != 0 || on == 0 {
		t.Fatalf("%d callbacks ran on a loop owning the TLS socket, %d elsewhere; want all on the loop", on, off)
	}
}

// Idle wss connections on the loops hold no goroutine of their own: once
// their handshakes are over, opening more of them does not add one
// goroutine per connection (in goroutine mode each would hold a reader).
func TestEventLoopWssConnectionsHoldNoGoroutine(t *testing.T) {
	w := newWSSLoopServer()
	url := serveWSS(t, w.Server)
	first := dialWSS(t, url)
	echoOver(t, first, []byte("warm"))
	settle := func() int {
		// The handshakes' goroutines end once their 101 is written:
		// wait for the count to stop falling.
		n := runtime.NumGoroutine()
		for range 100 {
			time.Sleep(20 * time.Millisecond)
			m := runtime.NumGoroutine()
			if m == n {
				return n
			}
			n = m
		}
		return n
	}
	before := settle()
	const n = 40
	for range n {
		c := dialWSS(t, url)
		echoOver(t, c, []byte("ping"))
	}
	after := settle()
	if grew := after - before; grew >= n {
		t.Fatalf("%d idle wss connections added %d goroutines; want fewer than one each", n, grew)
	}
}

// A burst of large messages sent back to back, faster than one readiness
// event's share of reads, all come back whole and in order: records
// crypto/tls read ahead of the loop's buffer are not left waiting for the
// socket to become readable again.
func TestEventLoopWssBurstEchoesEveryMessageInOrder(t *testing.T) {
	w := newWSSLoopServer()
	url := serveWSS(t, w.Server)
	c := dialWSS(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n, size = 48, 100 << 10
	msg := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, size) }
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := c.Write(ctx, rally.Binary, msg(i)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := range n {
		_, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if !bytes.Equal(p, msg(i)) {
			t.Fatalf("echo %d: %d bytes, not the message sent", i, len(p))
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
