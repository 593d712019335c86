package interop_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/h2env"
	"github.com/rallyws/rally/internal/testcert"
	"github.com/rallyws/rally/server"
)

// WebSockets over HTTP/2 (RFC 8441) against Node's own http2 module
// (interop/node/h2-peer.mjs), an implementation independent of Go's, both
// ways, over TLS with a CA made for the test (h2) and without TLS (h2c).

// rally's servers accept extended CONNECT only when the process starts
// with GODEBUG=http2xconnect=1, so the test binary re-executes itself with
// it (as `rally serve` does).
func init() { h2env.Reexec("") }

// h2CA is a CA and a certificate it signed for 127.0.0.1, in memory and
// as PEM files for node.
type h2CA struct {
	pool             *x509.CertPool
	cert             tls.Certificate
	caFile, certFile string
	keyFile          string
}

func newH2CA(t *testing.T) *h2CA {
	t.Helper()
	c := testcert.Issue(t)
	return &h2CA{pool: c.Pool, cert: c.TLS, caFile: c.CAFile, certFile: c.CertFile, keyFile: c.KeyFile}
}

// h2Event is one line of h2-peer.mjs.
type h2Event struct {
	Ev       string `json:"ev"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Version  string `json:"version"`
	Code     int    `json:"code"`
	OK       int    `json:"ok"`
	Message  string `json:"message"`
}

// startH2Peer runs h2-peer.mjs with args and returns its events; the
// process is killed when the test ends.
func startH2Peer(t *testing.T, args ...string) <-chan h2Event {
	t.Helper()
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nodePath(t), append([]string{filepath.Join(dir, "h2-peer.mjs")}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	events := make(chan h2Event, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e h2Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		<-done
		if t.Failed() {
			t.Logf("h2-peer.mjs stderr:\n%s", stderr.String())
		}
	})
	return events
}

// next returns the next event, failing t when the peer ends first.
func next(t *testing.T, events <-chan h2Event) h2Event {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatal("h2-peer.mjs exited")
		}
		return e
	case <-time.After(time.Minute):
		t.Fatal("no event from h2-peer.mjs within a minute")
	}
	return h2Event{}
}

// Node's http2 client opens 100 WebSockets over one session to a rally
// Server; each echoes and closes with 1000.
func TestNodeHTTP2ClientTalksToRallyServer(t *testing.T) {
	nodePath(t)
	const n = 100
	for _, secure := range []bool{true, false} {
		name := map[bool]string{true: "h2", false: "h2c"}[secure]
		t.Run(name, func(t *testing.T) {
			var conns atomic.Int64
			closed := make(chan *rally.CloseError, n)
			protos := make(chan int, n)
			srv := httptest.NewUnstartedServer(&rally.Server{
				Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
					protos <- r.ProtoMajor
					return nil, true
				},
				Message: func(c *rally.Conn, typ rally.MessageType, p []byte) { c.Write(context.Background(), typ, p) },
				Close:   func(c *rally.Conn, ce *rally.CloseError) { closed <- ce },
			})
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			args := []string{"client"}
			if secure {
				ca := newH2CA(t)
				srv.EnableHTTP2 = true
				srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.cert}}
				srv.StartTLS()
				args = append(args, srv.URL+"/ws", fmt.Sprint(n), "--ca", ca.caFile)
			} else {
				p := new(http.Protocols)
				p.SetHTTP1(true)
				p.SetUnencryptedHTTP2(true)
				srv.Config.Protocols = p
				srv.Start()
				args = append(args, srv.URL+"/ws", fmt.Sprint(n))
			}
			defer srv.Close()
			events := startH2Peer(t, args...)
			if e := next(t, events); e.Ev != "done" || e.OK != n {
				t.Fatalf("node client: %+v", e)
			}
			for range n {
				if p := <-protos; p != 2 {
					t.Fatalf("a WebSocket arrived over HTTP/%d", p)
				}
				if ce := <-closed; ce.Code != rally.CloseNormal {
					t.Fatalf("a WebSocket ended with %v", ce)
				}
			}
			if c := conns.Load(); c != 1 {
				t.Fatalf("%d TCP connections for %d WebSockets, want 1", c, n)
			}
		})
	}
}

// rally's client opens 100 WebSockets to Node's http2 server, sharing one
// session; each echoes text and binary and closes with 1000.
func TestRallyClientTalksToNodeHTTP2Server(t *testing.T) {
	nodePath(t)
	const n = 100
	for _, secure := range []bool{true, false} {
		name := map[bool]string{true: "h2", false: "h2c"}[secure]
		t.Run(name, func(t *testing.T) {
			opts := &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: &http.Transport{ForceAttemptHTTP2: true}}
			defer opts.HTTP2Transport.CloseIdleConnections()
			args := []string{"server"}
			scheme := "ws"
			if secure {
				ca := newH2CA(t)
				args = append(args, "--tls", ca.certFile, ca.keyFile)
				opts.TLSConfig = &tls.Config{RootCAs: ca.pool}
				scheme = "wss"
			}
			events := startH2Peer(t, args...)
			e := next(t, events)
			if e.Ev != "listening" {
				t.Fatalf("node server: %+v", e)
			}
			url := fmt.Sprintf("%s://127.0.0.1:%d/echo", scheme, e.Port)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conns := make([]*rally.Conn, n)
			for i := range conns {
				c, resp, err := rally.Dial(ctx, url, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer c.CloseNow()
				if resp.StatusCode != 200 || !c.HTTP2() {
					t.Fatalf("answered %d, HTTP2 %v", resp.StatusCode, c.HTTP2())
				}
				conns[i] = c
			}
			for i, c := range conns {
				for _, typ := range []rally.MessageType{rally.Text, rally.Binary} {
					msg := fmt.Appendf(nil, "message %d", i)
					if err := c.Write(ctx, typ, msg); err != nil {
						t.Fatal(err)
					}
					gt, got, err := c.Read(ctx)
					if err != nil || gt != typ || string(got) != string(msg) {
						t.Fatalf("echo %v %q, %v", gt, got, err)
					}
				}
				if err := c.Close(rally.CloseNormal, ""); err != nil {
					t.Fatal(err)
				}
			}
			sessions, streams, closes := 0, 0, 0
			for closes < n {
				switch e := next(t, events); e.Ev {
				case "session":
					sessions++
				case "stream":
					streams++
					if e.Protocol != "websocket" || e.Version != "13" {
						t.Fatalf("stream %+v", e)
					}
				case "closed":
					closes++
					if e.Code != 1000 {
						t.Fatalf("node saw a close with %d", e.Code)
					}
				}
			}
			if sessions != 1 || streams != n {
				t.Fatalf("%d sessions and %d streams for %d WebSockets, want 1 and %d", sessions, streams, n, n)
			}
		})
	}
}

// Node's http2 client opens 1,000 WebSockets at once over one session to
// the server behind `rally serve` (its /echo, which allows 1,000 streams
// per connection), over h2 (TLS listener) and h2c (--h2c); /metrics counts
// them under their protocol.
func TestNodeHTTP2ClientTalksToRallyServe(t *testing.T) {
	nodePath(t)
	const n = 1000
	for _, secure := range []bool{true, false} {
		name := map[bool]string{true: "h2", false: "h2c"}[secure]
		t.Run(name, func(t *testing.T) {
			cfg := server.Config{ShutdownTimeout: 2 * time.Second, HandshakeRate: -1, Logger: slog.New(slog.DiscardHandler)}
			scheme := "http"
			var ca *h2CA
			if secure {
				ca = newH2CA(t)
				cfg.TLSCert, cfg.TLSKey = ca.certFile, ca.keyFile
				scheme = "https"
			} else {
				cfg.H2C = true
			}
			srv, err := server.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ctx, ln) }()
			defer func() {
				cancel()
				<-served
			}()
			base := scheme + "://" + ln.Addr().String()
			args := []string{"client", base + "/echo", fmt.Sprint(n)}
			if secure {
				args = append(args, "--ca", ca.caFile)
			}
			events := startH2Peer(t, args...)
			if e := next(t, events); e.Ev != "done" || e.OK != n {
				t.Fatalf("node client: %+v", e)
			}
			tr := &http.Transport{ForceAttemptHTTP2: true}
			if secure {
				tr.TLSClientConfig = &tls.Config{RootCAs: ca.pool}
			}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf(`rally_connections_by_protocol_total{protocol=%q} %d`, name, n)
			if !strings.Contains(string(body), want) {
				t.Fatalf("/metrics lacks %s", want)
			}
		})
	}
}
