package rally

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The resumable HTTP/1.1 request-head parser of the raw handshakes: Upgrade
// drives it from a goroutine, the event loops (loop_accept_linux.go) from
// the bytes each read brings.

// refusalError carries the refusal of a malformed head out of the parser.
type refusalError struct{ rf *refusal }

func (e *refusalError) Error() string { return e.rf.reason }

// malformed is the parser's error for a head that is not HTTP/1.x.
func malformed(status int, reason string) error {
	return &refusalError{&refusal{status: status, reason: reason}}
}

// requestParser reads an HTTP/1.x request head (RFC 9112 sections 2 to 5)
// fed to it in pieces, as they arrive: feed says whether it needs more,
// or where the head ended, or what was wrong. It never blocks and does no
// I/O: Upgrade's goroutine drives it, and so do the event loops, which
// feed it what each read of many connections brings. It keeps the bytes
// of a line cut by the end of a piece; the pieces themselves are the
// caller's again when feed returns.
//
// It is strict where leniency would let two parsers disagree on what a
// request says (RFC 9112 11.2, request smuggling): no space before a
// header's colon, no obsolete line folding, no control characters in
// values, exactly one Host, Content-Length as digits only and never
// together with Transfer-Encoding. It accepts a bare LF as a line end and
// skips empty lines before the request line (RFC 9112 2.2).
type requestParser struct {
	max  int    // the head may take at most this many bytes
	used int    // bytes of the head consumed so far
	line []byte // the start of a line cut by the end of a piece

	method, target, proto string
	major, minor          int
	header                http.Header
	values                []string // backing array of the headers' first values
	started               bool     // the request line has been read
	done                  bool
	err                   error
}

// feed consumes the bytes of b that belong to the request head. It returns
// how many it used, and whether the head is complete: then b[n:] is what
// followed the head (the start of the WebSocket stream). Otherwise n is
// len(b) and the parser wants more. An error is a head that breaks HTTP's
// rules (n then counts the line that broke them) or exceeds the size bound
// (n then brings the head to exactly the bound), with the status to answer
// it with; the parser keeps returning it. A complete parser takes nothing
// more.
func (p *requestParser) feed(b []byte) (n int, done bool, err error) {
	if p.err != nil {
		return 0, false, p.err
	}
	if p.done {
		return 0, true, nil
	}
	for n < len(b) {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			if fit, err := p.take(len(b) - n); err != nil {
				return n + fit, false, err
			}
			p.line = append(p.line, b[n:]...)
			return len(b), false, nil
		}
		seg := b[n : n+i+1]
		if fit, err := p.take(len(seg)); err != nil {
			return n + fit, false, err
		}
		n += len(seg)
		line := seg
		if len(p.line) > 0 {
			p.line = append(p.line, seg...)
			line = p.line
		}
		line = line[:len(line)-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		err := p.parseLine(line)
		p.line = p.line[:0]
		if err != nil {
			p.err = err
			return n, false, err
		}
		if p.done {
			p.line = nil
			return n, true, nil
		}
	}
	return n, false, nil
}

// take counts k more bytes of the head against the bound. Past it, it
// says how many of the k still fitted: those are taken, the rest are not.
func (p *requestParser) take(k int) (fit int, err error) {
	if p.used+k > p.max {
		fit = p.max - p.used
		p.used = p.max
		p.err = malformed(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request head is longer than %d bytes", p.max))
		return fit, p.err
	}
	p.used += k
	return k, nil
}

// parseLine handles one line of the head, without its line end.
func (p *requestParser) parseLine(line []byte) error {
	if !p.started {
		if len(line) == 0 {
			return nil
		}
		p.started = true
		return p.parseRequestLine(line)
	}
	if len(line) == 0 {
		p.done = true
		return nil
	}
	if line[0] == ' ' || line[0] == '\t' {
		// RFC 9112 5.2: a server may reject obsolete line folding.
		return malformed(http.StatusBadRequest, "obsolete line folding in the request head")
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return malformed(http.StatusBadRequest, "a header line has no colon")
	}
	if !isToken(string(name)) {
		// RFC 9112 5.1: no whitespace between the name and the colon.
		return malformed(http.StatusBadRequest, "a header name is not a token")
	}
	v := string(bytes.Trim(value, " \t"))
	if !validHeaderValue(v) {
		return malformed(http.StatusBadRequest, "a header value holds a control character")
	}
	if p.header == nil {
		p.header = make(http.Header, 16)
		p.values = make([]string, 0, 16)
	}
	key, ok := commonHeaders[string(name)] // no allocation for the lookup
	if !ok {
		key = http.CanonicalHeaderKey(string(name))
	}
	if prev := p.header[key]; len(prev) > 0 {
		p.header[key] = append(prev, v)
		return nil
	}
	// First values share one backing array, as net/http's reader does.
	p.values = append(p.values, v)
	n := len(p.values)
	p.header[key] = p.values[n-1 : n : n]
	return nil
}

// commonHeaders maps the spellings of a handshake's usual headers, as
// browsers and HTTP/2-minded clients write them, to their canonical keys,
// so that parsing them allocates no name.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{
		"Host", "Upgrade", "Connection", "Origin", "User-Agent", "Pragma",
		"Cache-Control", "Accept-Encoding", "Accept-Language", "Cookie",
		"Authorization", "Content-Length", "Transfer-Encoding",
		"Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol",
		"Sec-WebSocket-Extensions", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-IP",
	} {
		canonical := http.CanonicalHeaderKey(name)
		m[name] = canonical
		m[strings.ToLower(name)] = canonical
		m[canonical] = canonical
	}
	return m
}()

// parseRequestLine reads "method SP request-target SP HTTP-version"
// (RFC 9112 3).
func (p *requestParser) parseRequestLine(line []byte) error {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !isToken(string(method)) || len(target) == 0 {
		return malformed(http.StatusBadRequest, "malformed request line")
	}
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return malformed(http.StatusBadRequest, "malformed request line")
		}
	}
	major, minor, ok := http.ParseHTTPVersion(string(proto))
	if !ok {
		return malformed(http.StatusBadRequest, "malformed request line")
	}
	if major != 1 {
		return malformed(http.StatusHTTPVersionNotSupported, "HTTP version must be 1.x")
	}
	p.method, p.target, p.proto = string(method), string(target), string(proto)
	p.major, p.minor = major, minor
	return nil
}

// request builds the *http.Request of a complete head read from nc, or
// the refusal of a head whose framing is wrong: no or several Host
// headers, a malformed Content-Length, or both Content-Length and
// Transfer-Encoding (RFC 9112 3.2 and 6).
func (p *requestParser) request(nc net.Conn) (*http.Request, *refusal) {
	h := p.header
	if h == nil {
		h = http.Header{}
	}
	// RFC 9112 3.2: a GET's target is in origin-form (a path) or in
	// absolute-form (a URL).
	u, err := url.ParseRequestURI(p.target)
	if err != nil || !strings.HasPrefix(p.target, "/") && (u.Scheme == "" || u.Host == "") {
		return nil, &refusal{status: http.StatusBadRequest, reason: "the request target is not a valid URI"}
	}
	r := &http.Request{
		Method:     p.method,
		URL:        u,
		Proto:      p.proto,
		ProtoMajor: p.major,
		ProtoMinor: p.minor,
		Header:     h,
		Body:       http.NoBody,
		RequestURI: p.target,
		RemoteAddr: nc.RemoteAddr().String(),
	}
	switch hosts := h["Host"]; {
	case len(hosts) > 1:
		return nil, &refusal{status: http.StatusBadRequest, reason: "Host appears more than once"}
	case u.Host != "":
		// RFC 9112 3.2.2: an absolute-form target's authority is the host.
		r.Host = u.Host
	case len(hosts) == 1:
		if !validHost(hosts[0]) {
			return nil, &refusal{status: http.StatusBadRequest, reason: "Host is not a valid host"}
		}
		r.Host = hosts[0]
	case p.major == 1 && p.minor >= 1:
		return nil, &refusal{status: http.StatusBadRequest, reason: "Host is missing"}
	}
	if te := h["Transfer-Encoding"]; len(te) > 0 {
		if len(h["Content-Length"]) > 0 {
			return nil, &refusal{status: http.StatusBadRequest, reason: "both Content-Length and Transfer-Encoding are present"}
		}
		r.TransferEncoding = te
		r.ContentLength = -1
		delete(h, "Transfer-Encoding")
	}
	if cl := h["Content-Length"]; len(cl) > 0 {
		n, err := contentLength(cl)
		if err != nil {
			return nil, &refusal{status: http.StatusBadRequest, reason: err.Error()}
		}
		r.ContentLength = n
	}
	if tc, ok := nc.(*tls.Conn); ok {
		state := tc.ConnectionState()
		r.TLS = &state
	}
	return r, nil
}

// validHost reports whether h may be a Host header: the characters of an
// RFC 3986 authority (host and port, an IP literal in brackets), no user.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~%!$&'()*+,;=:[]", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// contentLength reads Content-Length lines: digits only, and the same
// value on every line (RFC 9110 8.6).
func contentLength(values []string) (int64, error) {
	var n int64 = -1
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			e = strings.Trim(e, " \t")
			k, err := strconv.ParseInt(e, 10, 64)
			if err != nil || k < 0 || e == "" || e[0] == '+' {
				return 0, errors.New("Content-Length is not a number")
			}
			if n >= 0 && k != n {
				return 0, errors.New("Content-Length has differing values")
			}
			n = k
		}
	}
	return n, nil
}
