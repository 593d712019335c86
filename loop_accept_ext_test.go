package rally_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// The conformance suite against Serve on a raw listener with event loops:
// the loops read and answer the handshakes too (on Linux).
func TestEventLoopServeOnARawListenerPassesTheConformanceSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	ln := listen(t)
	serveOn(t, loopConformanceServer(), ln)
	strictConformance(t, "ws://"+ln.Addr().String()+"/", "rally-event-loop-serve")
}

// serveOn runs s.Serve(ln) until the test ends.
func serveOn(t *testing.T, s *rally.Server, ln net.Listener) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wireTimeout())
		defer cancel()
		s.Shutdown(ctx)
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
}

// A TLS listener's connections are not plain sockets: their handshakes
// are read on a goroutine, and the connections served as with net/http.
func TestEventLoopServeOnATLSListenerServesItsConnections(t *testing.T) {
	s := loopEcho(nil)
	ln := rally.NewTLSListener(listen(t), tlsServerConfig(t))
	serveOn(t, s, ln)
	ctx, cancel := context.WithTimeout(context.Background(), wireTimeout())
	defer cancel()
	c, _, err := rally.Dial(ctx, "wss://"+ln.Addr().String()+"/", &rally.DialOptions{
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, rally.Text, []byte("over TLS")); err != nil {
		t.Fatal(err)
	}
	if typ, p, err := c.Read(ctx); err != nil || typ != rally.Text || string(p) != "over TLS" {
		t.Fatalf("echo: %v %q %v", typ, p, err)
	}
}

// The loops read the heads of a Unix listener's connections too.
func TestEventLoopServeOnAUnixListenerAnswersAndEchoes(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "ws.sock"))
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, loopEcho(nil), ln)
	nc, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(wireTimeout()))
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	nc.Write(append([]byte(req), maskedZero(hx("81 02 68 69"))...))
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v, %v; want 101", resp, err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "\x81\x02hi" {
		t.Fatalf("echo % x, %v; want 81 02 68 69", got, err)
	}
}
