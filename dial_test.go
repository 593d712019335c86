package rally

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// rawServer accepts loopback connections until the test ends and serves
// each on its own goroutine with serve, within testTimeout. The test ends
// only once every serve has returned.
func rawServer(t *testing.T, serve func(nc net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(testTimeout))
				serve(nc, bufio.NewReader(nc))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readHead reads a request head and returns it as sent and parsed.
func readHead(br *bufio.Reader) (string, *http.Request, error) {
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return head.String(), nil, err
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head.String())))
	return head.String(), r, err
}

// answeringServer answers each request head with what answer returns, in
// one write, then reads until the client closes. It reports each head as
// sent on the returned channel.
func answeringServer(t *testing.T, answer func(r *http.Request) []byte) (string, <-chan string) {
	t.Helper()
	heads := make(chan string, 4)
	addr := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		head, r, err := readHead(br)
		heads <- head
		if err != nil {
			return
		}
		nc.Write(answer(r))
		io.Copy(io.Discard, br)
	})
	return addr, heads
}

// switching returns a 101 answer to r computed by the raw peer (the
// project's independent oracle). Each line "Name: value" replaces the
// default line of that name; "Name:" removes it.
func switching(r *http.Request, lines ...string) []byte {
	defaults := []string{
		"Upgrade: websocket",
		"Connection: Upgrade",
		"Sec-WebSocket-Accept: " + rawpeer.AcceptKey(r.Header.Get("Sec-WebSocket-Key")),
	}
	return []byte(headLines("HTTP/1.1 101 Switching Protocols", defaults, lines))
}

func dialOK(t *testing.T, url string, opts *DialOptions) (*Conn, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, resp, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("Dial(%s) = %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, resp
}

func TestDialWritesTheOpeningHandshakeRequest(t *testing.T) {
	addr, heads := answeringServer(t, func(r *http.Request) []byte { return switching(r) })
	opts := &DialOptions{
		Subprotocols: []string{"chat", "mqtt"},
		Header:       http.Header{"Host": {"rally.test"}, "X-Trace": {"1"}, "Origin": {"https://rally.test"}},
	}
	_, resp := dialOK(t, "ws://alice:pw@"+addr+"/chat?room=1", opts)
	if resp.StatusCode != 101 {
		t.Errorf("response status %d, want 101", resp.StatusCode)
	}
	head := <-heads
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
	if err != nil {
		t.Fatal(err)
	}
	if line, _, _ := strings.Cut(head, "\r\n"); line != "GET /chat?room=1 HTTP/1.1" {
		t.Errorf("request line %q, want GET /chat?room=1 HTTP/1.1", line)
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		t.Errorf("Sec-WebSocket-Key %q is not 16 bytes in base64", key)
	}
	for _, want := range [][2]string{
		{"Upgrade", "websocket"},
		{"Connection", "Upgrade"},
		{"Sec-WebSocket-Version", "13"},
		{"Sec-WebSocket-Protocol", "chat, mqtt"},
		{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))},
		{"X-Trace", "1"},
		{"Origin", "https://rally.test"},
	} {
		if got := r.Header.Values(want[0]); len(got) != 1 || got[0] != want[1] {
			t.Errorf("%s: %q, want %q", want[0], got, want[1])
		}
	}
	if r.Host != "rally.test" || strings.Count(head, "Host:") != 1 {
		t.Errorf("Host %q (in %q), want rally.test once", r.Host, head)
	}
}

func TestDialKeepsTheCallersAuthorizationOverURLUserinfo(t *testing.T) {
	addr, heads := answeringServer(t, func(r *http.Request) []byte { return switching(r) })
	dialOK(t, "ws://alice:pw@"+addr+"/", &DialOptions{Header: http.Header{"Authorization": {"Bearer t"}}})
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(<-heads)))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer t" {
		t.Fatalf("Authorization %q, want only Bearer t", got)
	}
}

func TestDialAccepts101InAnyValidForm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string // subprotocol
	}{
		{"minimal", nil, ""},
		{"Upgrade in odd case", []string{"Upgrade: WebSocket"}, ""},
		{"Connection in a list", []string{"Connection: keep-alive, UPGRADE"}, ""},
		{"an offered subprotocol", []string{"Sec-WebSocket-Protocol: mqtt"}, "mqtt"},
		{"no subprotocol though some were offered", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := answeringServer(t, func(r *http.Request) []byte { return switching(r, tc.lines...) })
			c, _ := dialOK(t, "ws://"+addr+"/", &DialOptions{Subprotocols: []string{"chat", "mqtt"}})
			if got := c.Subprotocol(); got != tc.want {
				t.Fatalf("Subprotocol() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDialFailsAWrong101WithAClearError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lines  []string
		offer  []string
		reason string
	}{
		{"wrong accept", []string{"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}, nil, "Sec-WebSocket-Accept \"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\" does not match the key sent"},
		{"no accept", []string{"Sec-WebSocket-Accept:"}, nil, "101 response lacks Sec-WebSocket-Accept"},
		{"no Upgrade", []string{"Upgrade:"}, nil, "101 response lacks Upgrade: websocket"},
		{"Upgrade h2c", []string{"Upgrade: h2c"}, nil, "101 response lacks Upgrade: websocket"},
		{"no Connection", []string{"Connection:"}, nil, "101 response lacks Connection: upgrade"},
		{"subprotocol not offered", []string{"Sec-WebSocket-Protocol: mqtt"}, []string{"chat"}, "server chose subprotocol \"mqtt\", which was not offered"},
		{"subprotocol when none offered", []string{"Sec-WebSocket-Protocol: chat"}, nil, "server chose subprotocol \"chat\", which was not offered"},
		{"two subprotocols", []string{"Sec-WebSocket-Protocol: chat, mqtt"}, []string{"chat", "mqtt"}, "server chose more than one subprotocol"},
		{"an extension not offered", []string{"Sec-WebSocket-Extensions: x-custom"}, nil, "deflate: server's Sec-WebSocket-Extensions answer: extension \"x-custom\" was not offered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := answeringServer(t, func(r *http.Request) []byte { return switching(r, tc.lines...) })
			c, resp, err := Dial(context.Background(), "ws://"+addr+"/", &DialOptions{Subprotocols: tc.offer, HandshakeTimeout: testTimeout})
			if c != nil {
				c.CloseNow()
				t.Fatal("Dial returned a connection")
			}
			var he *HandshakeError
			if !errors.As(err, &he) || !errors.Is(err, ErrBadHandshake) {
				t.Fatalf("Dial error %v, want a *HandshakeError", err)
			}
			if want := "rally: dial ws://" + addr + "/: " + tc.reason; err.Error() != want {
				t.Errorf("Dial error:\n%s\nwant\n%s", err, want)
			}
			if resp == nil || resp.StatusCode != 101 || he.Response != resp || he.Status != 101 {
				t.Errorf("Dial response %v, error's response %v, status %d: want the 101 in both", resp, he.Response, he.Status)
			}
		})
	}
}

func TestDialReturnsTheRefusingResponseWithStatusHeadersAndBodyStart(t *testing.T) {
	body := strings.Repeat("go away. ", 300) // 2700 bytes
	addr, _ := answeringServer(t, func(r *http.Request) []byte {
		return []byte("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"rally\"\r\nContent-Type: text/plain\r\nContent-Length: 2700\r\n\r\n" + body)
	})
	c, resp, err := Dial(context.Background(), "ws://"+addr+"/private", &DialOptions{HandshakeTimeout: testTimeout})
	if c != nil {
		c.CloseNow()
		t.Fatal("Dial returned a connection")
	}
	var he *HandshakeError
	if !errors.As(err, &he) || he.Status != 401 || he.Response != resp {
		t.Fatalf("Dial error %v, want a *HandshakeError with status 401 and the response", err)
	}
	if want := "rally: dial ws://" + addr + "/private: server answered 401 Unauthorized"; err.Error() != want {
		t.Errorf("Dial error %q, want %q", err, want)
	}
	if resp == nil || resp.StatusCode != 401 {
		t.Fatalf("response %v, want status 401", resp)
	}
	if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="rally"` {
		t.Errorf("WWW-Authenticate %q", got)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != body[:1024] {
		t.Errorf("body %q (%v), want the first 1024 bytes", got, err)
	}
}

func TestDialPassesBytesSentAfterThe101AsStartOfStream(t *testing.T) {
	conns := watchNewConns(t)
	// An unmasked text frame "hi" in the same write as the 101.
	frame := []byte{0x81, 0x02, 'h', 'i'}
	addr, _ := answeringServer(t, func(r *http.Request) []byte { return append(switching(r), frame...) })
	c, _ := dialOK(t, "ws://"+addr+"/", nil)
	if o := <-conns; o.server || !bytes.Equal(o.buffered, frame) {
		t.Errorf("stream starts with % x (server %v), want % x on a client", o.buffered, o.server, frame)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, p, err := c.Read(ctx)
	if err != nil || typ != Text || string(p) != "hi" {
		t.Fatalf("Read = %v, %q, %v, want text \"hi\"", typ, p, err)
	}
}

func TestServerReadsAFrameSentInTheSameWriteAsTheRequest(t *testing.T) {
	srv, results := acceptServer(t, nil, nil, nil)
	frame := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte("hello")})
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), append(handshakeBytes("GET"), frame...))
	got := <-results
	if resp.StatusCode != 101 || got.err != nil {
		t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
	}
	defer got.conn.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, p, err := got.conn.Read(ctx)
	if err != nil || typ != Text || string(p) != "hello" {
		t.Fatalf("Read = %v, %q, %v, want text \"hello\"", typ, p, err)
	}
}

func TestDialAndAcceptAgreeOnASubprotocolAndExchangeMessages(t *testing.T) {
	srv, results := acceptServer(t, &AcceptOptions{Subprotocols: []string{"v2", "v1"}}, nil, nil)
	c, _ := dialOK(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", &DialOptions{Subprotocols: []string{"v1", "v2"}})
	got := <-results
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.conn.CloseNow()
	if c.Subprotocol() != "v2" || got.conn.Subprotocol() != "v2" {
		t.Fatalf("subprotocols: client %q, server %q, want v2", c.Subprotocol(), got.conn.Subprotocol())
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.Write(ctx, Binary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	typ, p, err := got.conn.Read(ctx)
	if err != nil || typ != Binary || !bytes.Equal(p, []byte{1, 2, 3}) {
		t.Fatalf("server Read = %v, % x, %v", typ, p, err)
	}
}

func TestDialToAClosedPortFailsOnceNamingTheRedactedURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, resp, err := Dial(context.Background(), "ws://alice:pw@"+addr+"/x?token=t0k", &DialOptions{HandshakeTimeout: testTimeout})
	if c != nil || resp != nil || err == nil {
		t.Fatalf("Dial = %v, %v, %v, want only an error", c, resp, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "rally: dial ws://xxxxx@"+addr+"/x?token=xxxxx: ") || strings.Count(msg, "rally:") != 1 {
		t.Errorf("Dial error %q, want one error naming the redacted URL", msg)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("Dial error %v does not wrap the *net.OpError", err)
	}
}

func TestDialTimesOutAgainstAServerThatNeverAnswers(t *testing.T) {
	addr := rawServer(t, func(nc net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	c, resp, err := Dial(context.Background(), "ws://"+addr+"/", &DialOptions{HandshakeTimeout: 50 * time.Millisecond})
	if c != nil || resp != nil {
		t.Fatalf("Dial = %v, %v, want no connection and no response", c, resp)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "opening handshake took longer than 50ms") {
		t.Fatalf("Dial error %v, want the handshake timeout", err)
	}
}

func TestDialStopsWhenItsContextIsCanceled(t *testing.T) {
	requested := make(chan struct{})
	addr := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		readHead(br)
		close(requested)
		io.Copy(io.Discard, br)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-requested
		cancel()
	}()
	c, _, err := Dial(ctx, "ws://"+addr+"/", &DialOptions{HandshakeTimeout: testTimeout})
	if c != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial = %v, %v, want context.Canceled", c, err)
	}
}

func TestDialOverTLSOffersOnlyHTTP11AndNamesTheServer(t *testing.T) {
	type seen struct{ alpn, serverName string }
	seenc := make(chan seen, 1)
	results := make(chan accepted, 1)
	accept := acceptHandler(nil, nil, nil, results)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenc <- seen{r.TLS.NegotiatedProtocol, r.TLS.ServerName}
		accept(w, r)
	}))
	// The server would speak h2 if the client offered it.
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"h2"} // replaced by Dial
	opts := &DialOptions{
		TLSConfig: cfg,
		NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}
	c, _ := dialOK(t, "wss://example.com/secure", opts) // httptest's certificate names example.com
	s := <-seenc
	if s.alpn != "http/1.1" || s.serverName != "example.com" {
		t.Errorf("server saw ALPN %q and SNI %q, want http/1.1 and example.com", s.alpn, s.serverName)
	}
	got := <-results
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.conn.CloseNow()
	if cfg.NextProtos[0] != "h2" {
		t.Error("Dial changed the caller's TLS config")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := got.conn.Write(ctx, Text, []byte("over tls")); err != nil {
		t.Fatal(err)
	}
	if typ, p, err := c.Read(ctx); err != nil || typ != Text || string(p) != "over tls" {
		t.Fatalf("client Read = %v, %q, %v", typ, p, err)
	}
}

func TestDialConnectsToTheURLsPortOrTheSchemesDefault(t *testing.T) {
	errStop := errors.New("stop here")
	for _, tc := range []struct{ url, addr string }{
		{"ws://rally.test/", "rally.test:80"},
		{"http://rally.test", "rally.test:80"},
		{"wss://rally.test/", "rally.test:443"},
		{"https://rally.test:8443/x", "rally.test:8443"},
		{"ws://[::1]/", "[::1]:80"},
		{"WS://rally.test:9000", "rally.test:9000"},
	} {
		var got string
		_, _, err := Dial(context.Background(), tc.url, &DialOptions{
			NetDialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
				got = addr
				return nil, errStop
			},
		})
		if !errors.Is(err, errStop) || got != tc.addr {
			t.Errorf("Dial(%s) dialed %q (%v), want %q", tc.url, got, err, tc.addr)
		}
	}
}

func TestDialRefusesBadURLsAndOptionsBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		opts *DialOptions
		want string
	}{
		{"other scheme", "ftp://rally.test/", nil, "rally: dial ftp://rally.test/: scheme must be ws, wss, http or https"},
		{"no host", "ws:///chat", nil, "rally: dial ws:///chat: URL has no host"},
		{"fragment", "ws://rally.test/#frag", nil, "rally: dial ws://rally.test/#xxxxx: URL must not have a fragment"},
		{"malformed", "ws://rally.test/%zz", nil, "rally: dial: malformed URL (not shown, it may hold credentials): it has an invalid %-escape"},
		{"space in query", "ws://rally.test/?a b", nil, "URL path or query holds a space or a control character"},
		{"subprotocol not a token", "ws://rally.test/", &DialOptions{Subprotocols: []string{"a b"}}, `subprotocol "a b" is not a token`},
		{"subprotocol twice", "ws://rally.test/", &DialOptions{Subprotocols: []string{"a", "a"}}, `subprotocol "a" is offered twice`},
		{"managed header", "ws://rally.test/", &DialOptions{Header: http.Header{"Sec-WebSocket-Protocol": {"a"}}}, "header Sec-Websocket-Protocol is not allowed in DialOptions.Header: use DialOptions.Subprotocols"},
		{"managed header in other case", "ws://rally.test/", &DialOptions{Header: http.Header{"upgrade": {"x"}}}, "header Upgrade is not allowed"},
		{"header name not a token", "ws://rally.test/", &DialOptions{Header: http.Header{"X Y": {"1"}}}, `header name "X Y" is not a token`},
		{"CRLF in a header value", "ws://rally.test/", &DialOptions{Header: http.Header{"Cookie": {"a=1\r\nX-Evil: 1"}}}, "header Cookie has a control character in its value"},
		{"Host twice", "ws://rally.test/", &DialOptions{Header: http.Header{"Host": {"a", "b"}}}, "header Host is given more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts == nil {
				opts = &DialOptions{}
			}
			dialed := false
			opts.NetDialContext = func(context.Context, string, string) (net.Conn, error) {
				dialed = true
				return nil, errors.New("dialed")
			}
			_, _, err := Dial(context.Background(), tc.url, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || dialed {
				t.Fatalf("Dial error %v (dialed %v), want %q before dialing", err, dialed, tc.want)
			}
		})
	}
}

func TestDialErrorsNeverShowCredentials(t *testing.T) {
	const secret = "SECRET"
	secretHeader := http.Header{"Authorization": {"Bearer SECRET-3"}, "Cookie": {"sess=SECRET-4"}}
	t.Setenv("HTTP_PROXY", "http://euser-SECRET-27:epw-SECRET-28@env-proxy.rally.test:3128")
	userinfo := "user-SECRET-0:pw-SECRET-1@"
	query := "?room=1&token=SECRET-2&access_token=SECRET-5&api_key=SECRET-6&key=SECRET-7&password=SECRET-8"

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	refusing, _ := answeringServer(t, func(*http.Request) []byte {
		return []byte("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
	})
	badAccept, _ := answeringServer(t, func(r *http.Request) []byte {
		return switching(r, "Sec-WebSocket-Accept: nope")
	})
	// A plain HTTP server answers a TLS ClientHello with a 400.
	plain := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		br.ReadByte()
		nc.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"))
	})
	silent := rawServer(t, func(nc net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	// Not an HTTP server: it sends the request back, so a parse error
	// quoting the "status line" would quote the request line.
	echo := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		head, _, _ := readHead(br)
		nc.Write([]byte(head))
		io.Copy(io.Discard, br)
	})

	// Proxies, with credentials of their own: one that refuses, one that
	// is no HTTP server, one that closes at once, one that never answers,
	// and one that tunnels to a server redirecting elsewhere.
	via := func(addr string) func(*http.Request) (*url.URL, error) {
		return http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword("puser-SECRET-20", "ppw-SECRET-21"), Host: addr})
	}
	proxyRefusing, _ := answeringServer(t, func(*http.Request) []byte {
		return []byte("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
	})
	proxyClosing := rawServer(t, func(nc net.Conn, br *bufio.Reader) { readHead(br) })
	redirecting := newHub(t, false)
	far := redirecting.named("far", "ws://far-user:far-SECRET-22@"+closedAddr+"/?token=SECRET-23")
	bad := redirecting.named("bad", "ws://u:SECRET-24@rally.test/%zz")
	loop := redirecting.named("loop", "/named/loop?token=SECRET-25")
	tunnel, _ := fakeProxy(t, func(host string) string {
		if strings.HasPrefix(host, "hub.rally.test:") {
			return redirecting.srv.Listener.Addr().String()
		}
		return host
	})

	for _, tc := range []struct {
		name string
		url  string
		opts DialOptions
	}{
		{"proxy at a closed port", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: via(closedAddr)}},
		{"proxy refusing", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: via(proxyRefusing)}},
		{"proxy echoing", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: via(echo)}},
		{"proxy closing", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: via(proxyClosing)}},
		{"proxy silent", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: via(silent), HandshakeTimeout: 20 * time.Millisecond}},
		{"proxy of another scheme", "ws://" + userinfo + "rally.test/" + query, DialOptions{Proxy: http.ProxyURL(&url.URL{Scheme: "socks5", User: url.UserPassword("u", "SECRET-26"), Host: "h:1"})}},
		{"proxy from the environment", "ws://" + userinfo + "env.rally.test/" + query, DialOptions{NetDialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("refused")
		}}},
		{"redirect to a closed port", "ws://" + userinfo + redirecting.srv.Listener.Addr().String() + far + query, DialOptions{FollowRedirects: true}},
		{"redirect to a bad URL", "ws://" + userinfo + redirecting.srv.Listener.Addr().String() + bad + query, DialOptions{FollowRedirects: true}},
		{"redirect loop", "ws://" + userinfo + redirecting.srv.Listener.Addr().String() + loop + query, DialOptions{FollowRedirects: true}},
		{"redirect not followed", "ws://" + userinfo + redirecting.srv.Listener.Addr().String() + far + query, DialOptions{}},
		{"redirect through a proxy", "ws://" + userinfo + "hub.rally.test" + far + query, DialOptions{FollowRedirects: true, Proxy: via(tunnel)}},
		{"closed port", "ws://" + userinfo + closedAddr + "/" + query, DialOptions{}},
		{"401", "ws://" + userinfo + refusing + "/" + query, DialOptions{}},
		{"wrong accept", "ws://" + userinfo + badAccept + "/" + query, DialOptions{}},
		{"timeout", "ws://" + userinfo + silent + "/" + query, DialOptions{HandshakeTimeout: 20 * time.Millisecond}},
		{"echo server", "ws://" + userinfo + echo + "/" + query, DialOptions{}},
		{"TLS to a plain server", "wss://" + userinfo + plain + "/" + query, DialOptions{}},
		{"bad scheme", "ftp://" + userinfo + "rally.test/" + query, DialOptions{}},
		{"fragment", "ws://" + userinfo + "rally.test/" + query + "#SECRET-9", DialOptions{}},
		{"malformed URL", "ws://user:pw/SECRET-10@rally.test/%zz" + query, DialOptions{}},
		{"bad header value", "ws://" + userinfo + "rally.test/" + query, DialOptions{Header: http.Header{"Authorization": {"Bearer SECRET-11\r\n"}}}},
		{"managed header", "ws://" + userinfo + "rally.test/" + query, DialOptions{Header: http.Header{"Sec-WebSocket-Key": {"SECRET-12"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if opts.Header == nil {
				opts.Header = secretHeader
			}
			if opts.HandshakeTimeout == 0 {
				opts.HandshakeTimeout = testTimeout
			}
			c, _, err := Dial(context.Background(), tc.url, &opts)
			if c != nil {
				c.CloseNow()
				t.Fatal("Dial returned a connection")
			}
			if err == nil {
				t.Fatal("Dial returned no error")
			}
			for e := err; e != nil; e = errors.Unwrap(e) {
				text := e.Error()
				if strings.Contains(text, secret) {
					t.Fatalf("error text shows a secret: %s", e)
				}
				for _, pair := range []string{"user-SECRET-0:pw-SECRET-1", "puser-SECRET-20:ppw-SECRET-21", "far-user:far-SECRET-22"} {
					if strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(pair))) {
						t.Fatalf("error text shows Basic credentials: %s", e)
					}
				}
			}
			if strings.Count(err.Error(), "rally:") != 1 {
				t.Errorf("error %q is not one error", err)
			}
			t.Log(err)
		})
	}
}

func BenchmarkDialAndAcceptOverLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := Accept(w, r, nil); err == nil {
			c.CloseNow()
		}
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, _, err := Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		c.CloseNow()
	}
}
