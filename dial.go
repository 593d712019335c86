package rally

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rallyws/rally/deflate"
)

// Dial opens a client connection to a ws:// or wss:// URL (http:// and
// https:// are taken as their aliases; ports default to 80 and 443) and
// performs the opening handshake. A nil opts is valid.
//
// The handshake, from the first connect through a proxy's tunnel, TLS and
// any redirects to the 101 response, is bounded by opts.HandshakeTimeout
// (DefaultHandshakeTimeout when 0) and by ctx; ctx ending later does not
// affect the open connection. On a timeout the error wraps
// context.DeadlineExceeded.
//
// The connection goes through the proxy (HTTP, HTTPS or SOCKS5)
// opts.Proxy chooses (by default the one the environment names, never for
// loopback addresses; see DialOptions.Proxy). Redirects are followed only
// when opts.FollowRedirects is set.
//
// The user and password of the URL, if any, are sent as Basic
// credentials unless opts.Header has an Authorization of its own.
//
// With opts.HTTP2 set, the WebSocket may be a stream of an HTTP/2
// connection (RFC 8441) that other Dials share; the response is then the
// server's 200 (see DialOptions.HTTP2 and HTTP2Mode).
//
// It returns the open connection and the server's 101 response (Body
// empty). When the server, or the proxy, answered but the handshake
// failed, it returns the response (status, headers and a Body holding at
// most its first 1 KiB) together with a *HandshakeError. Otherwise (bad
// URL or option, network or TLS failure, timeout) the response is nil.
// Every failure is one error, returned once; it names the URL with
// credentials hidden (see HandshakeError), and never shows a proxy's
// credentials either.
func Dial(ctx context.Context, rawURL string, opts *DialOptions) (*Conn, *http.Response, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	u, secure, err := parseDialURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	if err := opts.ConnOptions.validate(); err != nil {
		return nil, nil, fmt.Errorf("rally: dial %s: %w", redactURL(u), err)
	}
	if err := checkSubprotocols(opts.Subprotocols); err != nil {
		return nil, nil, fmt.Errorf("rally: dial %s: %w", redactURL(u), err)
	}

	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("opening handshake took longer than %v: %w", timeout, context.DeadlineExceeded))
	defer cancel()

	header := opts.Header
	for redirects := 0; ; redirects++ {
		c, resp, err := dialOnce(ctx, u, secure, header, opts)
		location := ""
		var he *HandshakeError
		if opts.FollowRedirects && errors.As(err, &he) && !he.byProxy && isRedirect(he.Status) {
			location = resp.Header.Get("Location")
		}
		if location == "" {
			return c, resp, err
		}
		where := redactURL(u)
		if redirects == maxRedirects {
			return nil, resp, &HandshakeError{
				Status:   resp.StatusCode,
				Reason:   fmt.Sprintf("stopped after %d redirects", maxRedirects),
				URL:      where,
				Response: resp,
			}
		}
		next, nextSecure, err := redirectTarget(u, location)
		if err != nil {
			return nil, resp, &HandshakeError{Status: resp.StatusCode, Reason: err.Error(), URL: where, Response: resp}
		}
		if sameOrigin(u, secure, next, nextSecure) {
			if next.User == nil {
				next.User = u.User
			}
		} else {
			header = withoutCredentials(header)
		}
		u, secure = next, nextSecure
	}
}

// dialOnce performs one opening handshake with u, through a proxy if one
// is chosen for it, sending header's lines, within ctx.
func dialOnce(ctx context.Context, u *url.URL, secure bool, header http.Header, opts *DialOptions) (*Conn, *http.Response, error) {
	where := redactURL(u)
	fail := func(err error) error { return fmt.Errorf("rally: dial %s: %w", where, err) }
	key := newKey()
	zopts := opts.Compression
	if zopts == nil {
		zopts = &CompressionOptions{}
	}
	var offer string
	if !zopts.Disabled {
		if err := zopts.validate(); err != nil {
			return nil, nil, fail(err)
		}
		offer = deflate.Offer(zopts.clientConfig())
	}
	request, err := appendRequest(make([]byte, 0, 512), u, key, header, opts.Subprotocols, offer)
	if err != nil {
		return nil, nil, fail(err)
	}
	proxy, err := proxyFor(opts, u, secure)
	if err != nil {
		return nil, nil, fail(err)
	}
	if opts.HTTP2 == HTTP2Require && proxy != nil {
		return nil, nil, fail(errors.New("WebSockets over HTTP/2 through a proxy are not supported"))
	}
	if opts.HTTP2 != HTTP2Never && proxy == nil {
		c, resp, err := dialH2(ctx, u, secure, header, offer, zopts, opts)
		if err != errFallback {
			return c, resp, err
		}
	}
	// ctxErr prefers the reason the context ended over the I/O error it
	// caused (a dial canceled, a read past a deadline).
	ctxErr := func(err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}

	dial := opts.NetDialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	addr := hostPortOf(u, secure)
	dialAddr := addr
	if proxy != nil {
		dialAddr = proxyAddr(proxy)
	}
	raw, err := dial(ctx, "tcp", dialAddr)
	if err == nil && raw == nil {
		err = errors.New("DialOptions.NetDialContext returned no connection and no error")
	}
	if err != nil {
		if proxy != nil {
			err = fmt.Errorf("connecting to proxy %s: %w", redactURL(proxy), err)
		}
		return nil, nil, fail(ctxErr(err))
	}
	// From here on, ctx ending interrupts whatever I/O is in progress.
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	abort := func() {
		stop()
		raw.Close()
	}

	nc := raw
	if proxy != nil {
		var resp *http.Response
		nc, resp, err = throughProxy(ctx, raw, proxy, addr, opts.TLSConfig)
		if err != nil {
			abort()
			if resp != nil {
				return nil, resp, &HandshakeError{Status: resp.StatusCode, Reason: err.Error(), URL: where, Response: resp, byProxy: true}
			}
			return nil, nil, fail(ctxErr(err))
		}
	}
	if secure {
		cfg := opts.TLSConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(newTLSSocket(nc), cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			abort()
			return nil, nil, fail(ctxErr(err))
		}
		nc = tc
	}

	if _, err := nc.Write(request); err != nil {
		abort()
		return nil, nil, fail(ctxErr(fmt.Errorf("sending the request: %w", err)))
	}
	br := bufio.NewReader(nc)
	// The request in the response carries the URL without its user.
	shown := *u
	shown.User = nil
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet, URL: &shown})
	if err != nil {
		abort()
		if ctx.Err() != nil {
			return nil, nil, fail(context.Cause(ctx))
		}
		return nil, nil, responseError(err, where)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		keepBodyStart(resp)
		abort()
		return nil, resp, &HandshakeError{
			Status:   resp.StatusCode,
			Reason:   refusedReason(resp, u, opts.FollowRedirects),
			URL:      where,
			Response: resp,
		}
	}
	subprotocol, err := checkSwitchingProtocols(resp.Header, key, opts.Subprotocols, offer != "")
	var params deflate.Params
	compressed := false
	if err == nil && offer != "" {
		params, compressed, err = deflate.Accept(resp.Header["Sec-Websocket-Extensions"], zopts.clientConfig())
	}
	if err != nil {
		abort()
		return nil, resp, &HandshakeError{Status: resp.StatusCode, Reason: err.Error(), URL: where, Response: resp}
	}
	if !stop() {
		// ctx ended just as the handshake finished: the deadline set to
		// interrupt it may already be on the connection.
		raw.Close()
		return nil, resp, fail(context.Cause(ctx))
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		raw.Close()
		return nil, resp, fail(err)
	}
	// What the server sent after the 101 is the start of the stream. Peek
	// hands out bufio's buffer without a copy; br is not kept.
	var buffered []byte
	if n := br.Buffered(); n > 0 {
		buffered, _ = br.Peek(n)
	}
	c := startConn(nc, buffered, false, subprotocol, &opts.ConnOptions)
	if compressed {
		c.enableCompression(zopts, params)
	}
	return c, resp, nil
}

// refusedReason says what the server answered instead of 101; for a
// redirect that is not followed, where to (credentials hidden) and why.
func refusedReason(resp *http.Response, u *url.URL, following bool) string {
	reason := fmt.Sprintf("server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if !isRedirect(resp.StatusCode) {
		return reason
	}
	location := resp.Header.Get("Location")
	if location == "" {
		return reason + " without a Location"
	}
	if ref, err := url.Parse(location); err == nil {
		reason += " redirecting to " + redactURL(u.ResolveReference(ref))
	}
	if !following {
		reason += " (DialOptions.FollowRedirects is off)"
	}
	return reason
}

// parseDialURL parses a WebSocket URL and reports whether it is secure
// (wss). Its errors never quote the URL: a malformed one cannot be redacted
// reliably, and url.Parse's own errors may quote a piece of the password.
func parseDialURL(rawURL string) (*url.URL, bool, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, false, fmt.Errorf("rally: dial: malformed URL (not shown, it may hold credentials): %s", whyMalformed(err))
	}
	if u.Fragment != "" || u.RawFragment != "" {
		// RFC 6455 3: fragments are meaningless in a WebSocket URI.
		return nil, false, fmt.Errorf("rally: dial %s: URL must not have a fragment", redactURL(u))
	}
	secure, err := checkDialURL(u)
	if err != nil {
		return nil, false, fmt.Errorf("rally: dial %s: %w", redactURL(u), err)
	}
	return u, secure, nil
}

// whyMalformed says what url.Parse found wrong, without its text, which
// may quote part of a password.
func whyMalformed(err error) string {
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return "it has an invalid %-escape"
	case errors.As(err, &host):
		return "its host has an invalid character"
	}
	return "it cannot be parsed"
}

// checkDialURL checks the scheme and the host of a URL to dial, and
// reports whether it is secure (wss or https).
func checkDialURL(u *url.URL) (secure bool, err error) {
	switch u.Scheme {
	case "ws", "http":
	case "wss", "https":
		secure = true
	default:
		return false, errors.New("scheme must be ws, wss, http or https")
	}
	if u.Host == "" || u.Hostname() == "" {
		return false, errors.New("URL has no host")
	}
	return secure, nil
}

// hostPortOf returns the address to dial for u: its host with the port it
// names, or the default port of its scheme (80 for ws, 443 for wss).
func hostPortOf(u *url.URL, secure bool) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if secure {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// newKey returns a fresh Sec-WebSocket-Key: 16 random bytes in base64
// (RFC 6455 4.1, item 7).
func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// requestManaged are the request headers the handshake writes itself, with
// what to use instead when a caller puts them in DialOptions.Header.
var requestManaged = map[string]string{
	"Upgrade":                  "Dial sets it",
	"Connection":               "Dial sets it",
	"Sec-Websocket-Key":        "Dial sets it",
	"Sec-Websocket-Version":    "Dial sets it",
	"Sec-Websocket-Protocol":   "use DialOptions.Subprotocols",
	"Sec-Websocket-Extensions": "set DialOptions.Compression instead",
	"Content-Length":           "an upgrade request has no body",
	"Transfer-Encoding":        "an upgrade request has no body",
}

// appendRequest appends the whole opening handshake request (RFC 6455 4.1)
// for u with header's lines, offering subprotocols, to b. Its errors name a header but never quote a value, which may be a
// credential.
func appendRequest(b []byte, u *url.URL, key string, header http.Header, subprotocols []string, extensions string) ([]byte, error) {
	target := u.RequestURI()
	if !validHeaderValue(target) || strings.IndexByte(target, ' ') >= 0 {
		return nil, errors.New("URL path or query holds a space or a control character")
	}
	host := u.Host
	hasAuthorization := false
	for name, values := range header {
		canonical := http.CanonicalHeaderKey(name)
		if why, ok := requestManaged[canonical]; ok {
			return nil, fmt.Errorf("header %s is not allowed in DialOptions.Header: %s", canonical, why)
		}
		if !isToken(name) {
			return nil, fmt.Errorf("header name %q is not a token", name)
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("header %s has a control character in its value", canonical)
			}
		}
		if canonical == "Authorization" && len(values) > 0 {
			hasAuthorization = true
		}
		if canonical == "Host" && len(values) > 0 {
			if len(values) > 1 {
				return nil, errors.New("header Host is given more than once")
			}
			host = values[0]
		}
	}

	b = append(b, "GET "...)
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "...)
	b = append(b, key...)
	b = append(b, "\r\nSec-WebSocket-Version: 13\r\n"...)
	for i, p := range subprotocols {
		if i == 0 {
			b = append(b, "Sec-WebSocket-Protocol: "...)
		} else {
			b = append(b, ", "...)
		}
		b = append(b, p...)
		if i == len(subprotocols)-1 {
			b = append(b, "\r\n"...)
		}
	}
	if extensions != "" {
		b = append(b, "Sec-WebSocket-Extensions: "...)
		b = append(b, extensions...)
		b = append(b, "\r\n"...)
	}
	if u.User != nil && !hasAuthorization {
		password, _ := u.User.Password()
		b = append(b, "Authorization: Basic "...)
		b = base64.StdEncoding.AppendEncode(b, []byte(u.User.Username()+":"+password))
		b = append(b, "\r\n"...)
	}
	for _, name := range slices.Sorted(maps.Keys(header)) {
		if http.CanonicalHeaderKey(name) == "Host" {
			continue
		}
		for _, v := range header[name] {
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...), nil
}

// responseError describes a failure to read the server's answer. I/O
// errors are kept; a parse error becomes a *HandshakeError without the
// parser's text, because net/http quotes the offending line, and a server
// that echoes the request (no HTTP server at all) would put the request
// line, query credentials included, in the error text.
func responseError(err error, where string) error {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("rally: dial %s: server closed the connection before answering: %w", where, err)
	case errors.As(err, &ne):
		return fmt.Errorf("rally: dial %s: reading the response: %w", where, err)
	}
	return &HandshakeError{URL: where, Reason: "the answer is not an HTTP/1.1 response"}
}

// keepBodyStart reads at most the first 1 KiB of a refused handshake's
// body, within the handshake's deadline, and keeps it as resp.Body so that
// the caller can see why the server refused after the connection closes.
func keepBodyStart(resp *http.Response) {
	buf := make([]byte, 1024)
	n, _ := io.ReadFull(resp.Body, buf)
	resp.Body = io.NopCloser(bytes.NewReader(buf[:n]))
}

// checkSwitchingProtocols checks the headers of a 101 answer to a request
// sent with key and offering the subprotocols offered (RFC 6455 4.1, the
// client's steps 2 to 6), and returns the subprotocol chosen.
func checkSwitchingProtocols(h http.Header, key string, offered []string, extensionOffered bool) (string, error) {
	if !hasToken(h["Upgrade"], "websocket") {
		return "", errors.New("101 response lacks Upgrade: websocket")
	}
	if !hasToken(h["Connection"], "upgrade") {
		return "", errors.New("101 response lacks Connection: upgrade")
	}
	accept := h["Sec-Websocket-Accept"]
	switch {
	case len(accept) == 0:
		return "", errors.New("101 response lacks Sec-WebSocket-Accept")
	case len(accept) > 1:
		return "", errors.New("101 response has Sec-WebSocket-Accept more than once")
	}
	var want [28]byte
	if string(appendAcceptKey(want[:0], key)) != accept[0] {
		return "", fmt.Errorf("Sec-WebSocket-Accept %q does not match the key sent", accept[0])
	}
	subprotocol, err := chosenSubprotocol(h["Sec-Websocket-Protocol"], offered)
	if err != nil {
		return "", err
	}
	if ext := h["Sec-Websocket-Extensions"]; len(ext) > 0 && !extensionOffered {
		return "", fmt.Errorf("server accepted extension %q, but none was offered", ext[0])
	}
	return subprotocol, nil
}
