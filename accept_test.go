package rally

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// testTimeout bounds every network step of these tests.
const testTimeout = 10 * time.Second

// opened is what testHookNewConn saw of one connection a handshake opened.
type opened struct {
	nc       net.Conn
	buffered []byte // a copy
	server   bool
}

// watchNewConns reports each connection a handshake opens on the returned
// channel and closes them all when the test ends. Call it before starting
// servers, so that it is cleaned up after them.
func watchNewConns(t *testing.T) <-chan opened {
	t.Helper()
	ch := make(chan opened, 16)
	var mu sync.Mutex
	var all []net.Conn
	hook := func(nc net.Conn, buffered []byte, server bool) {
		mu.Lock()
		all = append(all, nc)
		mu.Unlock()
		select {
		case ch <- opened{nc: nc, buffered: bytes.Clone(buffered), server: server}:
		default: // a connection the test does not look at
		}
	}
	testHookNewConn.Store(&hook)
	t.Cleanup(func() {
		testHookNewConn.Store(nil)
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range all {
			nc.Close()
		}
	})
	return ch
}

// accepted is what one call of Accept in a test server returned.
type accepted struct {
	conn *Conn
	err  error
}

// acceptServer starts an HTTP server whose handler runs before (if set) and
// then Accept with opts over wrap(w) (if set), and reports what Accept
// returned on the channel.
func acceptServer(t *testing.T, opts *AcceptOptions, before func(w http.ResponseWriter), wrap func(http.ResponseWriter) http.ResponseWriter) (*httptest.Server, <-chan accepted) {
	t.Helper()
	results := make(chan accepted, 16)
	srv := httptest.NewServer(acceptHandler(opts, before, wrap, results))
	t.Cleanup(srv.Close)
	return srv, results
}

func acceptHandler(opts *AcceptOptions, before func(w http.ResponseWriter), wrap func(http.ResponseWriter) http.ResponseWriter, results chan<- accepted) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if before != nil {
			before(w)
		}
		if wrap != nil {
			w = wrap(w)
		}
		c, err := Accept(w, r, opts)
		results <- accepted{c, err}
	}
}

// handshakeBytes returns an opening handshake request with method to Host
// rally.test, with lines applied as headLines does.
func handshakeBytes(method string, lines ...string) []byte {
	defaults := []string{
		"Host: rally.test",
		"Upgrade: websocket",
		"Connection: Upgrade",
		"Sec-WebSocket-Key: " + rfcKey,
		"Sec-WebSocket-Version: 13",
	}
	return []byte(headLines(method+" /chat HTTP/1.1", defaults, lines))
}

// headLines returns an HTTP head: first, then the default lines that lines
// do not name, then lines. A line "Name: value" replaces the default of
// that name (the same name on several lines is sent on each); "Name:"
// removes it.
func headLines(first string, defaults, lines []string) string {
	name := func(line string) string { n, _, _ := strings.Cut(line, ":"); return strings.ToLower(n) }
	var b strings.Builder
	b.WriteString(first + "\r\n")
	for _, d := range defaults {
		if !slices.ContainsFunc(lines, func(l string) bool { return name(l) == name(d) }) {
			b.WriteString(d + "\r\n")
		}
	}
	for _, l := range lines {
		if _, v, _ := strings.Cut(l, ":"); strings.TrimSpace(v) != "" {
			b.WriteString(l + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.String()
}

// exchange writes raw to addr in one write and reads the answer; the body
// of an answer other than 101 is read to its end.
func exchange(t *testing.T, addr string, raw []byte) (resp *http.Response, body string, nc net.Conn) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(testTimeout))
	if _, err := nc.Write(raw); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the answer's body: %v", err)
		}
		body = string(b)
		// A client closes once it has read a refusal, which ends the
		// server's lingering close at once.
		nc.Close()
	}
	return resp, body, nc
}

// handshakeStatusCase is one request and the answer a server must give it,
// through Accept and through Upgrade alike.
type handshakeStatusCase struct {
	name       string
	raw        []byte
	opts       *AcceptOptions
	status     int
	header     [2]string // a header the answer must carry
	bodyPrefix string
}

// handshakeStatusCases is the specification of the handshake rules' order
// and answers that Accept and Upgrade share.
func handshakeStatusCases() []handshakeStatusCase {
	evil := "Origin: https://evil.example"
	return []handshakeStatusCase{
		{"good request", handshakeBytes("GET"), nil, 101, [2]string{}, ""},
		{"POST", handshakeBytes("POST"), nil, 405, [2]string{"Allow", "GET"}, "method \"POST\" is not GET"},
		{"PUT without Upgrade, version 8, other origin", handshakeBytes("PUT", "Upgrade:", "Sec-WebSocket-Version: 8", evil), nil, 405, [2]string{"Allow", "GET"}, "method"},
		{"no Upgrade", handshakeBytes("GET", "Upgrade:"), nil, 400, [2]string{}, "Upgrade header does not contain websocket"},
		{"Upgrade h2c", handshakeBytes("GET", "Upgrade: h2c"), nil, 400, [2]string{}, "Upgrade header"},
		{"Upgrade in odd case", handshakeBytes("GET", "Upgrade: WebSocket"), nil, 101, [2]string{}, ""},
		{"Upgrade in a list", handshakeBytes("GET", "Upgrade: foo/2, WEBSOCKET"), nil, 101, [2]string{}, ""},
		{"no Upgrade and no key", handshakeBytes("GET", "Upgrade:", "Sec-WebSocket-Key:"), nil, 400, [2]string{}, "Upgrade header"},
		{"no Connection", handshakeBytes("GET", "Connection:"), nil, 400, [2]string{}, "Connection header does not contain upgrade"},
		{"Connection keep-alive only", handshakeBytes("GET", "Connection: keep-alive"), nil, 400, [2]string{}, "Connection header"},
		{"Connection in a list, odd case", handshakeBytes("GET", "Connection: keep-alive, UPGRADE"), nil, 101, [2]string{}, ""},
		{"Connection on two lines", handshakeBytes("GET", "Connection: keep-alive", "Connection: upgrade"), nil, 101, [2]string{}, ""},
		{"no key", handshakeBytes("GET", "Sec-WebSocket-Key:"), nil, 400, [2]string{}, "Sec-WebSocket-Key is missing"},
		{"key of 15 bytes", handshakeBytes("GET", "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAA"), nil, 400, [2]string{}, "Sec-WebSocket-Key is not 16 bytes in base64"},
		{"key of 17 bytes", handshakeBytes("GET", "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAA="), nil, 400, [2]string{}, "Sec-WebSocket-Key is not 16 bytes"},
		{"key not base64", handshakeBytes("GET", "Sec-WebSocket-Key: !!!!!!!!!!!!!!!!!!!!!!=="), nil, 400, [2]string{}, "Sec-WebSocket-Key is not 16 bytes"},
		{"key twice", handshakeBytes("GET", "Sec-WebSocket-Key: "+rfcKey, "Sec-WebSocket-Key: "+rfcKey), nil, 400, [2]string{}, "Sec-WebSocket-Key appears more than once"},
		{"short key and version 8", handshakeBytes("GET", "Sec-WebSocket-Key: AAAA", "Sec-WebSocket-Version: 8"), nil, 400, [2]string{}, "Sec-WebSocket-Key"},
		{"version 8", handshakeBytes("GET", "Sec-WebSocket-Version: 8"), nil, 426, [2]string{"Sec-WebSocket-Version", "13"}, "Sec-WebSocket-Version must be 13"},
		{"no version", handshakeBytes("GET", "Sec-WebSocket-Version:"), nil, 426, [2]string{"Sec-WebSocket-Version", "13"}, "Sec-WebSocket-Version"},
		{"version 8 and other origin", handshakeBytes("GET", "Sec-WebSocket-Version: 8", evil), nil, 426, [2]string{"Upgrade", "websocket"}, "Sec-WebSocket-Version"},
		{"no origin", handshakeBytes("GET"), nil, 101, [2]string{}, ""},
		{"same origin", handshakeBytes("GET", "Origin: https://rally.test"), nil, 101, [2]string{}, ""},
		{"same origin in odd case", handshakeBytes("GET", "Origin: https://RALLY.Test"), nil, 101, [2]string{}, ""},
		{"other origin", handshakeBytes("GET", evil), nil, 403, [2]string{}, "Origin is not allowed"},
		{"null origin", handshakeBytes("GET", "Origin: null"), nil, 403, [2]string{}, "Origin is not allowed"},
		{"origin matching a pattern", handshakeBytes("GET", "Origin: https://app.example.com:8443"), &AcceptOptions{OriginPatterns: []string{"*.example.com"}}, 101, [2]string{}, ""},
		{"origin matching no pattern", handshakeBytes("GET", evil), &AcceptOptions{OriginPatterns: []string{"*.example.com"}}, 403, [2]string{}, "Origin"},
		{"malformed pattern", handshakeBytes("GET", evil), &AcceptOptions{OriginPatterns: []string{"[a-"}}, 500, [2]string{}, "origin pattern"},
		{"origin check opted out", handshakeBytes("GET", evil), &AcceptOptions{InsecureSkipOriginCheck: true}, 101, [2]string{}, ""},
		{"body by Content-Length", append(handshakeBytes("GET", "Content-Length: 5"), "hello"...), nil, 400, [2]string{}, "an upgrade request must not carry a body"},
		{"chunked body", append(handshakeBytes("GET", "Transfer-Encoding: chunked"), "5\r\nhello\r\n0\r\n\r\n"...), nil, 400, [2]string{}, "an upgrade request must not carry a body"},
		{"body and other origin", append(handshakeBytes("GET", "Content-Length: 5", evil), "hello"...), nil, 403, [2]string{}, "Origin"},
		{"empty body", handshakeBytes("GET", "Content-Length: 0"), nil, 101, [2]string{}, ""},
		{"HTTP/1.0", []byte(strings.Replace(string(handshakeBytes("GET")), "HTTP/1.1", "HTTP/1.0", 1)), nil, 400, [2]string{}, "HTTP version must be at least 1.1"},
	}
}

// startServer starts a server that upgrades each connection with opts and
// reports what Accept or Upgrade returned; it returns the server's address.
type startServer func(t *testing.T, opts *AcceptOptions) (addr string, results <-chan accepted)

func startAcceptServer(t *testing.T, opts *AcceptOptions) (string, <-chan accepted) {
	srv, results := acceptServer(t, opts, nil, nil)
	return srv.Listener.Addr().String(), results
}

// checkHandshakeStatus sends tc's request to a server start starts and
// checks the answer and the result.
func checkHandshakeStatus(t *testing.T, tc handshakeStatusCase, start startServer) {
	t.Helper()
	conns := watchNewConns(t)
	opts := AcceptOptions{}
	if tc.opts != nil {
		opts = *tc.opts
	}
	var told []error
	opts.OnHandshakeError = func(r *http.Request, err error) { told = append(told, err) }
	addr, results := start(t, &opts)
	resp, body, _ := exchange(t, addr, tc.raw)
	got := <-results
	if got.err != nil && (len(told) != 1 || told[0] != got.err) || got.err == nil && len(told) != 0 {
		t.Errorf("OnHandshakeError told %v, want exactly the error returned (%v)", told, got.err)
	}
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d (body %q), want %d", resp.StatusCode, body, tc.status)
	}
	if tc.header[0] != "" && resp.Header.Get(tc.header[0]) != tc.header[1] {
		t.Errorf("%s: %q, want %q", tc.header[0], resp.Header.Get(tc.header[0]), tc.header[1])
	}
	if tc.status == http.StatusSwitchingProtocols {
		if got.err != nil || got.conn == nil {
			t.Fatalf("got %v, %v, want a connection", got.conn, got.err)
		}
		if a := resp.Header.Get("Sec-WebSocket-Accept"); a != rfcAccept {
			t.Errorf("Sec-WebSocket-Accept %q, want %q", a, rfcAccept)
		}
		return
	}
	if !strings.HasPrefix(body, tc.bodyPrefix) {
		t.Errorf("body %q, want it to start with %q", body, tc.bodyPrefix)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	if !resp.Close {
		t.Errorf("the answer does not say Connection: close")
	}
	var he *HandshakeError
	if !errors.As(got.err, &he) || he.Status != tc.status || !errors.Is(got.err, ErrBadHandshake) {
		t.Fatalf("error %v, want a *HandshakeError with status %d", got.err, tc.status)
	}
	if !strings.Contains(got.err.Error(), tc.bodyPrefix) {
		t.Errorf("error %q does not say %q", got.err, tc.bodyPrefix)
	}
	select {
	case o := <-conns:
		t.Fatalf("a refused request opened a connection (buffered %q)", o.buffered)
	default:
	}
}

func TestAcceptAnswersEachHandshakeStatusInOrder(t *testing.T) {
	for _, tc := range handshakeStatusCases() {
		t.Run(tc.name, func(t *testing.T) { checkHandshakeStatus(t, tc, startAcceptServer) })
	}
}

func TestAcceptSelectsServersPreferredSubprotocolAmongClientsOffers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server []string
		lines  []string
		want   string
	}{
		{"server preference wins", []string{"b", "a"}, []string{"Sec-WebSocket-Protocol: a, b"}, "b"},
		{"offers on several lines", []string{"c", "a"}, []string{"Sec-WebSocket-Protocol: x", "Sec-WebSocket-Protocol: y,a"}, "a"},
		{"no common subprotocol", []string{"a"}, []string{"Sec-WebSocket-Protocol: b"}, ""},
		{"subprotocols compare case-sensitively", []string{"chat"}, []string{"Sec-WebSocket-Protocol: Chat"}, ""},
		{"client offers none", []string{"a"}, nil, ""},
		{"server speaks none", nil, []string{"Sec-WebSocket-Protocol: a"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watchNewConns(t)
			srv, results := acceptServer(t, &AcceptOptions{Subprotocols: tc.server}, nil, nil)
			resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET", tc.lines...))
			got := <-results
			if resp.StatusCode != 101 || got.err != nil {
				t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
			}
			if p := got.conn.Subprotocol(); p != tc.want {
				t.Errorf("Conn.Subprotocol() = %q, want %q", p, tc.want)
			}
			values := resp.Header.Values("Sec-WebSocket-Protocol")
			if tc.want == "" && len(values) != 0 {
				t.Errorf("Sec-WebSocket-Protocol %q sent, want none", values)
			}
			if tc.want != "" && (len(values) != 1 || values[0] != tc.want) {
				t.Errorf("Sec-WebSocket-Protocol %q sent, want %q", values, tc.want)
			}
		})
	}
}

func TestAcceptPassesBytesSentWithTheRequestAsStartOfStream(t *testing.T) {
	conns := watchNewConns(t)
	srv, results := acceptServer(t, nil, nil, nil)
	// A masked text frame "hello" with mask 01 02 03 04, in the same write
	// as the request.
	frame := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte("hello")})
	if want := []byte{0x81, 0x85, 1, 2, 3, 4, 'h' ^ 1, 'e' ^ 2, 'l' ^ 3, 'l' ^ 4, 'o' ^ 1}; !bytes.Equal(frame, want) {
		t.Fatalf("frame % x, want % x", frame, want)
	}
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), append(handshakeBytes("GET"), frame...))
	if resp.StatusCode != 101 {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	if got := <-results; got.err != nil {
		t.Fatal(got.err)
	}
	o := <-conns
	if !o.server {
		t.Error("the connection was opened as a client")
	}
	if !bytes.Equal(o.buffered, frame) {
		t.Fatalf("stream starts with % x, want % x", o.buffered, frame)
	}
}

// deadlineHijacker hijacks the writer it wraps and leaves deadlines that
// have already passed on the connection, as a server or middleware with
// read and write timeouts may (net/http's own Hijack clears them).
type deadlineHijacker struct{ http.ResponseWriter }

func (w deadlineHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		nc.SetReadDeadline(time.Unix(1, 0))
		nc.SetWriteDeadline(time.Unix(1, 0))
	}
	return nc, brw, err
}

func TestAcceptClearsDeadlinesLeftOnTheHijackedConnection(t *testing.T) {
	conns := watchNewConns(t)
	results := make(chan accepted, 1)
	srv := httptest.NewUnstartedServer(acceptHandler(nil, nil, func(w http.ResponseWriter) http.ResponseWriter { return deadlineHijacker{w} }, results))
	srv.Listener = trackingListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET"))
	if got := <-results; resp.StatusCode != 101 || got.err != nil {
		t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
	}
	tc := (<-conns).nc.(*trackedConn)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if !tc.readDeadline.IsZero() || !tc.writeDeadline.IsZero() {
		t.Fatalf("after Accept the read deadline is %v and the write deadline %v, want none", tc.readDeadline, tc.writeDeadline)
	}
}

// unwrappingWriter hides the http.Hijacker of the writer it wraps, as
// middleware does, but offers it through Unwrap.
type unwrappingWriter struct{ http.ResponseWriter }

func (w unwrappingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// opaqueWriter hides the writer it wraps entirely.
type opaqueWriter struct{ http.ResponseWriter }

func TestAcceptHijacksThroughAResponseWriterWrapperWithUnwrap(t *testing.T) {
	watchNewConns(t)
	srv, results := acceptServer(t, nil, nil, func(w http.ResponseWriter) http.ResponseWriter { return unwrappingWriter{w} })
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET"))
	if got := <-results; resp.StatusCode != 101 || got.err != nil {
		t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
	}
}

func TestAcceptAnswers500WhenTheResponseWriterCannotBeHijacked(t *testing.T) {
	watchNewConns(t)
	srv, results := acceptServer(t, nil, nil, func(w http.ResponseWriter) http.ResponseWriter { return opaqueWriter{w} })
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET"))
	got := <-results
	if resp.StatusCode != 500 {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
	if !errors.Is(got.err, http.ErrNotSupported) {
		t.Errorf("Accept error %v, want http.ErrNotSupported", got.err)
	}
}

func TestAcceptSendsHeadersTheHandlerSetButNotItsHandshakeHeaders(t *testing.T) {
	watchNewConns(t)
	before := func(w http.ResponseWriter) {
		w.Header().Set("Set-Cookie", "session=1")
		w.Header().Set("Upgrade", "h2c")
	}
	srv, results := acceptServer(t, nil, before, nil)
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET"))
	if got := <-results; resp.StatusCode != 101 || got.err != nil {
		t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
	}
	if c := resp.Header.Values("Set-Cookie"); len(c) != 1 || c[0] != "session=1" {
		t.Errorf("Set-Cookie %q, want session=1", c)
	}
	if u := resp.Header.Values("Upgrade"); len(u) != 1 || u[0] != "websocket" {
		t.Errorf("Upgrade %q, want websocket only", u)
	}
}

// trackedConn counts the write calls made on it and remembers the
// deadlines set on it.
type trackedConn struct {
	net.Conn
	writes atomic.Int32

	mu            sync.Mutex
	readDeadline  time.Time
	writeDeadline time.Time
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *trackedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// trackingListener hands out its connections as *trackedConn.
type trackingListener struct{ net.Listener }

func (l trackingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: nc}, nil
}

func TestAcceptWritesThe101InOneWrite(t *testing.T) {
	conns := watchNewConns(t)
	results := make(chan accepted, 1)
	srv := httptest.NewUnstartedServer(acceptHandler(&AcceptOptions{Subprotocols: []string{"chat"}}, nil, nil, results))
	srv.Listener = trackingListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	resp, _, _ := exchange(t, srv.Listener.Addr().String(), handshakeBytes("GET", "Sec-WebSocket-Protocol: chat"))
	if got := <-results; resp.StatusCode != 101 || got.err != nil {
		t.Fatalf("status %d, Accept error %v, want 101", resp.StatusCode, got.err)
	}
	o := <-conns
	cc, ok := o.nc.(*trackedConn)
	if !ok {
		t.Fatalf("hijacked connection is a %T, want the test's *trackedConn", o.nc)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Fatalf("the 101 response took %d writes, want 1", n)
	}
}
