package rally

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/rallyws/rally/internal/rawpeer"
)

// The example of RFC 6455 1.3.
const (
	rfcKey    = "dGhlIHNhbXBsZSBub25jZQ=="
	rfcAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
)

func TestAcceptKeyOfRFC6455ExampleKeyIsRFC6455ExampleAnswer(t *testing.T) {
	if got := string(appendAcceptKey(nil, rfcKey)); got != rfcAccept {
		t.Fatalf("appendAcceptKey(%q) = %q, want %q", rfcKey, got, rfcAccept)
	}
}

func TestAcceptKeyAllocatesNothingIntoARoomyBuffer(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() { appendAcceptKey(buf, rfcKey) })
	if allocs != 0 {
		t.Fatalf("appendAcceptKey: %v allocs per run, want 0", allocs)
	}
}

func TestValidKeyAcceptsOnlyBase64Of16Bytes(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{rfcKey, true},
		{"AAAAAAAAAAAAAAAAAAAAAA==", true},
		{"", false},
		{"AAAAAAAAAAAAAAAAAAAA", false},             // 15 bytes
		{"AAAAAAAAAAAAAAAAAAAAAAA=", false},         // 17 bytes
		{"AAAAAAAAAAAAAAAAAAAAAAAAAA==", false},     // 19 bytes
		{"AAAAAAAAAAAAAAAAAAAAAA", false},           // 16 bytes without padding
		{"AAAAAAAAAAAAAAAAAAAA-_==", false},         // URL alphabet
		{"AAAAAAAAAAAAAAAAAAAA\r\n==", false},       // line break inside
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false}, // 23 bytes
	} {
		if got := validKey(tc.key); got != tc.want {
			t.Errorf("validKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestHasTokenFindsTokenInCommaListsAcrossLinesWithoutRegardToCase(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{[]string{"Upgrade"}, true},
		{[]string{"UPGRADE"}, true},
		{[]string{"keep-alive, Upgrade"}, true},
		{[]string{"keep-alive,upgrade"}, true},
		{[]string{" \tupgrade\t "}, true},
		{[]string{"keep-alive", "upgrade"}, true},
		{[]string{",,upgrade,,"}, true},
		{[]string{"keep-alive"}, false},
		{[]string{"upgrades"}, false},
		{[]string{"up grade"}, false},
		{[]string{"upgrade-insecure-requests"}, false},
		{nil, false},
		{[]string{""}, false},
	} {
		if got := hasToken(tc.values, "upgrade"); got != tc.want {
			t.Errorf("hasToken(%q, upgrade) = %v, want %v", tc.values, got, tc.want)
		}
	}
}

func TestSelectSubprotocolPicksServersFirstPreferenceAmongClientsOffers(t *testing.T) {
	for _, tc := range []struct {
		server, offered []string
		want            string
	}{
		{[]string{"b", "a"}, []string{"a, b"}, "b"},
		{[]string{"a", "b"}, []string{"b, a"}, "a"},
		{[]string{"c", "a"}, []string{"x", "a"}, "a"}, // offers on two lines
		{[]string{"chat.v2"}, []string{" chat.v1 ,chat.v2 "}, "chat.v2"},
		{[]string{"chat"}, []string{"CHAT"}, ""}, // case-sensitive
		{[]string{"chat"}, nil, ""},
		{nil, []string{"chat"}, ""},
		{[]string{"a"}, []string{"a b"}, ""},
	} {
		if got := selectSubprotocol(tc.server, tc.offered); got != tc.want {
			t.Errorf("selectSubprotocol(%q, %q) = %q, want %q", tc.server, tc.offered, got, tc.want)
		}
	}
}

func TestCheckSubprotocolsRefusesNonTokensAndDuplicates(t *testing.T) {
	for _, tc := range []struct {
		protocols []string
		ok        bool
	}{
		{nil, true},
		{[]string{"chat", "chat.v2", "mqtt"}, true},
		{[]string{""}, false},
		{[]string{"a,b"}, false},
		{[]string{"a b"}, false},
		{[]string{"a\r\nX-Evil: 1"}, false},
		{[]string{"chat", "chat"}, false},
	} {
		err := checkSubprotocols(tc.protocols)
		if (err == nil) != tc.ok {
			t.Errorf("checkSubprotocols(%q) = %v, want ok %v", tc.protocols, err, tc.ok)
		}
	}
}

func TestChosenSubprotocolAcceptsOnlyOneThatWasOffered(t *testing.T) {
	offered := []string{"chat", "mqtt"}
	for _, tc := range []struct {
		values  []string
		want    string
		wantErr string
	}{
		{nil, "", ""},
		{[]string{"mqtt"}, "mqtt", ""},
		{[]string{" chat "}, "chat", ""},
		{[]string{"other"}, "", `server chose subprotocol "other", which was not offered`},
		{[]string{"Chat"}, "", "not offered"},
		{[]string{"chat, mqtt"}, "", "more than one"},
		{[]string{"chat", "mqtt"}, "", "more than one"},
		{[]string{""}, "", "not offered"},
	} {
		got, err := chosenSubprotocol(tc.values, offered)
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("chosenSubprotocol(%q) = %q, %v, want %q", tc.values, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("chosenSubprotocol(%q) = %q, %v, want error containing %q", tc.values, got, err, tc.wantErr)
		}
	}
}

func TestOriginPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		origins  []string
		host     string
		patterns []string
		want     bool
	}{
		{"no Origin: a non-browser client", nil, "rally.test", nil, true},
		{"same host", []string{"https://rally.test"}, "rally.test", nil, true},
		{"same host and port", []string{"http://rally.test:8080"}, "rally.test:8080", nil, true},
		{"same host in other case", []string{"HTTPS://Rally.TEST"}, "rally.TEST", nil, true},
		{"same host, other port", []string{"http://rally.test:9090"}, "rally.test:8080", nil, false},
		{"other host", []string{"https://evil.example"}, "rally.test", nil, false},
		{"host as suffix", []string{"https://evilrally.test"}, "rally.test", nil, false},
		{"null origin of a sandboxed page", []string{"null"}, "rally.test", nil, false},
		{"not a URL", []string{"rally.test"}, "rally.test", nil, false},
		{"two Origin lines", []string{"https://rally.test", "https://rally.test"}, "rally.test", nil, false},
		{"wildcard subdomain", []string{"https://app.example.com"}, "rally.test", []string{"*.example.com"}, true},
		{"wildcard subdomain, pattern in other case", []string{"https://app.example.com"}, "rally.test", []string{"*.EXAMPLE.com"}, true},
		{"wildcard does not match the bare domain", []string{"https://example.com"}, "rally.test", []string{"*.example.com"}, false},
		{"pattern without port allows any port", []string{"http://localhost:3000"}, "rally.test", []string{"localhost"}, true},
		{"pattern with port allows that port", []string{"http://localhost:3000"}, "rally.test", []string{"localhost:3000"}, true},
		{"pattern with port refuses another", []string{"http://localhost:3001"}, "rally.test", []string{"localhost:3000"}, false},
		{"pattern with any port needs a port", []string{"http://localhost"}, "rally.test", []string{"localhost:*"}, false},
		{"pattern with any port", []string{"http://localhost:5173"}, "rally.test", []string{"localhost:*"}, true},
		{"pattern with scheme", []string{"https://app.example.com"}, "rally.test", []string{"https://*.example.com"}, true},
		{"pattern with scheme refuses other scheme", []string{"http://app.example.com"}, "rally.test", []string{"https://*.example.com"}, false},
		{"IPv6 literal, escaped", []string{"http://[::1]:8080"}, "rally.test", []string{`\[::1\]`}, true},
		{"second pattern matches", []string{"https://b.test"}, "rally.test", []string{"a.test", "b.test"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := originAllowed(tc.origins, tc.host, tc.patterns)
			if err != nil || got != tc.want {
				t.Fatalf("originAllowed(%q, %q, %q) = %v, %v, want %v", tc.origins, tc.host, tc.patterns, got, err, tc.want)
			}
		})
	}
}

func TestOriginPolicyReportsAMalformedPattern(t *testing.T) {
	_, err := originAllowed([]string{"https://a.test"}, "rally.test", []string{"[a-"})
	if err == nil || !strings.Contains(err.Error(), `"[a-"`) {
		t.Fatalf("originAllowed with pattern [a-: err = %v, want it to name the pattern", err)
	}
}

func TestRedactURLHidesUserPasswordAndQueryCredentials(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"ws://rally.test/chat", "ws://rally.test/chat"},
		{"ws://alice:s3cret@rally.test/chat", "ws://xxxxx@rally.test/chat"},
		{"ws://tokenonly@rally.test/", "ws://xxxxx@rally.test/"},
		{"wss://rally.test/?room=1&token=abc&x=2", "wss://rally.test/?room=1&token=xxxxx&x=2"},
		{"wss://rally.test/?Access_Token=abc&api_key=def&key=ghi&password=jkl", "wss://rally.test/?Access_Token=xxxxx&api_key=xxxxx&key=xxxxx&password=xxxxx"},
		{"wss://rally.test/?to%6Ben=abc", "wss://rally.test/?to%6Ben=xxxxx"},
		{"wss://rally.test/?token", "wss://rally.test/?token"},
		{"wss://rally.test/?monkey=banana", "wss://rally.test/?monkey=banana"},
		{"wss://rally.test/#access_token=abc", "wss://rally.test/#xxxxx"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := redactURL(u); got != tc.want {
			t.Errorf("redactURL(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func FuzzRedactURLDoesNotDependOnCredentials(f *testing.F) {
	f.Add("alice", "s3cret-password", "rally.test", "token=tok-value-123", "other")
	f.Add("bob", "p@ss/word:x", "[::1]:8080", "a=1&key=zz-value-zz&TOKEN=x", "")
	f.Fuzz(func(t *testing.T, user, password, host, query, other string) {
		with := func(ui *url.Userinfo, q string) string {
			return redactURL(&url.URL{Scheme: "ws", User: ui, Host: host, Path: "/", RawQuery: q})
		}
		got := with(url.UserPassword(user, password), query)
		if other := with(url.User(other), query); got != other {
			t.Fatalf("redactURL depends on the userinfo: %s and %s", got, other)
		}
		// Replace every credential's value in the query: the text must not
		// change.
		parts := strings.Split(query, "&")
		for i, part := range parts {
			name, _, ok := strings.Cut(part, "=")
			if plain, err := url.QueryUnescape(name); err == nil && ok && slices.Contains(secretQueryKeys, strings.ToLower(plain)) {
				parts[i] = name + "=" + url.QueryEscape(other)
			}
		}
		if other := with(url.UserPassword(user, password), strings.Join(parts, "&")); got != other {
			t.Fatalf("redactURL depends on a query credential: %s and %s", got, other)
		}
	})
}

func TestUpgradeRequestCheckAppliesRulesInOrder(t *testing.T) {
	good := upgradeRequest{
		method:     "GET",
		host:       "rally.test",
		upgrade:    []string{"websocket"},
		connection: []string{"Upgrade"},
		key:        []string{rfcKey},
		version:    []string{"13"},
	}
	for _, tc := range []struct {
		name   string
		change func(q *upgradeRequest)
		status int
	}{
		{"good", func(q *upgradeRequest) {}, 0},
		{"POST with everything else wrong", func(q *upgradeRequest) {
			*q = upgradeRequest{method: "POST", origin: []string{"https://evil.example"}, hasBody: true}
		}, 405},
		{"HTTP/1.0 POST", func(q *upgradeRequest) { q.method, q.oldHTTP = "POST", true }, 405},
		{"HTTP/1.0 without Upgrade", func(q *upgradeRequest) { q.oldHTTP, q.upgrade = true, nil }, 400},
		{"no Upgrade, no key, version 8", func(q *upgradeRequest) { q.upgrade, q.key, q.version = nil, nil, []string{"8"} }, 400},
		{"no Connection, version 8", func(q *upgradeRequest) { q.connection, q.version = nil, []string{"8"} }, 400},
		{"short key, other origin", func(q *upgradeRequest) { q.key, q.origin = []string{"AAAA"}, []string{"https://evil.example"} }, 400},
		{"version 8, other origin", func(q *upgradeRequest) { q.version, q.origin = []string{"8"}, []string{"https://evil.example"} }, 426},
		{"no version, body", func(q *upgradeRequest) { q.version, q.hasBody = nil, true }, 426},
		{"version 13 twice", func(q *upgradeRequest) { q.version = []string{"13", "13"} }, 426},
		{"version 13, 8 as a list", func(q *upgradeRequest) { q.version = []string{"13, 8"} }, 426},
		{"other origin, body", func(q *upgradeRequest) { q.origin, q.hasBody = []string{"https://evil.example"}, true }, 403},
		{"body", func(q *upgradeRequest) { q.hasBody = true }, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := good
			q.upgrade, q.connection, q.key, q.version = slices.Clone(good.upgrade), slices.Clone(good.connection), slices.Clone(good.key), slices.Clone(good.version)
			tc.change(&q)
			key, rf := q.check(&AcceptOptions{})
			status := 0
			if rf != nil {
				status = rf.status
			}
			if status != tc.status {
				t.Fatalf("check = %+v, want status %d", rf, tc.status)
			}
			if status == 0 && key != rfcKey {
				t.Fatalf("check returned key %q, want %q", key, rfcKey)
			}
		})
	}
}

func TestSwitchingProtocolsResponseIsExactlyTheRFCAnswer(t *testing.T) {
	got := string(appendSwitchingProtocols(nil, rfcKey, "chat", "", nil))
	want := "HTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + rfcAccept + "\r\n" +
		"Sec-WebSocket-Protocol: chat\r\n" +
		"\r\n"
	if got != want {
		t.Fatalf("101 response:\n%q\nwant\n%q", got, want)
	}
}

func TestSwitchingProtocolsResponseCarriesHandlerHeadersButNotTheHandshakesOwn(t *testing.T) {
	extra := http.Header{
		"Set-Cookie":           {"a=1", "b=2"},
		"Upgrade":              {"h2c"},
		"Sec-Websocket-Accept": {"forged"},
		"X-Split":              {"one\r\nX-Injected: yes"},
		"Bad Name":             {"x"},
	}
	got := string(appendSwitchingProtocols(nil, rfcKey, "", "", extra))
	want := "HTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + rfcAccept + "\r\n" +
		"Set-Cookie: a=1\r\n" +
		"Set-Cookie: b=2\r\n" +
		"X-Split: one  X-Injected: yes\r\n" +
		"\r\n"
	if got != want {
		t.Fatalf("101 response:\n%q\nwant\n%q", got, want)
	}
}

func FuzzUpgradeRequestCheck(f *testing.F) {
	f.Add("GET", "websocket", "Upgrade", rfcKey, "13", "https://rally.test", "chat, mqtt")
	f.Add("GET", "WebSocket, h2c", "keep-alive,upgrade", " "+rfcKey, "8", "null", ",,")
	f.Add("POST", "", "", "AAAA", "", "", "")
	f.Fuzz(func(t *testing.T, method, upgrade, connection, key, version, origin, protocol string) {
		q := upgradeRequest{
			method:     method,
			host:       "rally.test",
			upgrade:    []string{upgrade},
			connection: []string{connection},
			key:        []string{key},
			version:    []string{version},
			origin:     []string{origin},
			protocol:   []string{protocol},
		}
		k, rf := q.check(&AcceptOptions{})
		if rf != nil {
			switch rf.status {
			case 400, 403, 405, 426:
			default:
				t.Fatalf("status %d for %+v", rf.status, q)
			}
			if rf.reason == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		if method != "GET" || !validKey(k) || !hasToken(q.upgrade, "websocket") || !hasToken(q.connection, "upgrade") {
			t.Fatalf("accepted %+v (key %q)", q, k)
		}
		chosen := selectSubprotocol([]string{"chat", "mqtt"}, q.protocol)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(appendSwitchingProtocols(nil, k, chosen, "", nil))), nil)
		if err != nil || resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != rawpeer.AcceptKey(k) {
			t.Fatalf("101 for key %q: %v, %v", k, resp, err)
		}
		if chosen != "" && !slices.Contains(slices.Collect(listElements(q.protocol)), chosen) {
			t.Fatalf("chose %q, which %q does not offer", chosen, protocol)
		}
	})
}

func BenchmarkServerHandshakeRules(b *testing.B) {
	q := upgradeRequest{
		method:     "GET",
		host:       "rally.test",
		upgrade:    []string{"websocket"},
		connection: []string{"keep-alive, Upgrade"},
		key:        []string{rfcKey},
		version:    []string{"13"},
		origin:     []string{"https://rally.test"},
		protocol:   []string{"chat, mqtt"},
	}
	opts := &AcceptOptions{Subprotocols: []string{"mqtt"}}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		key, rf := q.check(opts)
		if rf != nil {
			b.Fatal(rf.reason)
		}
		buf = appendSwitchingProtocols(buf[:0], key, selectSubprotocol(opts.Subprotocols, q.protocol), "", nil)
	}
}
