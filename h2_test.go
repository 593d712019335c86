package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/h2env"
	"github.com/rallyws/rally/internal/testcert"
)

// net/http reads GODEBUG=http2xconnect=1 from the environment once, when
// it initialises, so the test binary re-executes itself with it set
// before any test runs (as `rally serve` does). h2OffEnv marks a child
// started on purpose without it.
const h2OffEnv = "RALLY_TEST_H2_OFF"

func init() { h2env.Reexec(h2OffEnv) }

func requireH2(t *testing.T) {
	t.Helper()
	if err := rally.CheckHTTP2(); err != nil {
		t.Fatalf("the test binary did not re-execute itself with the setting: %v", err)
	}
}

// testCA is a certificate authority made for one test, and a server
// certificate it signed for 127.0.0.1 and localhost.
type testCA struct {
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	c := testcert.Issue(t)
	return &testCA{pool: c.Pool, server: c.TLS}
}

func (ca *testCA) clientConfig() *tls.Config { return &tls.Config{RootCAs: ca.pool} }

// h2Server is an HTTP server for h, over TLS with h2 and http/1.1 (tls)
// or without TLS with HTTP/1.1 and h2c; it counts the TCP connections it
// accepted.
type h2Server struct {
	*httptest.Server
	ws    string // the ws:// or wss:// URL
	conns atomic.Int64
}

func startH2Server(t testing.TB, h http.Handler, ca *testCA) *h2Server {
	t.Helper()
	return startH2ServerWith(t, h, ca, &http.HTTP2Config{MaxConcurrentStreams: 2000})
}

// startH2ServerWith is startH2Server with the server's HTTP/2
// configuration.
func startH2ServerWith(t testing.TB, h http.Handler, ca *testCA, conf *http.HTTP2Config) *h2Server {
	t.Helper()
	s := &h2Server{}
	ts := httptest.NewUnstartedServer(h)
	ts.Config.HTTP2 = conf
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Server = ts
	if ca != nil {
		ts.EnableHTTP2 = true
		ts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, NextProtos: []string{"h2", "http/1.1"}}
		ts.StartTLS()
		s.ws = "wss" + strings.TrimPrefix(ts.URL, "https")
	} else {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		ts.Config.Protocols = p
		ts.Start()
		s.ws = "ws" + strings.TrimPrefix(ts.URL, "http")
	}
	t.Cleanup(ts.Close)
	return s
}

// h2Dial dials url over HTTP/2 with a transport of the test's own, closed
// with the test.
func h2Dial(t *testing.T, url string, ca *testCA, opts *rally.DialOptions) (*rally.Conn, *http.Response) {
	t.Helper()
	if opts == nil {
		opts = &rally.DialOptions{}
	}
	if opts.HTTP2 == rally.HTTP2Never {
		opts.HTTP2 = rally.HTTP2Require
	}
	if opts.HTTP2Transport == nil {
		opts.HTTP2Transport = newH2Transport(t)
	}
	if ca != nil && opts.TLSConfig == nil {
		opts.TLSConfig = ca.clientConfig()
	}
	c, resp, err := rally.Dial(ctxT(t), url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, resp
}

func newH2Transport(t testing.TB) *http.Transport {
	tr := &http.Transport{ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// h2EchoServer echoes every message and records how each connection
// arrived and how it ended.
type h2EchoServer struct {
	rally.Server
	protos chan int
	closed chan *rally.CloseError
}

func newH2EchoServer(opts *rally.AcceptOptions) *h2EchoServer {
	e := &h2EchoServer{protos: make(chan int, 2000), closed: make(chan *rally.CloseError, 2000)}
	e.Server = rally.Server{
		Options: opts,
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			if r.Method != "PRI" { // an HTTP/1.1 server passes on an HTTP/2 preface
				e.protos <- r.ProtoMajor
			}
			return nil, true
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) { c.Write(context.Background(), typ, p) },
		Close:   func(c *rally.Conn, err *rally.CloseError) { e.closed <- err },
	}
	return e
}

func h2Modes() []struct {
	name string
	ca   bool
} {
	return []struct {
		name string
		ca   bool
	}{{"h2", true}, {"h2c", false}}
}

func TestHTTP2EchoesTextAndBinaryAndClosesWith1000(t *testing.T) {
	requireH2(t)
	for _, m := range h2Modes() {
		t.Run(m.name, func(t *testing.T) {
			var ca *testCA
			if m.ca {
				ca = newTestCA(t)
			}
			e := newH2EchoServer(nil)
			s := startH2Server(t, e, ca)
			c, resp := h2Dial(t, s.ws+"/ws", ca, nil)
			if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
				t.Fatalf("handshake answered %d over HTTP/%d, want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
			}
			if got := <-e.protos; got != 2 {
				t.Fatalf("server saw HTTP/%d", got)
			}
			ctx := ctxT(t)
			for _, size := range []int{0, 1, 125, 126, 65535, 65536, 300 << 10} {
				for _, typ := range []rally.MessageType{rally.Text, rally.Binary} {
					msg := bytes.Repeat([]byte{'a' + byte(size%26)}, size)
					if err := c.Write(ctx, typ, msg); err != nil {
						t.Fatal(err)
					}
					gt, got, err := c.Read(ctx)
					if err != nil {
						t.Fatalf("size %d: %v", size, err)
					}
					if gt != typ || !bytes.Equal(got, msg) {
						t.Fatalf("size %d %v: echo is %v of %d bytes", size, typ, gt, len(got))
					}
				}
			}
			if err := c.Close(rally.CloseNormal, "bye"); err != nil {
				t.Fatal(err)
			}
			if ce := <-e.closed; ce.Code != rally.CloseNormal || ce.Reason != "bye" {
				t.Fatalf("server saw the close as %v", ce)
			}
			if n := s.conns.Load(); n != 1 {
				t.Fatalf("server accepted %d TCP connections, want 1", n)
			}
		})
	}
}

func TestHTTP2NegotiatesSubprotocolAndCompressionAsHTTP1Does(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(&rally.AcceptOptions{
		Subprotocols: []string{"chat.v2", "chat.v1"},
		Compression:  &rally.CompressionOptions{},
	})
	s := startH2Server(t, e, ca)
	c, resp := h2Dial(t, s.ws, ca, &rally.DialOptions{Subprotocols: []string{"chat.v1", "chat.v2"}})
	if c.Subprotocol() != "chat.v2" || resp.Header.Get("Sec-WebSocket-Protocol") != "chat.v2" {
		t.Fatalf("subprotocol %q, header %q; want chat.v2", c.Subprotocol(), resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.HasPrefix(ext, "permessage-deflate") {
		t.Fatalf("extensions answered %q, want permessage-deflate", ext)
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != "" {
		t.Fatal("an HTTP/2 answer carries Sec-WebSocket-Accept")
	}
	msg := bytes.Repeat([]byte("compress me "), 1000)
	ctx := ctxT(t)
	if err := c.Write(ctx, rally.Text, msg); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
}

// rawStream opens an extended CONNECT stream with net/http's HTTP/2
// client directly, as a peer that is not rally: the test writes the
// WebSocket bytes itself and reads the server's.
type rawStream struct {
	resp *http.Response
	w    *io.PipeWriter
	rt   http.RoundTripper
	url  string
	tcp  net.Conn // the TLS connection under every stream of rt
}

// another opens a good WebSocket stream on the same HTTP/2 connection.
func (rs *rawStream) another(t *testing.T) *http.Response {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest("CONNECT", rs.url, pr)
	req.Header = http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}}
	resp, err := rs.rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func openRawStream(t *testing.T, s *h2Server, ca *testCA, method string, h http.Header) *rawStream {
	t.Helper()
	tr := newH2Transport(t)
	tr.Clone()
	tc, err := tls.Dial("tcp", s.Listener.Addr().String(), &tls.Config{RootCAs: ca.pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	rt := tr.TLSNextProto["h2"](s.Listener.Addr().String(), tc)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, method, s.URL+"/ws", pr)
	if h == nil {
		h = http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}}
	}
	req.Header = h
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &rawStream{resp: resp, w: pw, rt: rt, url: s.URL + "/ws", tcp: tc}
}

// maskedZeroKey builds a client frame masked with the key 0 (so the
// payload reads as it is).
func maskedZeroKey(b0 byte, payload []byte) []byte {
	return append([]byte{b0, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

func TestHTTP2RefusesBadRequestsWithTheStatusHTTP1Uses(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(nil)
	s := startH2Server(t, e, ca)
	cases := []struct {
		name   string
		method string
		h      http.Header
		status int
		header string // name: value the answer must carry
	}{
		{"GET over HTTP/2", "GET", http.Header{}, 405, "Allow: CONNECT"},
		{"version 8", "CONNECT", http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"8"}}, 426, "Sec-Websocket-Version: 13"},
		{"no version", "CONNECT", http.Header{":protocol": {"websocket"}}, 426, "Sec-Websocket-Version: 13"},
		{"foreign origin", "CONNECT", http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Origin": {"https://evil.example"}}, 403, ""},
		{"another protocol", "CONNECT", http.Header{":protocol": {"webtransport"}, "Sec-Websocket-Version": {"13"}}, 400, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := openRawStream(t, s, ca, tc.method, tc.h)
			if rs.resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", rs.resp.StatusCode, tc.status)
			}
			if tc.header != "" {
				name, value, _ := strings.Cut(tc.header, ": ")
				if got := rs.resp.Header.Get(name); got != value {
					t.Fatalf("%s: %q, want %q", name, got, value)
				}
			}
			if rs.resp.Header.Get("Connection") != "" {
				t.Fatal("a refusal over HTTP/2 carries a Connection header")
			}
			// Refusing one stream leaves the connection to the others
			// (a Connection: close would have made net/http send GOAWAY).
			if resp := rs.another(t); resp.StatusCode != 200 {
				t.Fatalf("the next WebSocket on the connection got %d", resp.StatusCode)
			}
		})
	}
}

// RFC 8441 section 5: END_STREAM is TCP's orderly close (FIN), and
// RST_STREAM is TCP's reset. Over TCP, a peer that goes without a close
// frame leaves the server with 1006; so it does over a stream.
func TestHTTP2StreamEndMapsToTCPEnd(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	cases := []struct {
		name string
		end  func(rs *rawStream)
		want uint16
	}{
		{"close frame then END_STREAM", func(rs *rawStream) {
			rs.w.Write(maskedZeroKey(0x88, []byte{0x03, 0xe8}))
			// The server answers with its close frame and ends the stream.
			got, _ := io.ReadAll(rs.resp.Body)
			if !bytes.Equal(got, []byte{0x88, 0x02, 0x03, 0xe8}) {
				panic(fmt.Sprintf("server's stream held % x, want its close frame 88 02 03 e8 and END_STREAM", got))
			}
			rs.w.Close()
		}, rally.CloseNormal},
		{"END_STREAM without a close frame", func(rs *rawStream) { rs.w.Close() }, rally.CloseAbnormal},
		// net/http's client resets a stream whose response body is closed
		// before the stream ended (RST_STREAM CANCEL).
		{"RST_STREAM CANCEL", func(rs *rawStream) { rs.resp.Body.Close() }, rally.CloseAbnormal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newH2EchoServer(nil)
			s := startH2Server(t, e, ca)
			rs := openRawStream(t, s, ca, "CONNECT", nil)
			if rs.resp.StatusCode != 200 {
				t.Fatalf("status %d", rs.resp.StatusCode)
			}
			// One message both ways first: the stream carries frames.
			rs.w.Write(maskedZeroKey(0x81, []byte("hi")))
			echo := make([]byte, 4)
			if _, err := io.ReadFull(rs.resp.Body, echo); err != nil || !bytes.Equal(echo, []byte{0x81, 0x02, 'h', 'i'}) {
				t.Fatalf("echo % x, %v", echo, err)
			}
			tc.end(rs)
			if ce := <-e.closed; ce.Code != tc.want {
				t.Fatalf("server saw the end as %v, want code %d", ce, tc.want)
			}
		})
	}
}

// The other direction: the server's orderly close reaches the client as a
// close frame followed by END_STREAM (the client's Read sees 1000 and the
// connection ends), CloseNow as END_STREAM without a close frame (1006).
func TestHTTP2ClientSeesServerCloseAndCut(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	for _, tc := range []struct {
		name string
		end  func(c *rally.Conn)
		want uint16
	}{
		{"Close", func(c *rally.Conn) { c.Close(rally.CloseGoingAway, "done") }, rally.CloseGoingAway},
		{"CloseNow", func(c *rally.Conn) { c.CloseNow() }, rally.CloseAbnormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startH2Server(t, &rally.Server{Open: tc.end}, ca)
			c, _ := h2Dial(t, s.ws, ca, nil)
			_, _, err := c.Read(ctxT(t))
			var ce *rally.CloseError
			if !errors.As(err, &ce) || ce.Code != tc.want {
				t.Fatalf("Read: %v, want a close with %d", err, tc.want)
			}
			waitDone(t, c)
		})
	}
}

func TestHTTP2ServerShutdownSendsGoingAway(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(nil)
	s := startH2Server(t, e, ca)
	c, _ := h2Dial(t, s.ws, ca, nil)
	<-e.protos
	read := make(chan error, 1)
	go func() { _, _, err := c.Read(context.Background()); read <- err }()
	if err := e.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var ce *rally.CloseError
	if err := <-read; !errors.As(err, &ce) || ce.Code != rally.CloseGoingAway {
		t.Fatalf("client read %v, want 1001", err)
	}
}

// A context that ends interrupts a read on the stream, not the stream:
// the next read gets the next message.
func TestHTTP2ReadCanceledByContextLeavesConnectionUsable(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	send := make(chan struct{})
	s := startH2Server(t, &rally.Server{Open: func(c *rally.Conn) {
		go func() {
			<-send
			c.Write(context.Background(), rally.Text, []byte("later"))
		}()
	}}, ca)
	c, _ := h2Dial(t, s.ws, ca, nil)
	ctx, cancel := context.WithCancel(context.Background())
	read := make(chan error, 1)
	go func() { _, _, err := c.Read(ctx); read <- err }()
	cancel()
	if err := <-read; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Read: %v", err)
	}
	close(send)
	_, got, err := c.Read(ctxT(t))
	if err != nil || string(got) != "later" {
		t.Fatalf("next Read: %q, %v", got, err)
	}
}

// Accept in a plain handler: over HTTP/2 the handler keeps the stream
// until the connection ends.
func TestHTTP2AcceptInAHandlerThatWaitsForDone(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	got := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := rally.Accept(w, r, nil)
		if err != nil {
			return
		}
		_, p, err := c.Read(r.Context())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(p)
		c.Close(rally.CloseNormal, "")
		<-c.Done()
	})
	s := startH2Server(t, h, ca)
	c, _ := h2Dial(t, s.ws, ca, nil)
	if err := c.Write(ctxT(t), rally.Text, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "hello" {
		t.Fatalf("handler read %q", g)
	}
	_, _, err := c.Read(ctxT(t))
	var ce *rally.CloseError
	if !errors.As(err, &ce) || ce.Code != rally.CloseNormal {
		t.Fatalf("client read %v, want 1000", err)
	}
}

// One HTTP/2 connection carries 1,000 WebSockets, each with traffic.
func TestHTTP2ThousandWebSocketsShareOneConnection(t *testing.T) {
	requireH2(t)
	n := 1000
	if testing.Short() {
		n = 300 // still more than net/http's default of 250 streams at once
	}
	for _, m := range h2Modes() {
		t.Run(m.name, func(t *testing.T) {
			var ca *testCA
			if m.ca {
				ca = newTestCA(t)
			}
			e := newH2EchoServer(nil)
			s := startH2Server(t, e, ca)
			opts := &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: newH2Transport(t)}
			if ca != nil {
				opts.TLSConfig = ca.clientConfig()
			}
			conns := make([]*rally.Conn, n)
			for i := range conns {
				conns[i], _ = h2Dial(t, s.ws, ca, opts)
			}
			// A bound for a slow, shared machine; nothing is timed.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i, c := range conns {
				wg.Go(func() {
					msg := fmt.Appendf(nil, "socket %d", i)
					for range 3 {
						if err := c.Write(ctx, rally.Text, msg); err != nil {
							errs <- err
							return
						}
						_, got, err := c.Read(ctx)
						if err != nil || !bytes.Equal(got, msg) {
							errs <- fmt.Errorf("socket %d: echo %q, %v", i, got, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := s.conns.Load(); got != 1 {
				t.Fatalf("server accepted %d TCP connections for %d WebSockets, want 1", got, n)
			}
			for _, c := range conns {
				c.Close(rally.CloseNormal, "")
			}
			for range n {
				if ce := <-e.closed; ce.Code != rally.CloseNormal {
					t.Fatalf("a socket ended with %v", ce)
				}
			}
		})
	}
}

func TestHTTP2PreferFallsBackToHTTP1WhenTLSDoesNotOfferH2(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(nil)
	ts := httptest.NewUnstartedServer(e)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, NextProtos: []string{"http/1.1"}}
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused ALPN is the point
	ts.StartTLS()
	defer ts.Close()
	url := "wss" + strings.TrimPrefix(ts.URL, "https")

	c, resp := h2Dial(t, url, ca, &rally.DialOptions{HTTP2: rally.HTTP2Prefer})
	if resp.StatusCode != 101 || <-e.protos != 1 {
		t.Fatalf("prefer: answered %d, want 101 over HTTP/1.1", resp.StatusCode)
	}
	c.CloseNow()

	_, _, err := rally.Dial(ctxT(t), url, &rally.DialOptions{HTTP2: rally.HTTP2Require, TLSConfig: ca.clientConfig(), HTTP2Transport: newH2Transport(t)})
	if !errors.Is(err, rally.ErrNoHTTP2) {
		t.Fatalf("require: %v, want ErrNoHTTP2", err)
	}
}

func TestHTTP2PreferFallsBackToHTTP1WhenH2CIsNotSpoken(t *testing.T) {
	requireH2(t)
	e := newH2EchoServer(nil)
	ts := httptest.NewServer(e) // HTTP/1.1 only
	defer ts.Close()
	url := "ws" + strings.TrimPrefix(ts.URL, "http")
	_, resp := h2Dial(t, url, nil, &rally.DialOptions{HTTP2: rally.HTTP2Prefer})
	if resp.StatusCode != 101 || <-e.protos != 1 {
		t.Fatalf("prefer: answered %d, want 101 over HTTP/1.1", resp.StatusCode)
	}
}

// Without GODEBUG=http2xconnect=1, net/http does not advertise extended
// CONNECT: rally says so (CheckHTTP2, a 400 naming the setting to an
// HTTP/2 request, a warning in the log), and a client that prefers HTTP/2
// falls back to HTTP/1.1 while one that requires it gets ErrNoHTTP2. The
// setting is per process, so this runs in a child without it.
func TestHTTP2OffIsReportedNeverSilent(t *testing.T) {
	if os.Getenv(h2OffEnv) == "" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^TestHTTP2OffIsReportedNeverSilent$", "-test.v")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GODEBUG=") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, h2OffEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestHTTP2OffIsReportedNeverSilent")) {
			t.Fatalf("child without the setting: %v\n%s", err, out)
		}
		return
	}
	if err := rally.CheckHTTP2(); !errors.Is(err, rally.ErrHTTP2Disabled) || !strings.Contains(err.Error(), "GODEBUG=http2xconnect=1") {
		t.Fatalf("CheckHTTP2: %v", err)
	}
	ca := newTestCA(t)
	var logged syncBuffer
	e := newH2EchoServer(nil)
	e.Options = &rally.AcceptOptions{ConnOptions: rally.ConnOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))}}
	s := startH2Server(t, e, ca)

	// An HTTP/2 request to the endpoint: a 400 that names the setting.
	req, _ := http.NewRequest("GET", s.URL+"/ws", nil)
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: ca.clientConfig()}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 400 || !strings.Contains(string(body), "GODEBUG=http2xconnect=1") {
		t.Fatalf("HTTP/%d %d %q, want HTTP/2 400 naming GODEBUG=http2xconnect=1", resp.ProtoMajor, resp.StatusCode, body)
	}
	if !strings.Contains(logged.String(), "GODEBUG=http2xconnect=1") {
		t.Fatalf("log: %q, want a warning naming the setting", logged.String())
	}
	<-e.protos

	_, _, err = rally.Dial(ctxT(t), s.ws, &rally.DialOptions{HTTP2: rally.HTTP2Require, TLSConfig: ca.clientConfig(), HTTP2Transport: newH2Transport(t)})
	if !errors.Is(err, rally.ErrNoHTTP2) {
		t.Fatalf("require: %v, want ErrNoHTTP2", err)
	}
	c, resp := h2Dial(t, s.ws, ca, &rally.DialOptions{HTTP2: rally.HTTP2Prefer})
	if resp.StatusCode != 101 || <-e.protos != 1 {
		t.Fatalf("prefer: answered %d, want 101 over HTTP/1.1", resp.StatusCode)
	}
	c.Close(rally.CloseNormal, "")
}

// Limits hold over HTTP/2 as over HTTP/1.1: a message past ReadLimit
// closes the connection with 1009.
func TestHTTP2MessagePastReadLimitClosesWith1009(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(&rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 100}})
	s := startH2Server(t, e, ca)
	c, _ := h2Dial(t, s.ws, ca, nil)
	ctx := ctxT(t)
	if err := c.Write(ctx, rally.Binary, make([]byte, 101)); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Read(ctx)
	var ce *rally.CloseError
	if !errors.As(err, &ce) || ce.Code != rally.CloseTooBig {
		t.Fatalf("client read %v, want 1009", err)
	}
	if got := <-e.closed; got.Code != rally.CloseTooBig {
		t.Fatalf("server ended with %v", got)
	}
}

// streamsUsed returns what budget has charged to HTTP/2 streams.
func streamsUsed(budget *rally.MemoryBudget) (used int64, refused uint64) {
	for _, st := range budget.Stats() {
		if st.Category == rally.MemoryStreams {
			return st.Used, st.Refused
		}
	}
	return -1, 0
}

func TestHTTP2StreamsPastTheBudgetAreRefusedWith503AndTheirChargeReturnsWhenTheTCPConnectionGoes(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	// Room for the connection (32 KiB, a frame buffer of 16 KiB and a
	// window of 64 KiB) and two streams (32 KiB each), within the 75%
	// that what connections hold may take (192 KiB), not three.
	budget := rally.NewMemoryBudget(256 << 10)
	e := newH2EchoServer(&rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}})
	s := startH2ServerWith(t, e, ca, &http.HTTP2Config{MaxReadFrameSize: 16 << 10, MaxReceiveBufferPerConnection: 64 << 10})
	rs := openRawStream(t, s, ca, "CONNECT", nil)
	second := rs.another(t)
	if rs.resp.StatusCode != 200 || second.StatusCode != 200 {
		t.Fatalf("first two streams: %d and %d, want 200", rs.resp.StatusCode, second.StatusCode)
	}
	used, _ := streamsUsed(budget)
	if used <= 0 {
		t.Fatalf("two streams open, %d bytes charged to h2_streams", used)
	}
	third := rs.another(t)
	if third.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third stream: %d, want 503", third.StatusCode)
	}
	body, _ := io.ReadAll(third.Body)
	if !strings.Contains(string(body), "memory budget") {
		t.Fatalf("third stream: %d %q, want 503 naming the memory budget", third.StatusCode, body)
	}
	if now, refused := streamsUsed(budget); now != used || refused != 1 {
		t.Fatalf("after the refusal: %d bytes charged, %d refused; want %d and 1", now, refused, used)
	}

	// The peer goes away without a word: both streams end, and their
	// charge is given back.
	rs.tcp.Close()
	for range 2 {
		if ce := <-e.closed; ce.Code != rally.CloseAbnormal {
			t.Fatalf("a stream ended with %v, want 1006", ce)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		used, _ := streamsUsed(budget)
		if used == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still charged to h2_streams after the TCP connection went", used)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := budget.Used(); got != 0 {
		t.Fatalf("budget holds %d bytes after every stream ended, want 0", got)
	}
}

// What net/http holds for an HTTP/2 connection is charged once, with its
// first WebSocket stream, at what the server lets a client make it hold:
// a frame buffer as large as MaxReadFrameSize and a receive window of
// MaxReceiveBufferPerConnection (1 MiB each by default). It goes back
// with the connection's last stream.
func TestAnHTTP2ConnectionIsChargedItsFrameBufferAndWindowOnceForAllItsStreams(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	charges := func(conf *http.HTTP2Config) (first, second int64) {
		budget := rally.NewMemoryBudget(1 << 30)
		e := newH2EchoServer(&rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}})
		s := startH2ServerWith(t, e, ca, conf)
		rs := openRawStream(t, s, ca, "CONNECT", nil)
		if rs.resp.StatusCode != 200 {
			t.Fatalf("stream answered %d", rs.resp.StatusCode)
		}
		first, _ = streamsUsed(budget)
		if r := rs.another(t); r.StatusCode != 200 {
			t.Fatalf("second stream answered %d", r.StatusCode)
		}
		second, _ = streamsUsed(budget)
		rs.tcp.Close()
		for range 2 {
			<-e.closed
		}
		for deadline := time.Now().Add(30 * time.Second); budget.Used() != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d bytes still charged after the TCP connection went", budget.Used())
			}
		}
		return first, second
	}
	small1, small2 := charges(&http.HTTP2Config{MaxConcurrentStreams: 100, MaxReadFrameSize: 16 << 10, MaxReceiveBufferPerConnection: 64 << 10})
	def1, def2 := charges(&http.HTTP2Config{MaxConcurrentStreams: 100})
	stream := small2 - small1
	if def2-def1 != stream {
		t.Fatalf("a second stream costs %d with small buffers and %d with the defaults, want the same", stream, def2-def1)
	}
	if small1 <= stream {
		t.Fatalf("the first stream costs %d, the second %d: the connection is not charged", small1, stream)
	}
	if want := int64(1<<20-16<<10) + int64(1<<20-64<<10); def1-small1 != want {
		t.Fatalf("net/http's default frame buffer and window charged %d more than 16 KiB and 64 KiB, want %d", def1-small1, want)
	}
}

// Two HTTP/2 connections are charged as two even when a middleware gave
// their requests the same r.RemoteAddr (a "real IP" handler reading a
// header any client can set).
func TestHTTP2ConnectionsWhoseRequestsNameTheSameClientAreChargedApart(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	budget := rally.NewMemoryBudget(1 << 30)
	e := newH2EchoServer(&rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}})
	realIP := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.1:1"
		e.ServeHTTP(w, r)
	})
	s := startH2ServerWith(t, realIP, ca, &http.HTTP2Config{MaxConcurrentStreams: 100, MaxReadFrameSize: 16 << 10, MaxReceiveBufferPerConnection: 64 << 10})
	a := openRawStream(t, s, ca, "CONNECT", nil)
	one, _ := streamsUsed(budget)
	b := openRawStream(t, s, ca, "CONNECT", nil)
	two, _ := streamsUsed(budget)
	if a.resp.StatusCode != 200 || b.resp.StatusCode != 200 {
		t.Fatalf("streams answered %d and %d", a.resp.StatusCode, b.resp.StatusCode)
	}
	if two != 2*one {
		t.Fatalf("one connection of one stream charged %d, two %d: want twice as much", one, two)
	}
}

// rally's client keeps a transport of its own for each
// DialOptions.TLSConfig it dials HTTP/2 with: a program that makes a
// tls.Config for each Dial does not leave a transport behind each.
func TestAClientMakingATLSConfigForEachDialLeavesNoTransportBehind(t *testing.T) {
	requireH2(t)
	ca := newTestCA(t)
	e := newH2EchoServer(nil)
	s := startH2Server(t, e, ca)
	before := rally.H2TransportsForTest()
	for range 20 {
		c, _, err := rally.Dial(ctxT(t), s.ws, &rally.DialOptions{HTTP2: rally.HTTP2Require, TLSConfig: ca.clientConfig()})
		if err != nil {
			t.Fatal(err)
		}
		if !c.HTTP2() {
			t.Fatal("not over HTTP/2")
		}
		c.Close(rally.CloseNormal, "")
	}
	for deadline := time.Now().Add(30 * time.Second); rally.H2TransportsForTest() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rally keeps %d transports after 20 Dials, each with a tls.Config of its own, had %d before", rally.H2TransportsForTest(), before)
		}
		runtime.GC()
	}
}
