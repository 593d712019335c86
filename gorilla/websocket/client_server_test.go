package websocket_test

// Black-box ports of gorilla/websocket's client_server_test.go and
// server_test.go; each test names the gorilla test it follows.

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

// echoOnce is a handler that upgrades with u and responseHeader, reports
// the request, and echoes messages.
func echoWith(u *websocket.Upgrader, responseHeader http.Header, requests chan<- *http.Request) http.HandlerFunc {
	echo := func(c *websocket.Conn) {
		defer c.Close()
		for {
			mt, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			if c.WriteMessage(mt, p) != nil {
				return
			}
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if requests != nil {
			requests <- r
		}
		c, err := u.Upgrade(w, r, responseHeader)
		if err != nil {
			return
		}
		echo(c)
	}
}

func sendRecv(t *testing.T, c *websocket.Conn) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte("HELLO")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "HELLO" {
		t.Fatalf("echo: %q, %v", p, err)
	}
}

// As gorilla's TestDial and TestHandshake: the server's first preference
// the client offers is the subprotocol, headers given to Upgrade are in
// the response, and messages echo.
func TestDialNegotiatesSubprotocolAndSendsResponseHeaders(t *testing.T) {
	u := &websocket.Upgrader{Subprotocols: []string{"p0", "p1"}}
	url := server(t, echoWith(u, http.Header{"Set-Cookie": {"sessionID=1234"}}, nil))
	d := websocket.Dialer{Subprotocols: []string{"p1", "p2"}, HandshakeTimeout: wait}
	c, resp, err := d.Dial(url, http.Header{"Origin": {"http://" + strings.TrimPrefix(url, "ws://")}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Subprotocol() != "p1" {
		t.Errorf("subprotocol %q, want p1", c.Subprotocol())
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Set-Cookie") != "sessionID=1234" {
		t.Errorf("response %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	sendRecv(t, c)
}

// As gorilla's TestDialCookieJar: the jar's cookies go with the request
// and the response's are kept.
func TestDialCookieJarSendsAndKeepsCookies(t *testing.T) {
	requests := make(chan *http.Request, 2)
	url := server(t, echoWith(&websocket.Upgrader{}, http.Header{"Set-Cookie": {"gorilla=ws"}}, requests))
	jar, _ := cookiejar.New(nil)
	d := websocket.Dialer{Jar: jar, HandshakeTimeout: wait}
	hu, _ := neturl(url)
	jar.SetCookies(hu, []*http.Cookie{{Name: "session", Value: "abc"}})
	c, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	r := <-requests
	if ck, err := r.Cookie("session"); err != nil || ck.Value != "abc" {
		t.Fatalf("the server got cookie %v, %v", ck, err)
	}
	var found bool
	for _, ck := range jar.Cookies(hu) {
		found = found || ck.Name == "gorilla" && ck.Value == "ws"
	}
	if !found {
		t.Fatalf("the jar did not keep the response's cookie: %v", jar.Cookies(hu))
	}
}

func neturl(ws string) (*url.URL, error) { return url.Parse("http" + strings.TrimPrefix(ws, "ws")) }

// As gorilla's TestDialTLS: wss:// with the server's certificate trusted.
func TestDialTLSWithTheServersCertificate(t *testing.T) {
	s := httptest.NewTLSServer(echoWith(&websocket.Upgrader{}, nil, nil))
	defer s.Close()
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: certPool(s)}, HandshakeTimeout: wait}
	c, _, err := d.Dial("wss"+strings.TrimPrefix(s.URL, "https"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRecv(t, c)
}

func certPool(s *httptest.Server) *x509CertPool {
	return s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
}

// As gorilla's TestNetDialConnect: NetDial, NetDialContext and
// NetDialTLSContext open the connection when set.
func TestNetDialFunctionsOpenTheConnection(t *testing.T) {
	plain := httptest.NewServer(echoWith(&websocket.Upgrader{}, nil, nil))
	defer plain.Close()
	secure := httptest.NewTLSServer(echoWith(&websocket.Upgrader{}, nil, nil))
	defer secure.Close()
	var calls atomic.Int32
	tlsConfig := &tls.Config{RootCAs: certPool(secure)}
	for _, tc := range []struct {
		name string
		url  string
		d    websocket.Dialer
	}{
		{"NetDial", "ws" + strings.TrimPrefix(plain.URL, "http"), websocket.Dialer{NetDial: func(n, a string) (net.Conn, error) {
			calls.Add(1)
			return net.Dial(n, a)
		}}},
		{"NetDialContext", "ws" + strings.TrimPrefix(plain.URL, "http"), websocket.Dialer{NetDialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			calls.Add(1)
			return (&net.Dialer{}).DialContext(ctx, n, a)
		}}},
		{"NetDialTLSContext", "wss" + strings.TrimPrefix(secure.URL, "https"), websocket.Dialer{NetDialTLSContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			calls.Add(1)
			return (&tls.Dialer{Config: tlsConfig}).DialContext(ctx, n, a)
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			tc.d.HandshakeTimeout = wait
			c, _, err := tc.d.Dial(tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sendRecv(t, c)
			if calls.Load() != before+1 {
				t.Fatal("the dial function was not used")
			}
		})
	}
}

// As gorilla's TestDialTimeout and TestHandshakeTimeoutInContext: a server
// that never answers fails Dial when HandshakeTimeout, or the context's
// deadline, passes.
func TestDialTimesOutOnASilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	url := "ws://" + ln.Addr().String()
	d := websocket.Dialer{HandshakeTimeout: 50 * time.Millisecond}
	if _, _, err := d.Dial(url, nil); err == nil {
		t.Fatal("Dial succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := (&websocket.Dialer{}).DialContext(ctx, url, nil); err == nil {
		t.Fatal("DialContext succeeded")
	}
}

// As gorilla's TestDialBadScheme.
func TestDialRefusesSchemesOtherThanWS(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1/", "ftp://x/", "ws:///nohost"} {
		if _, _, err := websocket.DefaultDialer.Dial(u, nil); err == nil {
			t.Errorf("%s: Dial succeeded", u)
		}
	}
}

// As gorilla's TestDialBadOrigin: a cross-origin request is refused with
// 403, and Dial returns ErrBadHandshake with the response.
func TestDialFromAnotherOriginGets403AndErrBadHandshake(t *testing.T) {
	url := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	c, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Origin": {"http://evil.example"}})
	if err != websocket.ErrBadHandshake {
		if c != nil {
			c.Close()
		}
		t.Fatalf("got %v, want ErrBadHandshake", err)
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("response %v, want 403", resp)
	}
}

// As gorilla's TestDialBadHeader: the handshake's own headers may not be
// given.
func TestDialRefusesTheHandshakesOwnHeaders(t *testing.T) {
	url := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	for _, k := range []string{"Upgrade", "Connection", "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions"} {
		if _, _, err := websocket.DefaultDialer.Dial(url, http.Header{k: {"x"}}); err == nil || !strings.Contains(err.Error(), "duplicate header") {
			t.Errorf("%s: %v", k, err)
		}
	}
	d := websocket.Dialer{Subprotocols: []string{"a"}}
	if _, _, err := d.Dial(url, http.Header{"Sec-Websocket-Protocol": {"b"}}); err == nil {
		t.Error("Sec-Websocket-Protocol beside Subprotocols accepted")
	}
	c, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Sec-Websocket-Protocol": {"b"}})
	if err != nil {
		t.Fatalf("Sec-Websocket-Protocol alone: %v", err)
	}
	c.Close()
}

// As gorilla's TestBadMethod and TestNoUpgrade: Upgrade answers a request
// with another method 405, one that asks for no upgrade 400 (with
// Sec-Websocket-Version: 13), and calls Upgrader.Error when set.
func TestUpgradeRefusesBadRequestsThroughError(t *testing.T) {
	var statuses []int
	u := &websocket.Upgrader{}
	url := server(t, echoWith(u, nil, nil))
	hu := "http" + strings.TrimPrefix(url, "ws")
	req, _ := http.NewRequest(http.MethodPost, hu, strings.NewReader("body"))
	req.Header.Set("Connection", "upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(hu)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Sec-Websocket-Version") != "13" {
		t.Errorf("plain GET: %d, version %q", resp.StatusCode, resp.Header.Get("Sec-Websocket-Version"))
	}
	u.Error = func(w http.ResponseWriter, r *http.Request, status int, reason error) {
		statuses = append(statuses, status)
		var he websocket.HandshakeError
		if !errors.As(reason, &he) {
			t.Errorf("reason %T", reason)
		}
		http.Error(w, "custom", status)
	}
	resp, err = http.Get(hu)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(statuses) != 1 || statuses[0] != http.StatusBadRequest || !strings.Contains(string(body), "custom") {
		t.Errorf("Upgrader.Error: %v, body %q", statuses, body)
	}
}

// As gorilla's TestRespOnBadHandshake: a refused handshake returns the
// server's response, body included.
func TestRefusedHandshakeReturnsTheResponseAndItsBody(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusGone)
		io.WriteString(w, "This is the response body.")
	})
	_, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != websocket.ErrBadHandshake || resp == nil {
		t.Fatalf("got %v, %v", resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGone || string(body) != "This is the response body." {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// As gorilla's TestHost: a Host in the request header is the Host sent.
func TestHostHeaderIsSent(t *testing.T) {
	requests := make(chan *http.Request, 1)
	url := server(t, echoWith(&websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}, nil, requests))
	c, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Host": {"example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if r := <-requests; r.Host != "example.com" {
		t.Fatalf("server saw Host %q", r.Host)
	}
}

// As gorilla's TestDialCompression: with EnableCompression on both sides
// permessage-deflate is negotiated (and messages still echo); with it off
// on either side, it is not.
func TestCompressionOnlyWhenBothEnableIt(t *testing.T) {
	for _, tc := range []struct{ server, client, want bool }{{true, true, true}, {true, false, false}, {false, true, false}} {
		url := server(t, echoWith(&websocket.Upgrader{EnableCompression: tc.server}, nil, nil))
		d := websocket.Dialer{EnableCompression: tc.client, HandshakeTimeout: wait}
		c, resp, err := d.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(resp.Header.Get("Sec-Websocket-Extensions"), "permessage-deflate")
		if got != tc.want {
			t.Errorf("server %v client %v: negotiated %v", tc.server, tc.client, got)
		}
		big := strings.Repeat("compressible ", 1000)
		c.WriteMessage(websocket.TextMessage, []byte(big))
		if _, p, err := c.ReadMessage(); err != nil || string(p) != big {
			t.Errorf("echo: %d bytes, %v", len(p), err)
		}
		c.Close()
	}
}

// As gorilla's TestProxyDial: Dial goes through an HTTP proxy's CONNECT
// tunnel when Proxy names one.
func TestDialThroughAnHTTPProxy(t *testing.T) {
	dialThroughProxy(t, "", nil)
}

// As gorilla's TestProxyAuthorizationDial: the proxy URL's user and
// password go to the proxy as Basic Proxy-Authorization on the CONNECT.
func TestDialThroughAnHTTPProxySendsItsCredentials(t *testing.T) {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("username:password"))
	dialThroughProxy(t, want, url.UserPassword("username", "password"))
}

// dialThroughProxy dials an echo server through connectProxy (wanting auth
// when set; user in the proxy URL), echoes a message and checks that one
// tunnel carried it.
func dialThroughProxy(t *testing.T, auth string, user *url.Userinfo) {
	target := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	var tunnels atomic.Int32
	proxy := httptest.NewServer(connectProxy(t, auth, &tunnels))
	defer proxy.Close()
	pu, _ := url2(proxy.URL)
	pu.User = user
	echoThrough(t, websocket.Dialer{Proxy: http.ProxyURL(pu), HandshakeTimeout: wait}, target, &tunnels)
}

// echoThrough dials target with d, echoes a message and checks that one
// tunnel of the proxy carried it.
func echoThrough(t *testing.T, d websocket.Dialer, target string, tunnels *atomic.Int32) {
	t.Helper()
	c, _, err := d.Dial(target, nil)
	if err != nil {
		t.Fatalf("%s through the proxy: %v", target, err)
	}
	defer c.Close()
	sendRecv(t, c)
	if tunnels.Load() != 1 {
		t.Fatalf("%s: %d tunnels, want 1", target, tunnels.Load())
	}
}

// As gorilla's TestProxyFnErrorIsPropagated and TestProxyFnNilMeansNoProxy:
// the Proxy function's error is Dial's, and a nil URL dials directly.
func TestProxyFunctionsErrorIsDialsAndNilDialsDirectly(t *testing.T) {
	target := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	boom := errors.New("no proxy for you")
	d := websocket.Dialer{Proxy: func(*http.Request) (*url.URL, error) { return nil, boom }, HandshakeTimeout: wait}
	if _, _, err := d.Dial(target, nil); !errors.Is(err, boom) {
		t.Fatalf("Dial with a failing Proxy: %v, want %v", err, boom)
	}
	d.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c, _, err := d.Dial(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRecv(t, c)
}

// connectProxy is an HTTP proxy that tunnels CONNECT requests, counting
// them; with auth set, a CONNECT without that Proxy-Authorization gets 407.
func connectProxy(t *testing.T, auth string, tunnels *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		if auth != "" && r.Header.Get("Proxy-Authorization") != auth {
			w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
			http.Error(w, "credentials needed", http.StatusProxyAuthRequired)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		tunnels.Add(1)
		w.WriteHeader(http.StatusOK)
		down, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		go func() { io.Copy(up, brw); up.Close() }()
		io.Copy(down, up)
		down.Close()
	}
}

func url2(s string) (*url.URL, error) { return url.Parse(s) }

// As gorilla's TestDataReceivedBeforeHandshake: a frame the server sent
// right behind its 101, in the same write, is the first message read.
func TestFrameSentWithThe101IsRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		req, err := http.ReadRequest(bufio.NewReader(nc))
		if err != nil {
			return
		}
		accept := acceptKey(req.Header.Get("Sec-Websocket-Key"))
		io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n\x81\x05Hello")
		io.Copy(io.Discard, nc)
	}()
	c := dial(t, "ws://"+ln.Addr().String(), nil)
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "Hello" {
		t.Fatalf("got %q, %v", p, err)
	}
}

// As gorilla's TestSubprotocols: the offers of Sec-Websocket-Protocol.
func TestSubprotocolsParsesTheOffers(t *testing.T) {
	for _, tc := range []struct {
		h    []string
		want []string
	}{
		{nil, nil},
		{[]string{"foo"}, []string{"foo"}},
		{[]string{"foo,bar"}, []string{"foo", "bar"}},
		{[]string{"foo, bar"}, []string{"foo", "bar"}},
		{[]string{" foo, bar "}, []string{"foo", "bar"}},
		{[]string{"foo", "bar"}, []string{"foo", "bar"}},
	} {
		r := &http.Request{Header: http.Header{"Sec-Websocket-Protocol": tc.h}}
		if got := websocket.Subprotocols(r); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%q: %q, want %q", tc.h, got, tc.want)
		}
	}
}

// As gorilla's TestIsWebSocketUpgrade (and TestTokenListContainsValue).
func TestIsWebSocketUpgradeMatchesTokensCaseInsensitively(t *testing.T) {
	for _, tc := range []struct {
		h    http.Header
		want bool
	}{
		{http.Header{"Connection": {"upgrade"}, "Upgrade": {"websocket"}}, true},
		{http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}}, true},
		{http.Header{"Connection": {"keep-alive"}, "Upgrade": {"websocket"}}, false},
		{http.Header{"Connection": {"upgrade"}}, false},
		{http.Header{}, false},
	} {
		if got := websocket.IsWebSocketUpgrade(&http.Request{Header: tc.h}); got != tc.want {
			t.Errorf("%v: %v", tc.h, got)
		}
	}
}

// As gorilla's TestSubProtocolSelection: the server's order decides, and
// none in common is no subprotocol (not a failure).
func TestSubprotocolSelectionFollowsTheServersOrder(t *testing.T) {
	for _, tc := range []struct {
		server, client []string
		want           string
	}{
		{[]string{"foo"}, []string{"foo"}, "foo"},
		{[]string{"bar", "foo"}, []string{"foo", "bar"}, "bar"},
		{[]string{"foo"}, []string{"bar"}, ""},
		{nil, []string{"foo"}, ""},
	} {
		url := server(t, echoWith(&websocket.Upgrader{Subprotocols: tc.server}, nil, nil))
		d := websocket.Dialer{Subprotocols: tc.client, HandshakeTimeout: wait}
		c, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Subprotocol() != tc.want {
			t.Errorf("server %v client %v: %q, want %q", tc.server, tc.client, c.Subprotocol(), tc.want)
		}
		c.Close()
	}
}

// As gorilla's TestCheckSameOrigin: with CheckOrigin nil, no Origin or
// the request's own host is accepted, another host refused.
func TestDefaultCheckOriginIsSameOrigin(t *testing.T) {
	url := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	host := strings.TrimPrefix(url, "ws://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{{"", true}, {"http://" + host, true}, {"https://" + strings.ToUpper(host), true}, {"http://other.example", false}, {"http://" + host + ".evil", false}} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		c, _, err := websocket.DefaultDialer.Dial(url, h)
		if (err == nil) != tc.ok {
			t.Errorf("Origin %q: %v", tc.origin, err)
		}
		if c != nil {
			c.Close()
		}
	}
}

// As gorilla's TestHijack_NotSupported: a ResponseWriter that cannot be
// hijacked gets 500 and Upgrade an error.
func TestUpgradeWithoutHijackingFailsWith500(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Connection", "upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-Websocket-Version", "13")
	req.Header.Set("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	rec := httptest.NewRecorder()
	c, err := (&websocket.Upgrader{}).Upgrade(rec, req, nil)
	if err == nil || c != nil {
		t.Fatal("Upgrade succeeded without a hijackable ResponseWriter")
	}
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
}

// As gorilla's TestIsValidChallengeKey: a key that is not 16 bytes in
// base64 is refused with 400.
func TestUpgradeRefusesAnInvalidKey(t *testing.T) {
	for _, key := range []string{"", "dGhlIHNhbXBsZSBub25jZQ", "YQ==", "not base64!"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Connection", "upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-Websocket-Version", "13")
		req.Header.Set("Sec-Websocket-Key", key)
		rec := httptest.NewRecorder()
		if _, err := (&websocket.Upgrader{}).Upgrade(rec, req, nil); err == nil || rec.Code != http.StatusBadRequest {
			t.Errorf("key %q: %v, status %d", key, err, rec.Code)
		}
	}
}

// As gorilla's TestTLSValidationErrors: a server whose certificate the
// client does not trust is refused, with the certificate's error, and a
// ServerName that does not match is refused too.
func TestDialRefusesAnUntrustedOrMismatchedCertificate(t *testing.T) {
	s := httptest.NewTLSServer(echoWith(&websocket.Upgrader{}, nil, nil))
	defer s.Close()
	wss := "wss" + strings.TrimPrefix(s.URL, "https")
	d := websocket.Dialer{HandshakeTimeout: wait}
	if c, _, err := d.Dial(wss, nil); err == nil {
		c.Close()
		t.Fatal("Dial trusted a certificate no root signs")
	}
	d.TLSClientConfig = &tls.Config{RootCAs: certPool(s), ServerName: "other.example"}
	if c, _, err := d.Dial(wss, nil); err == nil {
		c.Close()
		t.Fatal("Dial accepted a certificate for another name")
	}
}

// As gorilla's TestDialExtraTokensInRespHeaders: a 101 whose Upgrade and
// Connection headers list more tokens than websocket and upgrade is
// accepted.
func TestDialAcceptsExtraTokensInTheResponse(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum := sha1.Sum([]byte(r.Header.Get("Sec-Websocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		w.Header().Set("Upgrade", "foo, websocket")
		w.Header().Set("Connection", "upgrade, keep-alive")
		w.Header().Set("Sec-Websocket-Accept", base64.StdEncoding.EncodeToString(sum[:]))
		w.WriteHeader(http.StatusSwitchingProtocols)
	}))
	defer s.Close()
	d := websocket.Dialer{HandshakeTimeout: wait}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(s.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// As gorilla's TestSocksProxyDial: a socks5:// proxy URL dials through a
// SOCKS5 proxy (no authentication), which the test plays.
func TestDialThroughASOCKS5Proxy(t *testing.T) {
	target := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	proxied := make(chan string, 1)
	go func() {
		down, err := ln.Accept()
		if err != nil {
			return
		}
		defer down.Close()
		buf := make([]byte, 262)
		// Greeting: version 5, its methods; choose "no authentication".
		if _, err := io.ReadFull(down, buf[:2]); err != nil {
			return
		}
		if _, err := io.ReadFull(down, buf[:buf[1]]); err != nil {
			return
		}
		down.Write([]byte{5, 0})
		// Request: 5, CONNECT, 0, address type, address, port.
		if _, err := io.ReadFull(down, buf[:4]); err != nil {
			return
		}
		var host string
		switch buf[3] {
		case 1:
			io.ReadFull(down, buf[:4])
			host = net.IP(buf[:4]).String()
		case 3:
			io.ReadFull(down, buf[:1])
			n := int(buf[0])
			io.ReadFull(down, buf[:n])
			host = string(buf[:n])
		default:
			return
		}
		io.ReadFull(down, buf[:2])
		target := net.JoinHostPort(host, strconv.Itoa(int(buf[0])<<8|int(buf[1])))
		proxied <- target
		up, err := net.Dial("tcp", target)
		if err != nil {
			down.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		defer up.Close()
		down.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
		go io.Copy(up, down)
		io.Copy(down, up)
	}()
	pu, _ := url2("socks5://" + ln.Addr().String())
	d := websocket.Dialer{Proxy: http.ProxyURL(pu), HandshakeTimeout: wait}
	c, _, err := d.Dial(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendRecv(t, c)
	if got, want := <-proxied, strings.TrimPrefix(target, "ws://"); got != want {
		t.Fatalf("the proxy was asked for %s, want %s", got, want)
	}
}

// As gorilla's TestHTTPSProxyAndBackend and TestHTTPSProxyHTTPBackend: a
// proxy reached over TLS (https://) tunnels to a ws:// and to a wss://
// server; TLSClientConfig is trusted for both.
func TestDialThroughAnHTTPSProxy(t *testing.T) {
	for _, backendTLS := range []bool{false, true} {
		var target string
		if backendTLS {
			s := httptest.NewTLSServer(echoWith(&websocket.Upgrader{}, nil, nil))
			defer s.Close()
			target = "wss" + strings.TrimPrefix(s.URL, "https")
		} else {
			target = server(t, echoWith(&websocket.Upgrader{}, nil, nil))
		}
		var tunnels atomic.Int32
		proxy := httptest.NewTLSServer(connectProxy(t, "", &tunnels))
		defer proxy.Close()
		pu, _ := url2(proxy.URL)
		// httptest's TLS servers share one certificate: the proxy's pool
		// trusts the backend too.
		d := websocket.Dialer{Proxy: http.ProxyURL(pu), HandshakeTimeout: wait, TLSClientConfig: &tls.Config{RootCAs: certPool(proxy)}}
		echoThrough(t, d, target, &tunnels)
	}
}
