package rally_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// An idle connection on an event loop is its state and its registration:
// once its messages have been answered it holds no read buffer, no send
// queue buffer, no timer (its pings and idle timeout are the loop's sweep),
// no goroutine, nothing made for features it does not use. A second
// connection of the same loop looks at the first from its own callback, on
// the loop goroutine, and sends back what it found.
func TestEventLoopIdleConnectionHoldsNoBufferNorTimer(t *testing.T) {
	var mu sync.Mutex
	var conns []*rally.Conn
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 1,
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
			PingInterval: time.Hour, IdleTimeout: 2 * time.Hour, // the sweep's, not a timer per connection
		}},
		Open: func(c *rally.Conn) {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if string(p) != "inspect" {
				c.Send(typ, p) // echo
				return
			}
			mu.Lock()
			first := conns[0]
			mu.Unlock()
			held := rally.IdleHoldings(first)
			c.Send(rally.Text, []byte("holds: "+strings.Join(held, ", ")))
		},
	}
	addr := serve(t, s)
	ctx := context.Background()
	idle := dialLoopClient(t, addr)
	// A message spread over two writes, and one of 40 KiB: the read side
	// and the send queue were used.
	for _, msg := range []string{"hello", strings.Repeat("x", 40<<10)} {
		if err := idle.Write(ctx, rally.Text, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, p, err := idle.Read(ctx); err != nil || string(p) != msg {
			t.Fatalf("echo: %d bytes, %v", len(p), err)
		}
	}
	other := dialLoopClient(t, addr)
	if err := other.Write(ctx, rally.Text, []byte("inspect")); err != nil {
		t.Fatal(err)
	}
	_, p, err := other.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p); got != "holds: " {
		t.Fatalf("the idle connection %s; want nothing", got)
	}
}

func dialLoopClient(t *testing.T, addr string) *rally.Conn {
	t.Helper()
	c, _, err := rally.Dial(context.Background(), "ws://"+addr+"/", &rally.DialOptions{Compression: &rally.CompressionOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// An event loop keeps a connection's addresses compactly (the remote one
// as its bytes and port): LocalAddr and RemoteAddr still give the server's
// address and the client's, over IPv4 and IPv6.
func TestAnEventLoopConnectionsAddressesAreTheSocketsOverIPv4AndIPv6(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			ln, err := net.Listen(network, map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network])
			if err != nil {
				t.Skipf("no %s loopback on this machine: %v", network, err)
			}
			got := make(chan [2]string, 1)
			s := &rally.Server{EventLoop: true, Open: func(c *rally.Conn) {
				got <- [2]string{c.LocalAddr().String(), c.RemoteAddr().String()}
			}}
			hs := &http.Server{Handler: s}
			go hs.Serve(ln)
			t.Cleanup(func() { hs.Close() })
			p, _, err := rawpeer.DialClient(ln.Addr().String(), "/", nil, wireTimeout())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			want := [2]string{p.NetConn().RemoteAddr().String(), p.NetConn().LocalAddr().String()}
			if addrs := <-got; addrs != want {
				t.Fatalf("local and remote addresses %v, want %v", addrs, want)
			}
		})
	}
}
