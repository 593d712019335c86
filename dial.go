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
)

// Dial opens a client connection to a ws:// or wss:// URL (http:// and
// https:// are taken as their aliases; ports default to 80 and 443) and
// performs the opening handshake. A nil opts is valid.
//
// The handshake, from the TCP connect through TLS to the 101 response, is
// bounded by opts.HandshakeTimeout (DefaultHandshakeTimeout when 0) and by
// ctx; ctx ending later does not affect the open connection. On a timeout
// the error wraps context.DeadlineExceeded.
//
// Dial writes the request itself: opts.Header's lines (a "Host" value there
// replaces the URL's host in the Host header; headers the handshake owns,
// such as Upgrade or Sec-WebSocket-Protocol, are an error there), the
// subprotocols offered in opts.Subprotocols, and a Basic Authorization made
// from the URL's user and password unless opts.Header has Authorization.
// For wss, opts.TLSConfig is cloned, its ServerName defaults to the URL's
// host and its NextProtos is set to http/1.1, the only protocol a WebSocket
// upgrade runs over.
//
// The response must be 101 with Upgrade: websocket, Connection: upgrade,
// the right Sec-WebSocket-Accept, at most one subprotocol and only one that
// was offered, and no Sec-WebSocket-Extensions (none are offered). Bytes
// the server sent after the 101 are the start of the WebSocket stream.
//
// On success Dial returns the connection and the 101 response (Body empty).
// When the server answered but the handshake failed, it returns the
// response (status, headers and a Body holding at most its first 1 KiB)
// together with a *HandshakeError. Otherwise (bad URL or option, network
// or TLS failure, timeout) the response is nil. Every error names the URL
// with credentials hidden (see HandshakeError) and is returned once.
func Dial(ctx context.Context, rawURL string, opts *DialOptions) (*Conn, *http.Response, error) {
	if opts == nil {
		opts = &DialOptions{}
	}
	u, secure, err := parseDialURL(rawURL)
	if err != nil {
		return nil, nil, err
	}
	where := redactURL(u)
	fail := func(err error) error { return fmt.Errorf("rally: dial %s: %w", where, err) }
	if err := checkSubprotocols(opts.Subprotocols); err != nil {
		return nil, nil, fail(err)
	}
	key := newKey()
	request, err := appendRequest(make([]byte, 0, 512), u, key, opts)
	if err != nil {
		return nil, nil, fail(err)
	}

	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("opening handshake took longer than %v: %w", timeout, context.DeadlineExceeded))
	defer cancel()
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
	raw, err := dial(ctx, "tcp", addr)
	if err == nil && raw == nil {
		err = errors.New("DialOptions.NetDialContext returned no connection and no error")
	}
	if err != nil {
		return nil, nil, fail(ctxErr(err))
	}
	// From here on, ctx ending interrupts whatever I/O is in progress.
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	abort := func() {
		stop()
		raw.Close()
	}

	nc := raw
	if secure {
		cfg := opts.TLSConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(raw, cfg)
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
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet, URL: u})
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
			Reason:   fmt.Sprintf("server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)),
			URL:      where,
			Response: resp,
		}
	}
	subprotocol, err := checkSwitchingProtocols(resp.Header, key, opts.Subprotocols)
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
	return startConn(nc, buffered, false, subprotocol, &opts.ConnOptions), resp, nil
}

// parseDialURL parses a WebSocket URL and reports whether it is secure
// (wss). Its errors never quote the URL: a malformed one cannot be redacted
// reliably, and url.Parse's own errors may quote a piece of the password.
func parseDialURL(rawURL string) (*url.URL, bool, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		why := "it cannot be parsed"
		var esc url.EscapeError
		var host url.InvalidHostError
		switch {
		case errors.As(err, &esc):
			why = "it has an invalid %-escape"
		case errors.As(err, &host):
			why = "its host has an invalid character"
		}
		return nil, false, fmt.Errorf("rally: dial: malformed URL (not shown, it may hold credentials): %s", why)
	}
	fail := func(why string) error { return fmt.Errorf("rally: dial %s: %s", redactURL(u), why) }
	var secure bool
	switch u.Scheme {
	case "ws", "http":
	case "wss", "https":
		secure = true
	default:
		return nil, false, fail("scheme must be ws, wss, http or https")
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return nil, false, fail("URL has no host")
	case u.Fragment != "" || u.RawFragment != "":
		// RFC 6455 3: fragments are meaningless in a WebSocket URI.
		return nil, false, fail("URL must not have a fragment")
	}
	return u, secure, nil
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
	"Sec-Websocket-Extensions": "no extension is offered yet",
	"Content-Length":           "an upgrade request has no body",
	"Transfer-Encoding":        "an upgrade request has no body",
}

// appendRequest appends the whole opening handshake request (RFC 6455 4.1)
// to b. Its errors name a header but never quote a value, which may be a
// credential.
func appendRequest(b []byte, u *url.URL, key string, opts *DialOptions) ([]byte, error) {
	target := u.RequestURI()
	if !validHeaderValue(target) || strings.IndexByte(target, ' ') >= 0 {
		return nil, errors.New("URL path or query holds a space or a control character")
	}
	host := u.Host
	hasAuthorization := false
	for name, values := range opts.Header {
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
	for i, p := range opts.Subprotocols {
		if i == 0 {
			b = append(b, "Sec-WebSocket-Protocol: "...)
		} else {
			b = append(b, ", "...)
		}
		b = append(b, p...)
		if i == len(opts.Subprotocols)-1 {
			b = append(b, "\r\n"...)
		}
	}
	if u.User != nil && !hasAuthorization {
		password, _ := u.User.Password()
		b = append(b, "Authorization: Basic "...)
		b = base64.StdEncoding.AppendEncode(b, []byte(u.User.Username()+":"+password))
		b = append(b, "\r\n"...)
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Header)) {
		if http.CanonicalHeaderKey(name) == "Host" {
			continue
		}
		for _, v := range opts.Header[name] {
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
func checkSwitchingProtocols(h http.Header, key string, offered []string) (string, error) {
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
	if ext := h["Sec-Websocket-Extensions"]; len(ext) > 0 {
		return "", fmt.Errorf("server accepted extension %q, but none was offered", ext[0])
	}
	return subprotocol, nil
}
