package rally

// The rules of the opening handshake (RFC 6455 section 4) that the server
// side (Accept) and the client side (Dial) share. Each rule is a function
// over raw header values, not over *http.Request, so that an upgrade parsed
// straight from a net.Conn can use the same rules.

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync/atomic"
)

// RFC 6455 1.3: the GUID appended to Sec-WebSocket-Key before hashing.
const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// ErrBadHandshake is the error behind every refused or failed opening
// handshake: errors.Is(err, ErrBadHandshake) holds for every
// *HandshakeError.
var ErrBadHandshake = errors.New("rally: bad opening handshake")

// HandshakeError is an opening handshake that broke a rule of RFC 6455
// section 4 (or of rally's policy, such as the origin check).
//
// Accept and Upgrade return one for each request they refuse, after they
// have answered the client with Status and a short plain-text body saying
// what was wrong. Dial returns one when the server answered but not with a
// valid 101, or when the proxy refused the tunnel (Reason then names the
// proxy); the same *http.Response is also Dial's second result.
//
// Its text never contains a URL's user name or password, a credential in
// the URL's query, or a header value.
type HandshakeError struct {
	// Status is the HTTP status of the answer: the one Accept sent, or the
	// one the server sent to Dial (101 when the 101 itself was wrong, 0
	// when the answer was no HTTP response at all).
	Status int

	// Reason says which rule was broken, e.g. "Sec-WebSocket-Key is
	// missing" or "server answered 401 Unauthorized".
	Reason string

	// URL is the URL Dial connected to (after redirects, the last one),
	// with user, password and query credentials replaced by "xxxxx". It is
	// empty for Accept and Upgrade.
	URL string

	// Response is the server's (or the proxy's) answer to Dial: status,
	// headers, and a Body holding at most the first 1 KiB of the response
	// body (already read; the connection is closed). It is nil for Accept
	// and Upgrade, and when Status is 0.
	Response *http.Response

	byProxy bool // the proxy answered, not the server
}

// Error names the side, the URL (Dial) or the status sent (Accept), and
// the reason.
func (e *HandshakeError) Error() string {
	if e.URL != "" {
		return "rally: dial " + e.URL + ": " + e.Reason
	}
	return fmt.Sprintf("rally: accept: refused with %d %s: %s", e.Status, http.StatusText(e.Status), e.Reason)
}

// Unwrap returns ErrBadHandshake.
func (e *HandshakeError) Unwrap() error { return ErrBadHandshake }

// appendAcceptKey appends the Sec-WebSocket-Accept value for key: base64 of
// the SHA-1 of the key followed by the GUID (RFC 6455 4.2.2, item 5.4).
func appendAcceptKey(dst []byte, key string) []byte {
	var buf [24 + len(websocketGUID)]byte
	sum := sha1.Sum(append(append(buf[:0], key...), websocketGUID...))
	return base64.StdEncoding.AppendEncode(dst, sum[:])
}

// validKey reports whether key is a valid Sec-WebSocket-Key: the base64 of
// exactly 16 bytes (RFC 6455 4.1, item 7), which is 24 characters.
func validKey(key string) bool {
	if len(key) != 24 {
		return false
	}
	var b [18]byte
	n, err := base64.StdEncoding.Decode(b[:], []byte(key))
	return err == nil && n == 16
}

// listElements yields the elements of a comma-separated header (RFC 9110
// 5.6.1) given as all its lines, trimmed of spaces and tabs; empty elements
// are skipped.
func listElements(values []string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range values {
			for e := range strings.SplitSeq(v, ",") {
				e = strings.Trim(e, " \t")
				if e != "" && !yield(e) {
					return
				}
			}
		}
	}
}

// hasToken reports whether the comma-separated header values contain token,
// compared without regard to case (RFC 9110 5.6.2: tokens are
// case-insensitive in Upgrade and Connection).
func hasToken(values []string, token string) bool {
	for e := range listElements(values) {
		if strings.EqualFold(e, token) {
			return true
		}
	}
	return false
}

// isToken reports whether s is a non-empty RFC 9110 token: the syntax of a
// header name and of a subprotocol (RFC 6455 4.1, item 10).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v can be sent as a header value: no
// control characters but tab (RFC 9110 5.5), so no CR or LF that would end
// the line and let the value inject a header of its own.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// upgradeRequest holds what the server's rules look at in an opening
// handshake request. Header fields hold every line of that header, in
// order, as received.
type upgradeRequest struct {
	method     string
	oldHTTP    bool   // the request's HTTP version is below 1.1
	host       string // the Host header
	upgrade    []string
	connection []string
	key        []string // Sec-WebSocket-Key
	version    []string // Sec-WebSocket-Version
	origin     []string
	protocol   []string // Sec-WebSocket-Protocol: the client's offers
	hasBody    bool     // Content-Length > 0 or any Transfer-Encoding
	h2protocol []string // HTTP/2's :protocol pseudo-header (RFC 8441)
}

// upgradeRequestOf gathers what the server's rules look at in r, a request
// read by net/http (Accept) or by requestParser (Upgrade); both key headers
// in canonical form ("Sec-Websocket-Key") and move Transfer-Encoding out of
// the header.
func upgradeRequestOf(r *http.Request) upgradeRequest {
	return upgradeRequest{
		method:     r.Method,
		oldHTTP:    !r.ProtoAtLeast(1, 1),
		host:       r.Host,
		upgrade:    r.Header["Upgrade"],
		connection: r.Header["Connection"],
		key:        r.Header["Sec-Websocket-Key"],
		version:    r.Header["Sec-Websocket-Version"],
		origin:     r.Header["Origin"],
		protocol:   r.Header["Sec-Websocket-Protocol"],
		// A chunked body has ContentLength -1.
		hasBody:    r.ContentLength != 0 || len(r.TransferEncoding) > 0,
		h2protocol: r.Header[":protocol"],
	}
}

// refusal is the answer to a request the server declines: a status, a
// short text for the error (and for the body, unless body is set), and
// header lines (name, value pairs) the status calls for. A refusal an
// Authorize hook chose carries the hook's header and body as well.
type refusal struct {
	status  int
	reason  string
	headers []string
	header  http.Header // the hook's headers, sent but for refusalManaged
	body    *string     // the hook's body; nil means reason and a newline
	byHook  bool        // the application decided, so it is not told again
}

// text returns the body of the refusal.
func (rf *refusal) text() string {
	if rf.body != nil {
		return *rf.body
	}
	return rf.reason + "\n"
}

// refusalManaged are the headers of a refusal that rally sets itself,
// whatever a hook's Rejection.Header says.
var refusalManaged = map[string]bool{
	"Connection":        true,
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Upgrade":           true,
}

var (
	// RFC 9110 15.5.6: a 405 lists the allowed methods.
	allowGET = []string{"Allow", "GET"}
	// RFC 6455 4.4: tell the client which version the server speaks.
	// RFC 9110 15.5.22: a 426 names the protocol to upgrade to.
	version13 = []string{"Sec-WebSocket-Version", "13", "Upgrade", "websocket"}
)

// check applies the server's rules to q in this order, and returns the
// client's key, or the first rule broken:
//
//	405 the method is not GET (RFC 6455 4.2.1, item 1)
//	400 the HTTP version is below 1.1 (item 1)
//	400 Upgrade lacks websocket, Connection lacks upgrade, or the key is
//	    missing, repeated or not 16 bytes in base64 (items 3, 4, 5)
//	426 Sec-WebSocket-Version is missing or not 13 (item 6)
//	403 the origin policy refuses the Origin (see originAllowed)
//	500 an origin pattern is malformed (a server bug, not the client's)
//	400 the request carries a body: its bytes must never be read as frames
func (q *upgradeRequest) check(o *AcceptOptions) (key string, r *refusal) {
	if q.method != http.MethodGet {
		return "", &refusal{status: http.StatusMethodNotAllowed, reason: fmt.Sprintf("method %q is not GET", q.method), headers: allowGET}
	}
	if q.oldHTTP {
		return "", &refusal{status: http.StatusBadRequest, reason: "HTTP version must be at least 1.1"}
	}
	if !hasToken(q.upgrade, "websocket") {
		return "", &refusal{status: http.StatusBadRequest, reason: "Upgrade header does not contain websocket"}
	}
	if !hasToken(q.connection, "upgrade") {
		return "", &refusal{status: http.StatusBadRequest, reason: "Connection header does not contain upgrade"}
	}
	switch {
	case len(q.key) == 0:
		return "", &refusal{status: http.StatusBadRequest, reason: "Sec-WebSocket-Key is missing"}
	case len(q.key) > 1:
		return "", &refusal{status: http.StatusBadRequest, reason: "Sec-WebSocket-Key appears more than once"}
	}
	key = strings.Trim(q.key[0], " \t")
	if !validKey(key) {
		return "", &refusal{status: http.StatusBadRequest, reason: "Sec-WebSocket-Key is not 16 bytes in base64"}
	}
	if rf := q.checkVersionAndOrigin(o); rf != nil {
		return "", rf
	}
	if q.hasBody {
		return "", &refusal{status: http.StatusBadRequest, reason: "an upgrade request must not carry a body"}
	}
	return key, nil
}

// checkVersionAndOrigin applies the rules HTTP/1.1 and HTTP/2 (RFC 8441
// section 5) share: 426 for a Sec-WebSocket-Version that is missing or not
// 13, 403 for an Origin the policy refuses, 500 for a malformed origin
// pattern.
func (q *upgradeRequest) checkVersionAndOrigin(o *AcceptOptions) *refusal {
	if len(q.version) != 1 || strings.Trim(q.version[0], " \t") != "13" {
		return &refusal{status: http.StatusUpgradeRequired, reason: "Sec-WebSocket-Version must be 13", headers: version13}
	}
	if !o.InsecureSkipOriginCheck {
		ok, err := originAllowed(q.origin, q.host, o.OriginPatterns)
		if err != nil {
			return &refusal{status: http.StatusInternalServerError, reason: err.Error()}
		}
		if !ok {
			return &refusal{status: http.StatusForbidden, reason: "Origin is not allowed"}
		}
	}
	return nil
}

// originAllowed applies the origin policy to the Origin header lines of a
// request sent to host (the Host header). A request without Origin comes
// from a non-browser client and is allowed: the check protects users'
// browsers from pages of other sites (cross-site WebSocket hijacking), and
// only browsers send Origin. Otherwise the Origin must be exactly one
// absolute URL whose host[:port] equals host without regard to case, or
// match one of patterns.
//
// Each pattern is a path.Match pattern matched without regard to case. A
// pattern without "://" is matched against the Origin's host twice, with
// its port as written in the Origin and without any port: "example.com"
// and "*.example.com" allow every port, "localhost:8080" only that one,
// "localhost:*" any explicit port. A pattern with "://" is matched the same
// way against scheme://host, to pin the scheme: "https://*.example.com".
// (coder/websocket matches only host:port as written, so its "example.com"
// allows no explicit port.) An IPv6 literal keeps its brackets, which
// path.Match reads as a class: write them escaped, `\[::1\]`.
//
// The error reports a malformed pattern.
func originAllowed(origins []string, host string, patterns []string) (bool, error) {
	if len(origins) == 0 {
		return true, nil
	}
	if len(origins) > 1 {
		return false, nil
	}
	u, err := url.Parse(origins[0])
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false, nil // "null" (a sandboxed page) and other opaque origins
	}
	if strings.EqualFold(u.Host, host) {
		return true, nil
	}
	withPort := strings.ToLower(u.Host)
	withoutPort := withPort
	if p := u.Port(); p != "" {
		withoutPort = withPort[:len(withPort)-len(p)-1]
	}
	scheme := strings.ToLower(u.Scheme) + "://"
	for _, p := range patterns {
		p = strings.ToLower(p)
		prefix := ""
		if strings.Contains(p, "://") {
			prefix = scheme
		}
		for _, target := range [2]string{withPort, withoutPort} {
			ok, err := path.Match(p, prefix+target)
			if err != nil {
				return false, fmt.Errorf("origin pattern %q is malformed: %w", p, err)
			}
			if ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// selectSubprotocol returns the first of the server's subprotocols, in its
// order of preference, that the client offered in its
// Sec-WebSocket-Protocol lines, or "" if there is none. Subprotocols are
// compared exactly (RFC 6455 11.3.4 registers them case-sensitively).
func selectSubprotocol(server, offered []string) string {
	for _, s := range server {
		for o := range listElements(offered) {
			if o == s {
				return s
			}
		}
	}
	return ""
}

// checkSubprotocols reports whether protocols can be offered: each a token
// (RFC 6455 4.1, item 10), none twice.
func checkSubprotocols(protocols []string) error {
	for i, p := range protocols {
		if !isToken(p) {
			return fmt.Errorf("subprotocol %q is not a token", p)
		}
		if slices.Contains(protocols[:i], p) {
			return fmt.Errorf("subprotocol %q is offered twice", p)
		}
	}
	return nil
}

// chosenSubprotocol checks the server's Sec-WebSocket-Protocol lines
// against what the client offered and returns the chosen subprotocol. None
// is fine (RFC 6455 4.1 lets the server choose none, and browsers accept
// that); more than one, or one that was not offered, is an error (RFC 6455
// 4.1, client step 6).
func chosenSubprotocol(values, offered []string) (string, error) {
	if len(values) == 0 {
		return "", nil
	}
	if len(values) > 1 || strings.Contains(values[0], ",") {
		return "", errors.New("server chose more than one subprotocol")
	}
	p := strings.Trim(values[0], " \t")
	if !slices.Contains(offered, p) {
		return "", fmt.Errorf("server chose subprotocol %q, which was not offered", p)
	}
	return p, nil
}

// responseManaged are the headers the 101 response sets itself; a
// handler's own values for them are not sent.
var responseManaged = map[string]bool{
	"Upgrade":                  true,
	"Connection":               true,
	"Sec-Websocket-Accept":     true,
	"Sec-Websocket-Protocol":   true,
	"Sec-Websocket-Extensions": true,
	"Content-Length":           true,
	"Transfer-Encoding":        true,
}

// appendSwitchingProtocols appends the whole 101 response that accepts a
// request with key: the status line, Upgrade, Connection,
// Sec-WebSocket-Accept, Sec-WebSocket-Protocol when a subprotocol was
// chosen, then extra's lines (a handler's Set-Cookie, ...) in sorted order,
// but not those responseManaged lists or that are not valid header lines.
// CR and LF in extra's values become spaces, as net/http does.
func appendSwitchingProtocols(b []byte, key, subprotocol, extensions string, extra http.Header) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = appendAcceptKey(b, key)
	b = append(b, "\r\n"...)
	if subprotocol != "" {
		b = append(b, "Sec-WebSocket-Protocol: "...)
		b = append(b, subprotocol...)
		b = append(b, "\r\n"...)
	}
	if extensions != "" {
		b = append(b, "Sec-WebSocket-Extensions: "...)
		b = append(b, extensions...)
		b = append(b, "\r\n"...)
	}
	b = appendHeaderLines(b, extra, responseManaged)
	return append(b, "\r\n"...)
}

// appendHeaderLines appends h's lines in sorted order, but not those whose
// canonical name skip lists or whose name is not a token. CR and LF in
// values become spaces, as net/http does, so that no value can end its line
// and inject a header of its own.
func appendHeaderLines(b []byte, h http.Header, skip map[string]bool) []byte {
	if len(h) == 0 {
		return b
	}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if skip[http.CanonicalHeaderKey(name)] || !isToken(name) {
			continue
		}
		for _, v := range h[name] {
			b = append(b, name...)
			b = append(b, ": "...)
			for i := 0; i < len(v); i++ {
				c := v[i]
				if c == '\r' || c == '\n' {
					c = ' '
				}
				b = append(b, c)
			}
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// setHeader puts the headers of the answer to rf into h, which may hold
// headers a handler set already: the hook's headers (but those rally
// manages), the lines the status calls for, a plain-text Content-Type
// unless the hook chose one, and Connection: close, because the client
// meant to leave HTTP and what it sends next is no request.
func (rf *refusal) setHeader(h http.Header) {
	for name, values := range rf.header {
		canonical := http.CanonicalHeaderKey(name)
		if refusalManaged[canonical] || !isToken(name) {
			continue
		}
		h[canonical] = slices.Clone(values)
	}
	for i := 0; i+1 < len(rf.headers); i += 2 {
		h.Set(rf.headers[i], rf.headers[i+1])
	}
	if rf.body == nil || h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	h.Set("Connection", "close")
}

// appendRefusal appends the whole answer to rf, head and body, for a
// connection rally answers itself (Upgrade).
func appendRefusal(b []byte, rf *refusal) []byte {
	h := http.Header{}
	rf.setHeader(h)
	body := rf.text()
	b = fmt.Appendf(b, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n", rf.status, http.StatusText(rf.status), len(body))
	b = appendHeaderLines(b, h, nil)
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// secretQueryKeys are query parameters whose values redactURL hides,
// compared without regard to case.
var secretQueryKeys = []string{
	"token", "access_token", "refresh_token", "id_token", "api_key", "apikey",
	"key", "password", "secret", "client_secret", "auth", "jwt", "sig", "signature",
}

// redacted replaces a secret in a URL.
const redacted = "xxxxx"

// redactURL returns u as text for an error message: the user and password
// become "xxxxx" (url.URL.Redacted keeps the user, which may be a token
// itself), so do the values of query parameters named in secretQueryKeys,
// and so does a fragment.
func redactURL(u *url.URL) string {
	r := *u
	if r.User != nil {
		r.User = url.User(redacted)
	}
	if r.RawQuery != "" {
		r.RawQuery = redactQuery(r.RawQuery)
	}
	if r.Fragment != "" || r.RawFragment != "" {
		r.Fragment, r.RawFragment = redacted, ""
	}
	return r.String()
}

// redactQuery hides the values of secret parameters in a raw query and
// keeps everything else, including the order, as it was.
func redactQuery(q string) string {
	var b strings.Builder
	for i, part := range strings.Split(q, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasValue := strings.Cut(part, "=")
		if plain, err := url.QueryUnescape(name); err == nil {
			name = plain
		}
		if hasValue && slices.ContainsFunc(secretQueryKeys, func(k string) bool { return strings.EqualFold(k, name) }) {
			b.WriteString(part[:strings.IndexByte(part, '=')+1])
			b.WriteString(redacted)
			continue
		}
		b.WriteString(part)
	}
	return b.String()
}

// testHookNewConn, when a test sets it, sees each connection a handshake
// opened and the bytes read past the handshake, just as newConn gets them.
// It is atomic because a server of one test may still be finishing a
// handshake when the next test sets the hook.
var testHookNewConn atomic.Pointer[func(nc net.Conn, buffered []byte, server bool)]

// startConn hands a connection whose handshake succeeded to newConn.
func startConn(nc net.Conn, buffered []byte, server bool, subprotocol string, o *ConnOptions) *Conn {
	if hook := testHookNewConn.Load(); hook != nil {
		(*hook)(nc, buffered, server)
	}
	return newConn(nc, buffered, server, subprotocol, o)
}
