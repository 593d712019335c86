package server

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

func TestTheClientAddressIsWhatTrustedProxiesForwarded(t *testing.T) {
	cases := []struct {
		trusted string
		peer    string
		xff     []string
		want    string
	}{
		// A client straight to the server is its own address, whatever it
		// says.
		{"", "192.0.2.1:5000", nil, "192.0.2.1"},
		{"", "192.0.2.1:5000", []string{"203.0.113.9"}, "192.0.2.1"},
		// A local proxy (trusted by default) names its client.
		{"", "127.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"", "[::1]:5000", []string{"2001:db8::7"}, "2001:db8::7"},
		// What a client wrote before its own address is not believed: the
		// rightmost untrusted address is the client.
		{"", "127.0.0.1:5000", []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"", "127.0.0.1:5000", []string{"198.51.100.1", "203.0.113.9"}, "203.0.113.9"},
		// A chain of trusted proxies is walked through.
		{"loopback,10.0.0.0/8", "127.0.0.1:5000", []string{"203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"loopback", "127.0.0.1:5000", []string{"203.0.113.9, 10.1.2.3"}, "10.1.2.3"},
		// All trusted: the leftmost.
		{"", "127.0.0.1:5000", []string{"127.0.0.5, 127.0.0.6"}, "127.0.0.5"},
		// No header: the proxy itself.
		{"", "127.0.0.1:5000", nil, "127.0.0.1"},
		// An entry that is not an address ends the walk at the hop that
		// added it; ports and IPv4 in IPv6 are read.
		{"", "127.0.0.1:5000", []string{"unknown"}, "127.0.0.1"},
		{"", "127.0.0.1:5000", []string{"203.0.113.9:4711"}, "203.0.113.9"},
		{"", "127.0.0.1:5000", []string{"[2001:db8::7]:4711"}, "2001:db8::7"},
		{"", "127.0.0.1:5000", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		// Trusting no one: the peer.
		{"none", "127.0.0.1:5000", []string{"203.0.113.9"}, "127.0.0.1"},
		{"private", "10.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"192.0.2.7", "192.0.2.7:5000", []string{"203.0.113.9"}, "203.0.113.9"},
	}
	for _, c := range cases {
		p, err := parseProxyRanges(c.trusted)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := p.clientAddr(r); got.String() != c.want {
			t.Errorf("trusted %q, peer %s, X-Forwarded-For %q: client %s, want %s", c.trusted, c.peer, c.xff, got, c.want)
		}
	}
}

func TestTrustedProxiesThatCannotBeReadAreRefused(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "none,loopback", "loopback,"} {
		if _, err := parseProxyRanges(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := New(Config{TrustedProxies: "x"}); err == nil {
		t.Error("New accepted TrustedProxies \"x\"")
	}
}

func TestAnIPv6ClientIsRateLimitedByItsSlash64(t *testing.T) {
	l := newRateLimiter(0.001, false) // a burst of 1
	now := time.Now()
	if !l.allow(netip.MustParseAddr("2001:db8:1:2::1"), now) {
		t.Fatal("first handshake refused")
	}
	if l.allow(netip.MustParseAddr("2001:db8:1:2:ffff::9"), now) {
		t.Error("another address of the same /64 was let through")
	}
	if !l.allow(netip.MustParseAddr("2001:db8:1:3::1"), now) {
		t.Error("another /64 was refused")
	}
	if !l.allow(netip.MustParseAddr("::1"), now) || !l.allow(netip.MustParseAddr("::1"), now) {
		t.Error("loopback was limited")
	}
}

// Through a local reverse proxy (loopback, trusted by default) each
// client is counted by the address the proxy forwards, not the proxy's:
// one client's storm of handshakes is refused, another's are not, and a
// local tool that forwards nothing stays exempt.
func TestClientsOfALocalProxyAreRateLimitedByTheirOwnAddress(t *testing.T) {
	ts := serve(t, Config{HandshakeRate: 0.001}) // a burst of 1, then one per 1000 s
	from := func(a string) http.Header { return http.Header{"X-Forwarded-For": {a}} }
	dial(t, ts.ws+"/ws", &rally.DialOptions{Header: from("203.0.113.9")})
	if got := handshakeStatus(t, ts.ws+"/ws", from("203.0.113.9")); got != http.StatusTooManyRequests {
		t.Fatalf("second handshake of 203.0.113.9: %d, want 429", got)
	}
	if got := handshakeStatus(t, ts.ws+"/ws", from("203.0.113.10")); got != http.StatusSwitchingProtocols {
		t.Errorf("first handshake of 203.0.113.10: %d, want 101", got)
	}
	// A client cannot choose its key by writing addresses before its own.
	if got := handshakeStatus(t, ts.ws+"/ws", from("198.51.100.1, 203.0.113.9")); got != http.StatusTooManyRequests {
		t.Errorf("203.0.113.9 with a forged first hop: %d, want 429", got)
	}
	dial(t, ts.ws+"/ws", nil)
	dial(t, ts.ws+"/ws", nil)
}

// The same over HTTP/2 (RFC 8441, h2c): a WebSocket stream's CONNECT is
// counted by the address its X-Forwarded-For names, whatever stream of
// whatever connection it comes on.
func TestClientsOfALocalProxyAreRateLimitedByTheirOwnAddressOverHTTP2(t *testing.T) {
	addr, stop := serveConfig(t, Config{ShutdownTimeout: 2 * time.Second, H2C: true, HandshakeRate: 0.001})
	defer stop()
	tr := &http.Transport{ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	status := func(client string) int {
		t.Helper()
		opts := &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr, Header: http.Header{"X-Forwarded-For": {client}}}
		c, resp, err := rally.Dial(testContext(t), "ws://"+addr+"/ws", opts)
		if err == nil {
			c.CloseNow()
			return http.StatusOK // an HTTP/2 WebSocket is accepted with 200
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return resp.StatusCode
	}
	if got := status("203.0.113.9"); got != http.StatusOK {
		t.Fatalf("first stream of 203.0.113.9: %d, want 200", got)
	}
	if got := status("203.0.113.9"); got != http.StatusTooManyRequests {
		t.Errorf("second stream of 203.0.113.9: %d, want 429", got)
	}
	if got := status("203.0.113.10"); got != http.StatusOK {
		t.Errorf("first stream of 203.0.113.10: %d, want 200", got)
	}
}
