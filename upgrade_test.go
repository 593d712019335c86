package rally

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// upgraded is what one call of Upgrade in a test server returned.
type upgraded struct {
	conn *Conn
	req  *http.Request
	err  error
}

// upgradeServer accepts loopback connections until the test ends and runs
// Upgrade with opts on each, on its own goroutine, reporting the results.
// The test ends only once every Upgrade has returned.
func upgradeServer(t *testing.T, opts *AcceptOptions) (string, <-chan upgraded) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan upgraded, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				c, r, err := Upgrade(nc, opts)
				results <- upgraded{c, r, err}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		close(results)
	})
	return ln.Addr().String(), results
}

func startUpgradeServer(t *testing.T, opts *AcceptOptions) (string, <-chan accepted) {
	addr, results := upgradeServer(t, opts)
	out := make(chan accepted, 16)
	go func() {
		for u := range results {
			out <- accepted{u.conn, u.err}
		}
	}()
	return addr, out
}

func TestUpgradeAnswersEachHandshakeStatusInOrderAsAcceptDoes(t *testing.T) {
	for _, tc := range handshakeStatusCases() {
		t.Run(tc.name, func(t *testing.T) { checkHandshakeStatus(t, tc, startUpgradeServer) })
	}
}

// parsed is what a requestParser made of a head, for comparing runs.
type parsed struct {
	n      int
	done   bool
	status int // of the refusal, 0 for none
	method string
	target string
	header http.Header
}

// parseInPieces feeds head to a new parser bounded by max, cut at the
// given offsets, and stops at the end of the head or the first error.
func parseInPieces(head []byte, max int, cuts []int) parsed {
	p := requestParser{max: max}
	var out parsed
	prev := 0
	for _, end := range append(slices.Clone(cuts), len(head)) {
		if end < prev || end > len(head) {
			continue
		}
		n, done, err := p.feed(head[prev:end])
		out.n += n
		if err != nil {
			out.status = err.(*refusalError).rf.status
			return out
		}
		if done {
			out.done = true
			break
		}
		if n != end-prev {
			panic(fmt.Sprintf("feed used %d of %d bytes without finishing", n, end-prev))
		}
		prev = end
	}
	out.method, out.target, out.header = p.method, p.target, p.header
	return out
}

// everyByte returns the cuts that feed head one byte at a time.
func everyByte(head []byte) []int {
	cuts := make([]int, len(head))
	for i := range cuts {
		cuts[i] = i + 1
	}
	return cuts
}

func TestRequestParserReadsTheSameHeadInOnePieceAndByteByByte(t *testing.T) {
	frames := "\x81\x85\x01\x02\x03\x04ifmhn"
	for _, tc := range []struct {
		name   string
		head   string
		method string
		target string
		header http.Header
	}{
		{"plain", "GET /chat?room=1 HTTP/1.1\r\nHost: rally.test\r\nUpgrade: websocket\r\n\r\n",
			"GET", "/chat?room=1", http.Header{"Host": {"rally.test"}, "Upgrade": {"websocket"}}},
		{"bare LF line ends", "GET / HTTP/1.1\nHost: a\nX: 1\n\n",
			"GET", "/", http.Header{"Host": {"a"}, "X": {"1"}}},
		{"empty lines before the request line", "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
			"GET", "/", http.Header{"Host": {"a"}}},
		{"names canonical, values trimmed, repeats kept", "GET / HTTP/1.1\r\nhost: a\r\nsec-websocket-key:\t k \r\nX-A: 1\r\nx-a: 2\r\nX-Empty:\r\n\r\n",
			"GET", "/", http.Header{"Host": {"a"}, "Sec-Websocket-Key": {"k"}, "X-A": {"1", "2"}, "X-Empty": {""}}},
		{"obs-text in a value", "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n",
			"GET", "/", http.Header{"Host": {"a"}, "X": {"caf\xc3\xa9"}}},
		{"absolute-form target", "GET http://rally.test/x HTTP/1.1\r\nHost: other\r\n\r\n",
			"GET", "http://rally.test/x", http.Header{"Host": {"other"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := []byte(tc.head + frames)
			whole := parseInPieces(head, 1<<10, nil)
			want := parsed{n: len(tc.head), done: true, method: tc.method, target: tc.target, header: tc.header}
			if fmt.Sprint(whole) != fmt.Sprint(want) {
				t.Fatalf("in one piece: %+v, want %+v", whole, want)
			}
			if got := parseInPieces(head, 1<<10, everyByte(head)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("byte by byte: %+v, want %+v", got, want)
			}
		})
	}
}

func TestRequestParserRefusesMalformedHeads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		head   string
		status int
	}{
		{"no version", "GET /\r\n\r\n", 400},
		{"two spaces", "GET  / HTTP/1.1\r\n\r\n", 400},
		{"method not a token", "G(T / HTTP/1.1\r\n\r\n", 400},
		{"control character in the target", "GET /a\x01b HTTP/1.1\r\n\r\n", 400},
		{"bad version", "GET / HTTP/1.x\r\n\r\n", 400},
		{"lower-case version", "GET / http/1.1\r\n\r\n", 400},
		{"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 505},
		{"header without colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", 400},
		{"space before the colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"obsolete line folding", "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n", 400},
		{"bare CR in a value", "GET / HTTP/1.1\r\nX: a\rb\r\nHost: a\r\n\r\n", 400},
		{"empty header name", "GET / HTTP/1.1\r\n: a\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := []byte(tc.head)
			for _, cuts := range [][]int{nil, everyByte(head)} {
				if got := parseInPieces(head, 1<<10, cuts); got.status != tc.status || got.done {
					t.Fatalf("%d cuts: %+v, want status %d", len(cuts), got, tc.status)
				}
			}
		})
	}
}

func TestRequestParserRefusesAHeadPastItsBoundWith431AsSoonAsItIsPassed(t *testing.T) {
	line := "GET / HTTP/1.1\r\n"
	const max = 64
	for _, tc := range []struct{ name, head string }{
		{"long header", line + "X: " + strings.Repeat("a", 100) + "\r\n\r\n"},
		{"many headers", line + strings.Repeat("X: 1\r\n", 20) + "\r\n"},
		{"endless request line", "GET /" + strings.Repeat("a", 200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := []byte(tc.head)
			got := parseInPieces(head, max, everyByte(head))
			if got.status != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("%+v, want 431", got)
			}
			if got.n != max {
				t.Fatalf("the parser took %d bytes before refusing, want %d", got.n, max)
			}
		})
	}
	exact := line + "Host: " + strings.Repeat("a", max-len(line)-10) + "\r\n\r\n"
	if got := parseInPieces([]byte(exact), max, nil); !got.done || got.n != max {
		t.Fatalf("a head of exactly %d bytes: %+v, want it read", max, got)
	}
}

func TestRequestParserTakesNothingOnceDoneAndKeepsItsError(t *testing.T) {
	p := requestParser{max: 1 << 10}
	if n, done, err := p.feed([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\nrest")); n != 27 || !done || err != nil {
		t.Fatalf("feed = %d, %v, %v, want 27, true, nil", n, done, err)
	}
	if n, done, err := p.feed([]byte("more")); n != 0 || !done || err != nil {
		t.Fatalf("feed after the end = %d, %v, %v, want 0, true, nil", n, done, err)
	}
	p = requestParser{max: 1 << 10}
	_, _, err := p.feed([]byte("BAD\r\n"))
	if n, done, again := p.feed([]byte("GET / HTTP/1.1\r\n\r\n")); err == nil || again != err || n != 0 || done {
		t.Fatalf("feed after an error = %d, %v, %v, want 0, false, %v", n, done, again, err)
	}
}

func TestUpgradeRefusesHeadsWhoseFramingIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lines  []string
		first  string
		status int
		reason string
	}{
		{"no Host", []string{"Host:"}, "", 400, "Host is missing"},
		{"Host twice", []string{"Host: a", "Host: b"}, "", 400, "Host appears more than once"},
		{"Host with a path", []string{"Host: a/b"}, "", 400, "Host is not a valid host"},
		{"Content-Length not a number", []string{"Content-Length: 1x"}, "", 400, "Content-Length is not a number"},
		{"Content-Length with a sign", []string{"Content-Length: +0"}, "", 400, "Content-Length is not a number"},
		{"differing Content-Lengths", []string{"Content-Length: 0", "Content-Length: 1"}, "", 400, "Content-Length has differing values"},
		{"Content-Length and Transfer-Encoding", []string{"Content-Length: 0", "Transfer-Encoding: chunked"}, "", 400, "both Content-Length and Transfer-Encoding"},
		{"asterisk target", nil, "GET * HTTP/1.1", 400, "the request target is not a valid URI"},
		{"authority target", nil, "GET rally.test:80 HTTP/1.1", 400, "the request target is not a valid URI"},
		{"oversized", []string{"X-Big: " + strings.Repeat("a", 300)}, "", 431, "the request head is longer than 256 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := handshakeBytes("GET", tc.lines...)
			if tc.first != "" {
				raw = []byte(tc.first + string(raw[bytes.IndexByte(raw, '\r'):]))
			}
			var told []error
			opts := &AcceptOptions{
				MaxHeaderBytes:   256,
				OnHandshakeError: func(r *http.Request, err error) { told = append(told, err) },
			}
			addr, results := upgradeServer(t, opts)
			resp, body, _ := exchange(t, addr, raw)
			got := <-results
			if resp.StatusCode != tc.status || !strings.HasPrefix(body, tc.reason) {
				t.Fatalf("answer %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.reason)
			}
			var he *HandshakeError
			if got.conn != nil || got.req != nil || !errors.As(got.err, &he) || he.Status != tc.status {
				t.Fatalf("Upgrade = %v, %v, %v, want only a *HandshakeError with %d", got.conn, got.req, got.err, tc.status)
			}
			if len(told) != 1 || told[0] != got.err {
				t.Fatalf("OnHandshakeError told %v, want once %v", told, got.err)
			}
		})
	}
}

func TestUpgradeReadsAHandshakeSentByteByByteThenExchangesMessages(t *testing.T) {
	watchNewConns(t)
	addr, results := upgradeServer(t, &AcceptOptions{Subprotocols: []string{"chat"}})
	p, err := rawpeer.Connect(addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := rawpeer.NewKey()
	raw := rawpeer.HandshakeRequest(addr, "/slow?x=1", key, http.Header{"Sec-WebSocket-Protocol": {"chat"}})
	for i := range raw {
		if err := p.WriteRaw(raw[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := p.ReadResponse(key)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Sec-WebSocket-Protocol") != "chat" {
		t.Errorf("Sec-WebSocket-Protocol %q, want chat", resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	got := <-results
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.req.URL.Path != "/slow" || got.req.URL.RawQuery != "x=1" || got.req.Host != addr || got.req.RemoteAddr != p.NetConn().LocalAddr().String() {
		t.Errorf("request %s %s host %s from %s, want /slow?x=1 to %s from %s", got.req.Method, got.req.URL, got.req.Host, got.req.RemoteAddr, addr, p.NetConn().LocalAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.WriteFrame(rawpeer.Text("ping?")); err != nil {
		t.Fatal(err)
	}
	if typ, msg, err := got.conn.Read(ctx); err != nil || typ != Text || string(msg) != "ping?" {
		t.Fatalf("server Read = %v, %q, %v", typ, msg, err)
	}
	if err := got.conn.Write(ctx, Binary, []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	f, err := p.ReadFrame()
	if err != nil || f.Opcode != rawpeer.OpBinary || !bytes.Equal(f.Payload, []byte{1, 2}) {
		t.Fatalf("client read %+v, %v, want binary 01 02", f, err)
	}
}

func TestUpgradePassesBytesSentWithTheRequestAsStartOfStream(t *testing.T) {
	conns := watchNewConns(t)
	addr, results := upgradeServer(t, nil)
	frame := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte("hello")})
	resp, _, _ := exchange(t, addr, append(handshakeBytes("GET"), frame...))
	if resp.StatusCode != 101 {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	got := <-results
	if got.err != nil {
		t.Fatal(got.err)
	}
	if o := <-conns; !o.server || !bytes.Equal(o.buffered, frame) {
		t.Fatalf("stream starts with % x (server %v), want % x", o.buffered, o.server, frame)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, msg, err := got.conn.Read(ctx); err != nil || string(msg) != "hello" {
		t.Fatalf("server Read = %q, %v, want hello", msg, err)
	}
}

func TestUpgradeGivesUpOnAHeadThatDoesNotArriveWithinTheTimeout(t *testing.T) {
	// The 20 bytes sent must be read before the timeout for the count to
	// say 20: on a busy machine the server may first run after 50 ms, and
	// then 0 came. Each such attempt still gives up with the timeout; the
	// next one gives the server twice as long.
	for timeout := 50 * time.Millisecond; ; timeout *= 2 {
		var told []error
		opts := &AcceptOptions{
			HandshakeTimeout: timeout,
			OnHandshakeError: func(r *http.Request, err error) { told = append(told, err) },
		}
		addr, results := upgradeServer(t, opts)
		nc, err := net.DialTimeout("tcp", addr, testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		head := handshakeBytes("GET")
		if _, err := nc.Write(head[:20]); err != nil {
			t.Fatal(err)
		}
		got := <-results
		if got.conn != nil || !errors.Is(got.err, os.ErrDeadlineExceeded) || !strings.Contains(got.err.Error(), fmt.Sprintf("did not arrive within %v (", timeout)) {
			t.Fatalf("Upgrade = %v, %v, want the timeout", got.conn, got.err)
		}
		if len(told) != 1 || told[0] != got.err {
			t.Fatalf("OnHandshakeError told %v, want once %v", told, got.err)
		}
		if !strings.Contains(got.err.Error(), "(20 bytes came)") {
			if strings.Contains(got.err.Error(), "(0 bytes came)") && timeout < slowness.Scale(5*time.Second) {
				continue
			}
			t.Fatalf("Upgrade = %v, want the 20 bytes sent counted", got.err)
		}
		// The server closed without an answer: a client sending slowly gets
		// nothing to wait for.
		nc.SetReadDeadline(time.Now().Add(testTimeout))
		if b, err := io.ReadAll(nc); len(b) != 0 || err != nil {
			t.Fatalf("client read %q, %v after the timeout, want end of stream", b, err)
		}
		return
	}
}

func TestUpgradeReportsAConnectionThatEndsWithinTheHead(t *testing.T) {
	addr, results := upgradeServer(t, nil)
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(handshakeBytes("GET")[:30])
	nc.Close()
	got := <-results
	if got.conn != nil || !errors.Is(got.err, io.EOF) || !strings.Contains(got.err.Error(), "ended within the request head (30 bytes came)") {
		t.Fatalf("Upgrade = %v, %v, want the end of stream within the head", got.conn, got.err)
	}
}

func TestUpgradeOverTLSReportsTheConnectionStateInTheRequest(t *testing.T) {
	watchNewConns(t)
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // only for its certificate
	srv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.TLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	results := make(chan upgraded, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			results <- upgraded{err: err}
			return
		}
		c, r, err := Upgrade(nc, nil)
		results <- upgraded{c, r, err}
	}()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	c, _ := dialOK(t, "wss://example.com/tls", &DialOptions{
		TLSConfig: cfg,
		NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, ln.Addr().String())
		},
	})
	defer c.CloseNow()
	got := <-results
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.conn.CloseNow()
	if got.req.TLS == nil || got.req.TLS.ServerName != "example.com" || got.req.TLS.NegotiatedProtocol != "" && got.req.TLS.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("request TLS state %+v, want the handshake with example.com", got.req.TLS)
	}
}

// FuzzRequestParser checks that a head cut into any pieces parses as it
// does in one piece, that the parser never takes bytes past the head or
// the bound, and that a head it accepts means to net/http what it means
// to rally (the differential guards against request smuggling).
func FuzzRequestParser(f *testing.F) {
	f.Add([]byte(handshakeBytes("GET")), uint64(1))
	f.Add([]byte("GET / HTTP/1.1\nHost: a\n\n\x81\x80"), uint64(7))
	f.Add([]byte("\r\nGET http://x/y HTTP/1.0\r\nHost: b\r\nContent-Length: 0\r\n\r\n"), uint64(3))
	f.Add([]byte("GET / HTTP/1.1\r\nX: 1\r\n 2\r\n\r\n"), uint64(11))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), uint64(5))
	f.Fuzz(func(t *testing.T, head []byte, seed uint64) {
		const max = 512
		whole := parseInPieces(head, max, nil)
		rng := rand.New(rand.NewPCG(seed, seed))
		var cuts []int
		for at := 0; at < len(head); {
			at += 1 + rng.IntN(8)
			cuts = append(cuts, at)
		}
		pieces := parseInPieces(head, max, cuts)
		if fmt.Sprint(whole) != fmt.Sprint(pieces) {
			t.Fatalf("in one piece %+v, in pieces %+v", whole, pieces)
		}
		if whole.n > len(head) || whole.n > max {
			t.Fatalf("used %d bytes of %d (bound %d)", whole.n, len(head), max)
		}
		if !whole.done {
			return
		}
		p := requestParser{max: max}
		p.feed(head)
		r, rf := p.request(fakeAddrConn{})
		if rf != nil || len(r.TransferEncoding) > 0 {
			// Refused, or refused by the rules for its body (net/http
			// ignores Transfer-Encoding in HTTP/1.0, rally refuses it).
			return
		}
		// net/http does not skip empty lines before the request line.
		start := 0
		for start < whole.n && (head[start] == '\r' || head[start] == '\n') {
			start++
		}
		std, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head[start:whole.n])))
		if err != nil {
			t.Fatalf("rally read %q as %s %s, net/http refuses it: %v", head[:whole.n], r.Method, r.RequestURI, err)
		}
		if std.Method != r.Method || std.RequestURI != r.RequestURI || std.Host != r.Host || std.ContentLength != r.ContentLength {
			t.Fatalf("rally read %s %s host %q length %d, net/http %s %s host %q length %d",
				r.Method, r.RequestURI, r.Host, r.ContentLength, std.Method, std.RequestURI, std.Host, std.ContentLength)
		}
		for name, values := range r.Header {
			if name == "Host" {
				continue
			}
			if !slices.Equal(values, std.Header[name]) {
				t.Fatalf("header %s: rally %q, net/http %q", name, values, std.Header[name])
			}
		}
	})
}

// fakeAddrConn is a net.Conn that only has addresses, for building a
// request outside a connection.
type fakeAddrConn struct{ net.Conn }

func (fakeAddrConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// browserHead is an opening handshake as Chromium sends it.
var browserHead = []byte("GET /chat?room=1 HTTP/1.1\r\n" +
	"Host: rally.test\r\n" +
	"Connection: Upgrade\r\n" +
	"Pragma: no-cache\r\n" +
	"Cache-Control: no-cache\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36\r\n" +
	"Upgrade: websocket\r\n" +
	"Origin: https://rally.test\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Sec-WebSocket-Key: " + rfcKey + "\r\n" +
	"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n")

func BenchmarkRequestParserBrowserHead(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(browserHead)))
	for b.Loop() {
		p := requestParser{max: DefaultMaxHeaderBytes}
		if _, done, err := p.feed(browserHead); !done || err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequestParserBrowserHeadByteByByte(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(browserHead)))
	for b.Loop() {
		p := requestParser{max: DefaultMaxHeaderBytes}
		for i := range browserHead {
			if _, _, err := p.feed(browserHead[i : i+1]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkHandshakeOverLoopback compares a whole handshake (Dial against
// Accept behind net/http, and against Upgrade on a raw listener).
func BenchmarkHandshakeOverLoopback(b *testing.B) {
	accept := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := Accept(w, r, nil); err == nil {
			c.CloseNow()
		}
	}))
	defer accept.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				if c, _, err := Upgrade(nc, nil); err == nil {
					c.CloseNow()
				}
			}()
		}
	}()
	for _, tc := range []struct{ name, url string }{
		{"Accept", "ws://" + accept.Listener.Addr().String() + "/"},
		{"Upgrade", "ws://" + ln.Addr().String() + "/"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, _, err := Dial(context.Background(), tc.url, nil)
				if err != nil {
					b.Fatal(err)
				}
				c.CloseNow()
			}
		})
	}
}
