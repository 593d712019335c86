package rally_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rallyws/rally"
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

func TestEventLoopServerServesARawListener(t *testing.T) {
	s := loopEcho(nil)
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	p := dialPeer(t, ln.Addr().String())
	p.WriteRaw(maskedZero(hx("81 02 68 69")))
	wantWire(t, p, "81 02 68 69")
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	p.ExpectClose(t, 1001)
	p.WriteRaw(maskedZero(hx("88 02 03 e9")))
	p.ExpectEOF(t)
	p.Close()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

var _ = httptest.NewServer
