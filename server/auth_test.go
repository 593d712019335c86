package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rallyws/rally"
)

const (
	testSecret = "0123456789abcdef0123456789abcdef-test-secret"
	testAPIKey = "api-key-that-must-never-be-logged-7f3a"
)

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func token(t *testing.T, secret string, sub, pub []string, exp time.Time) string {
	t.Helper()
	tok, err := SignToken([]byte(secret), Claims{Subscribe: sub, Publish: pub,
		RegisteredClaims: jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(exp)}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// handshakeStatus returns the HTTP status a /ws handshake gets.
func handshakeStatus(t *testing.T, url string, h http.Header) int {
	t.Helper()
	c, resp, err := rally.Dial(testContext(t), url, &rally.DialOptions{Header: h})
	if err == nil {
		c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode
}

func authServer(t *testing.T, logs io.Writer, cfg Config) *testServer {
	cfg.TokenSecret = testSecret
	cfg.APIKey = testAPIKey
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return serve(t, cfg)
}

func TestTokensAreCheckedAtTheHandshakeAndNeverLogged(t *testing.T) {
	var logs lockedBuffer
	ts := authServer(t, &logs, Config{})
	hour := time.Now().Add(time.Hour)
	good := token(t, testSecret, []string{"*"}, []string{"*"}, hour)
	secrets := []string{good, testSecret, testAPIKey}
	forged := token(t, "another-secret-of-at-least-32-bytes!!", []string{"*"}, []string{"*"}, hour)
	expired := token(t, testSecret, []string{"*"}, nil, time.Now().Add(-time.Hour))
	secrets = append(secrets, forged, expired)
	noExp, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{Subscribe: []string{"*"}}).SignedString([]byte(testSecret))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, Claims{Subscribe: []string{"*"},
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(hour)}}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	secrets = append(secrets, noExp, none)
	for _, tc := range []struct {
		name   string
		query  string
		header http.Header
		want   int
	}{
		{"no token", "", nil, 401},
		{"token in the query", "?token=" + good, nil, 101},
		{"token in the Authorization header", "", http.Header{"Authorization": {"Bearer " + good}}, 101},
		{"token signed with another secret", "?token=" + forged, nil, 401},
		{"expired token", "?token=" + expired, nil, 401},
		{"token without exp", "?token=" + noExp, nil, 401},
		{"unsigned token (alg none)", "?token=" + none, nil, 401},
		{"garbage", "?token=abc.def.ghi", nil, 401},
		{"a page of another origin", "?token=" + good, http.Header{"Origin": {"https://evil.example"}}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handshakeStatus(t, ts.ws+"/ws"+tc.query, tc.header); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	if got := handshakeStatus(t, ts.ws+"/echo", nil); got != 401 {
		t.Errorf("/echo without token: %d, want 401", got)
	}
	if got := metric(t, ts.http, `rally_handshake_failures_total{reason="unauthorized"}`); got != 7 {
		t.Errorf("unauthorized handshakes counted %v, want 7", got)
	}
	if got := metric(t, ts.http, `rally_handshake_failures_total{reason="origin"}`); got != 1 {
		t.Errorf("origin refusals counted %v, want 1", got)
	}

	// The publish API with and without its key.
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testSecret, "Basic " + testAPIKey} {
		if status, _ := post(t, ts.http+"/publish/t", "text/plain", auth, []byte("x")); status != 401 {
			t.Errorf("publish with Authorization %q: %d, want 401", auth, status)
		}
	}
	if status, ans := post(t, ts.http+"/publish/t", "text/plain", "Bearer "+testAPIKey, []byte("x")); status != 200 {
		t.Errorf("publish with the API key: %d %s, want 200", status, ans)
	}

	ts.stop()
	out := logs.String()
	if !strings.Contains(out, "handshake refused") {
		t.Fatalf("the refusals were not logged:\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("a secret or token appears in the logs:\n%s", out)
		}
		// Nor a signature on its own.
		if i := strings.LastIndexByte(s, '.'); i >= 0 && len(s)-i > 8 && strings.Contains(out, s[i+1:]) {
			t.Errorf("a token's signature appears in the logs:\n%s", out)
		}
	}
}

func TestClaimsLimitTheTopicsOfAConnection(t *testing.T) {
	ts := authServer(t, io.Discard, Config{})
	tok := token(t, testSecret, []string{"chat.*", "news"}, []string{"chat.*"}, time.Now().Add(time.Hour))
	a := dial(t, ts.ws+"/ws?token="+tok, nil)
	for _, tc := range []struct{ send, want string }{
		{`{"type":"subscribe","topic":"chat.lobby","id":1}`, `{"type":"ack","id":1}`},
		{`{"type":"subscribe","topic":"news","id":2}`, `{"type":"ack","id":2}`},
		{`{"type":"publish","topic":"chat.lobby","data":1,"id":3}`, `{"type":"ack","id":3}`},
	} {
		a.send(tc.send)
		a.expect(tc.want)
	}
	for _, send := range []string{
		`{"type":"subscribe","topic":"admin","id":4}`,
		`{"type":"subscribe","topic":"news2","id":4}`,
		`{"type":"publish","topic":"news","data":1,"id":4}`,
	} {
		a.send(send)
		if got := a.next(); !strings.Contains(got, `"code":"forbidden"`) || !strings.Contains(got, `"id":4`) {
			t.Errorf("%s: answered %s, want forbidden", send, got)
		}
	}
}

func TestTokenThatExpiresWhileConnectedClosesWith1008(t *testing.T) {
	ts := authServer(t, io.Discard, Config{})
	// JWT times are whole seconds: a token made now expires within 1 to
	// 2 s. On a loaded machine it may expire before both connections are
	// open; then the attempt is made again with a fresh token.
	for attempt := 1; ; attempt++ {
		tok := token(t, testSecret, []string{"*"}, nil, time.Now().Add(2*time.Second))
		a, aerr := tryDial(t, ts.ws+"/ws?token="+tok)
		e, eerr := tryDial(t, ts.ws+"/echo?token="+tok)
		if aerr == nil && eerr == nil {
			err := a.c.Write(testContext(t), rally.Text, []byte(`{"type":"subscribe","topic":"t","id":1}`))
			var typ rally.MessageType
			var p []byte
			if err == nil {
				typ, p, err = a.c.Read(testContext(t))
			}
			if err == nil && typ == rally.Text && sameJSON(string(p), `{"type":"ack","id":1}`) {
				for name, c := range map[string]*client{"/ws": a, "/echo": e} {
					_, _, err := c.c.Read(testContext(t))
					var ce *rally.CloseError
					if !errors.As(err, &ce) || ce.Code != rally.ClosePolicyViolation || ce.Reason != "token expired" {
						t.Fatalf("%s: read ended with %v, want a close 1008 \"token expired\"", name, err)
					}
				}
				return
			}
		}
		if attempt == 5 {
			t.Fatalf("the token expired before the connections were open, 5 times: %v, %v", aerr, eerr)
		}
	}
}

// tryDial dials url, closing the connection when the test ends; it
// returns the error instead of failing the test.
func tryDial(t *testing.T, url string) (*client, error) {
	c, _, err := rally.Dial(testContext(t), url, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.CloseNow() })
	return &client{t: t, c: c}, nil
}

func TestPublishAPIIsClosedWithATokenSecretButNoAPIKey(t *testing.T) {
	ts := serve(t, Config{TokenSecret: testSecret})
	if status, _ := post(t, ts.http+"/publish/t", "text/plain", "", []byte("x")); status != 403 {
		t.Fatalf("status %d, want 403", status)
	}
}

func TestAllowedOriginsMayConnect(t *testing.T) {
	ts := serve(t, Config{Origins: []string{"*.example.com"}})
	if got := handshakeStatus(t, ts.ws+"/ws", http.Header{"Origin": {"https://app.example.com"}}); got != 101 {
		t.Errorf("allowed origin: %d, want 101", got)
	}
	if got := handshakeStatus(t, ts.ws+"/ws", http.Header{"Origin": {"https://example.org"}}); got != 403 {
		t.Errorf("other origin: %d, want 403", got)
	}
}

func TestServingAnotherAddressWithoutAuthNeedsInsecureNoAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:80", "[::]:80"} {
		if _, err := New(Config{Addr: addr}); err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("%s without auth: %v, want a refusal naming --insecure-no-auth", addr, err)
		}
		if _, err := New(Config{Addr: addr, InsecureNoAuth: true}); err != nil {
			t.Errorf("%s with InsecureNoAuth: %v", addr, err)
		}
		if _, err := New(Config{Addr: addr, TokenSecret: testSecret}); err != nil {
			t.Errorf("%s with a token secret: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:1", "[::1]:80"} {
		if _, err := New(Config{Addr: addr}); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := New(Config{TokenSecret: "short"}); err == nil {
		t.Error("a 5-byte token secret was accepted")
	}
	if _, err := New(Config{Origins: []string{"[a-"}}); err == nil {
		t.Error("a malformed origin pattern was accepted")
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, _ := New(Config{})
	if err := s.Serve(testContext(t), ln); err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
		t.Errorf("Serve on %s without auth: %v, want a refusal", ln.Addr(), err)
	}
}

func TestConnectionsAreLimited(t *testing.T) {
	ts := serve(t, Config{MaxConnections: 2})
	ended := make(chan struct{}, 2)
	ts.closedHook = func() { ended <- struct{}{} }
	a := dial(t, ts.ws+"/ws", nil)
	b := dial(t, ts.ws+"/echo", nil)
	if got := handshakeStatus(t, ts.ws+"/ws", nil); got != 503 {
		t.Fatalf("third connection: %d, want 503", got)
	}
	if got := metric(t, ts.http, `rally_limit_refusals_total{limit="connections"}`); got != 1 {
		t.Errorf("connection refusals counted %v, want 1", got)
	}
	if got := metric(t, ts.http, `rally_connections{endpoint="ws"}`); got != 1 {
		t.Errorf("rally_connections{endpoint=\"ws\"} = %v, want 1", got)
	}
	// A closed connection gives its slot back.
	a.c.Close(rally.CloseNormal, "")
	<-ended
	b.c.Close(rally.CloseNormal, "")
	<-ended
	dial(t, ts.ws+"/ws", nil)
	dial(t, ts.ws+"/ws", nil)
	if got := metric(t, ts.http, `rally_close_codes_total{code="1000"}`); got != 2 {
		t.Errorf("close code 1000 counted %v, want 2", got)
	}
}

func TestHandshakesPerAddressAreRateLimited(t *testing.T) {
	ts := serve(t, Config{HandshakeRate: 0.001, RateLimitLoopback: true}) // a burst of 1, then one per 1000 s
	dial(t, ts.ws+"/ws", nil)
	if got := handshakeStatus(t, ts.ws+"/ws", nil); got != 429 {
		t.Fatalf("second handshake: %d, want 429", got)
	}
	if got := metric(t, ts.http, `rally_limit_refusals_total{limit="handshake_rate"}`); got != 1 {
		t.Errorf("rate refusals counted %v, want 1", got)
	}
}

func TestLoopbackClientsAreNotRateLimitedByDefault(t *testing.T) {
	ts := serve(t, Config{HandshakeRate: 0.001})
	dial(t, ts.ws+"/ws", nil)
	dial(t, ts.ws+"/ws", nil)
}

func TestSlowRequestHeadIsCutAtTheHeaderTimeout(t *testing.T) {
	ts := serve(t, Config{HeaderReadTimeout: 200 * time.Millisecond})
	nc, err := net.Dial("tcp", strings.TrimPrefix(ts.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte("GET /ws HTTP/1.1\r\nHost: x\r\n")) // and never the rest
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("the server did not close the connection: %v", err)
	}
}
