package rally_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/rallyws/rally"
)

// The same echo server reached over HTTP/1.1 and over HTTP/2, with TLS
// and without: what HTTP/2's framing and flow control cost per message.
//
//	go test -run '^$' -bench 'HTTP2' -benchtime 2000x .
func BenchmarkHTTP2Echo(b *testing.B) {
	ca := newTestCA(b)
	e := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) { c.Write(context.Background(), typ, p) }}
	tlsSrv := startH2Server(b, e, ca)
	plainSrv := startH2Server(b, e, nil)
	for _, tc := range []struct {
		name  string
		srv   *h2Server
		http2 rally.HTTP2Mode
	}{
		{"http1.1+tls", tlsSrv, rally.HTTP2Never},
		{"h2", tlsSrv, rally.HTTP2Require},
		{"http1.1", plainSrv, rally.HTTP2Never},
		{"h2c", plainSrv, rally.HTTP2Require},
	} {
		for _, size := range []int{16, 1024} {
			b.Run(fmt.Sprintf("%s/%dB", tc.name, size), func(b *testing.B) {
				tr := &http.Transport{ForceAttemptHTTP2: true}
				defer tr.CloseIdleConnections()
				ctx := context.Background()
				c, _, err := rally.Dial(ctx, tc.srv.ws, &rally.DialOptions{HTTP2: tc.http2, HTTP2Transport: tr, TLSConfig: ca.clientConfig()})
				if err != nil {
					b.Fatal(err)
				}
				defer c.CloseNow()
				msg := bytes.Repeat([]byte{'x'}, size)
				buf := make([]byte, 0, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Write(ctx, rally.Binary, msg); err != nil {
						b.Fatal(err)
					}
					if _, buf, err = c.ReadAppend(ctx, buf[:0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// Opening 1,000 WebSockets: 1,000 TCP+TLS handshakes over HTTP/1.1, or
// 1,000 streams on one HTTP/2 connection.
//
//	go test -run '^$' -bench 'HTTP2Connect' -benchtime 3x .
func BenchmarkHTTP2Connect1000(b *testing.B) {
	ca := newTestCA(b)
	srv := startH2Server(b, &rally.Server{}, ca)
	for _, tc := range []struct {
		name  string
		http2 rally.HTTP2Mode
	}{{"http1.1+tls", rally.HTTP2Never}, {"h2", rally.HTTP2Require}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			conns := make([]*rally.Conn, 1000)
			for b.Loop() {
				tr := &http.Transport{ForceAttemptHTTP2: true}
				opts := &rally.DialOptions{HTTP2: tc.http2, HTTP2Transport: tr, TLSConfig: ca.clientConfig()}
				for i := range conns {
					c, _, err := rally.Dial(ctx, srv.ws, opts)
					if err != nil {
						b.Fatal(err)
					}
					conns[i] = c
				}
				b.StopTimer()
				for _, c := range conns {
					c.CloseNow()
				}
				tr.CloseIdleConnections()
				b.StartTimer()
			}
		})
	}
}

// Chat: 16 members, one of them sends 16 B, the server sends it to every
// member (each member's client reads it). Over HTTP/2 the 16 members are
// 16 streams of one connection.
//
//	go test -run '^$' -bench 'HTTP2Chat' -benchtime 2000x .
func BenchmarkHTTP2Chat16B(b *testing.B) {
	const members = 16
	ca := newTestCA(b)
	for _, tc := range []struct {
		name  string
		tls   bool
		http2 rally.HTTP2Mode
	}{
		{"http1.1+tls", true, rally.HTTP2Never},
		{"h2", true, rally.HTTP2Require},
		{"http1.1", false, rally.HTTP2Never},
		{"h2c", false, rally.HTTP2Require},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var mu sync.Mutex
			room := map[*rally.Conn]bool{}
			joined := make(chan struct{}, members)
			chat := &rally.Server{
				Open: func(c *rally.Conn) {
					mu.Lock()
					room[c] = true
					mu.Unlock()
					joined <- struct{}{}
				},
				Message: func(_ *rally.Conn, typ rally.MessageType, p []byte) {
					mu.Lock()
					defer mu.Unlock()
					for m := range room {
						m.Send(typ, p)
					}
				},
			}
			var srvCA *testCA
			if tc.tls {
				srvCA = ca
			}
			srv := startH2Server(b, chat, srvCA)
			tr := &http.Transport{ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			ctx := context.Background()
			conns := make([]*rally.Conn, members)
			for i := range conns {
				c, _, err := rally.Dial(ctx, srv.ws, &rally.DialOptions{HTTP2: tc.http2, HTTP2Transport: tr, TLSConfig: ca.clientConfig()})
				if err != nil {
					b.Fatal(err)
				}
				defer c.CloseNow()
				conns[i] = c
			}
			for range members {
				<-joined
			}
			msg := bytes.Repeat([]byte{'x'}, 16)
			bufs := make([][]byte, members)
			b.ReportAllocs()
			for b.Loop() {
				if err := conns[0].Write(ctx, rally.Text, msg); err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				for i, c := range conns {
					wg.Go(func() {
						var err error
						if _, bufs[i], err = c.ReadAppend(ctx, bufs[i][:0]); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
