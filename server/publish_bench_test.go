package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// BenchmarkServePublish measures what rally serve spends per publish on
// its two publish paths, with 32 subscribers on /ws (raw clients that read
// and discard), 16 bytes of data:
//
//   - WS: a publish request of a /ws client, handled as the connection's
//     Message callback handles it, one at a time (Each) or 16 from one
//     cork (Batch16: one read batch of 16 requests), without and with an
//     "id" (which gets an ack).
//   - HTTP: POST /publish/{topic} through the server's handler, without
//     the network (the request and the recorder are reused, so what
//     net/http itself allocates per request is not counted), with a JSON
//     body and with a text body.
func BenchmarkServePublish(b *testing.B) {
	const data = `"0123456789abcd"` // 16 bytes of JSON
	s, pub := publishSetup(b, 32)

	for _, id := range []string{"", `,"id":7`} {
		req := []byte(`{"type":"publish","topic":"bench","data":` + data + id + `}`)
		for _, batch := range []int{1, 16} {
			name := "WS/Each"
			if batch > 1 {
				name = fmt.Sprintf("WS/Batch%d", batch)
			}
			if id != "" {
				name += "/WithID"
			}
			b.Run(name, func(b *testing.B) {
				publish := func(n int) {
					for i := 0; i < n; i += batch {
						pub.Cork(func() {
							for range min(batch, n-i) {
								s.wsMessage(pub, rally.Text, req)
							}
						})
					}
				}
				publish(2 * batch) // warm up: queues and pools
				b.ReportAllocs()
				b.ResetTimer()
				publish(b.N)
			})
		}
	}

	h := s.Handler()
	for _, body := range []struct{ name, contentType, body string }{
		{"JSON", "application/json", data},
		{"Text", "text/plain", "0123456789abcdef"},
	} {
		b.Run("HTTP/"+body.name, func(b *testing.B) {
			r := &reusedBody{}
			req, err := http.NewRequestWithContext(context.Background(), "POST", "/publish/bench", r)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", body.contentType)
			rec := &recorder{header: http.Header{}}
			publish := func() {
				r.Reset(body.body)
				req.ContentLength = int64(len(body.body))
				h.ServeHTTP(rec, req)
				if rec.status != http.StatusOK {
					b.Fatalf("POST /publish/bench: status %d", rec.status)
				}
			}
			publish()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				publish()
			}
		})
	}
}

// publishSetup serves rally serve with subscribers raw /ws clients
// subscribed to the topic "bench", which read and discard, and returns
// the server and its side of one more /ws connection, to publish from.
func publishSetup(t testing.TB, subscribers int) (*Server, *rally.Conn) {
	t.Helper()
	s, ws := serveWithOpen(t, Config{BufferLimit: 64 << 20})
	addr := strings.TrimPrefix(ws.addr, "ws://")
	for range subscribers {
		p, _, err := rawpeer.DialClient(addr, "/ws", nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		<-ws.opened
		if err := p.WriteFrame(rawpeer.Text(`{"type":"subscribe","topic":"bench","id":1}`)); err != nil {
			t.Fatal(err)
		}
		if f, err := p.ReadFrame(); err != nil || string(f.Payload) != `{"type":"ack","id":1}` {
			t.Fatalf("subscribe: %q, %v", f.Payload, err)
		}
		nc := p.NetConn()
		nc.SetReadDeadline(time.Time{})
		go io.Copy(io.Discard, nc)
	}
	pp, _, err := rawpeer.DialClient(addr, "/ws", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pp.Close() })
	pub := <-ws.opened
	pp.NetConn().SetReadDeadline(time.Time{})
	go io.Copy(io.Discard, pp.NetConn()) // the acks
	return s, pub
}

// reusedBody is a request body that can be read again after Reset.
type reusedBody struct{ strings.Reader }

func (r *reusedBody) Close() error { return nil }

// wsHook is a server whose /ws connections are handed to the test as they
// open.
type wsHook struct {
	addr   string
	opened chan *rally.Conn
}

// serveWithOpen serves cfg like serve, and hands each /ws connection to
// the caller once it is open.
func serveWithOpen(t testing.TB, cfg Config) (*Server, *wsHook) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = ln.Addr().String()
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.EventLoop = cfg.EventLoop || eventLoopUnderTest
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	hook := &wsHook{addr: "ws://" + ln.Addr().String(), opened: make(chan *rally.Conn, 64)}
	open := s.ws.Open
	s.ws.Open = func(c *rally.Conn) {
		open(c)
		hook.opened <- c
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s, hook
}
