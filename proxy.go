package rally

// The client's way through proxies: which proxy a connection takes
// (DialOptions.Proxy, or the environment with net/http's rules plus
// ALL_PROXY), and the way through it: a CONNECT tunnel (RFC 9110 9.3.6)
// through an HTTP proxy, over TLS to an HTTPS proxy, or a SOCKS5 CONNECT
// (socks.go).

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
)

// proxyFor returns the proxy a connection to u goes through, or nil for a
// direct connection: DialOptions.Proxy's choice, or else the
// environment's.
func proxyFor(opts *DialOptions, u *url.URL, secure bool) (*url.URL, error) {
	// The http(s) form of u, without its user: the URL a proxy function
	// of net/http expects.
	target := &url.URL{Scheme: "http", Host: u.Host, Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	if secure {
		target.Scheme = "https"
	}
	var proxy *url.URL
	var err error
	if opts.Proxy != nil {
		proxy, err = opts.Proxy(&http.Request{Method: http.MethodGet, URL: target, Host: u.Host, Header: http.Header{}})
		if err != nil {
			return nil, fmt.Errorf("choosing a proxy: %w", err)
		}
	} else {
		proxy, err = proxyFromEnvironment(os.Getenv, target)
		if err != nil {
			return nil, err
		}
	}
	if proxy == nil {
		return nil, nil
	}
	switch {
	case !slices.Contains(proxySchemes, proxy.Scheme):
		return nil, fmt.Errorf("proxy %s: scheme %q is not supported, only http, https, socks5 and socks5h", redactURL(proxy), proxy.Scheme)
	case proxy.Hostname() == "":
		return nil, fmt.Errorf("proxy %s has no host", redactURL(proxy))
	}
	return proxy, nil
}

// proxySchemes are the kinds of proxy Dial goes through.
var proxySchemes = []string{"http", "https", "socks5", "socks5h"}

// proxyAddr returns the address to dial for proxy: its host and port, or
// the scheme's default port (80, 443, 1080) when it names none.
func proxyAddr(proxy *url.URL) string {
	port := proxy.Port()
	if port == "" {
		switch proxy.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(proxy.Hostname(), port)
}

// throughProxy opens the way to addr (host:port) over nc, the connection
// to proxy: TLS to an https proxy then, as for an http proxy, a CONNECT
// tunnel; or a SOCKS5 CONNECT. It returns the connection to addr, or the
// proxy's response when an HTTP proxy refused (see openTunnel), or an
// error naming the proxy without its credentials. cfg is the TLS
// configuration to start from for an https proxy (nil for the default);
// the proxy's host name is always the server name checked.
func throughProxy(ctx context.Context, nc net.Conn, proxy *url.URL, addr string, cfg *tls.Config) (net.Conn, *http.Response, error) {
	switch proxy.Scheme {
	case "socks5", "socks5h":
		c, err := socksConnect(ctx, nc, proxy, addr)
		return c, nil, err
	case "https":
		cfg = cfg.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		// The server name of DialOptions.TLSConfig is the WebSocket
		// server's; the proxy is checked against its own name.
		cfg.ServerName = proxy.Hostname()
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, fmt.Errorf("TLS with proxy %s: %w", redactURL(proxy), err)
		}
		nc = tc
	}
	return openTunnel(nc, proxy, addr)
}

// proxyFromEnvironment returns the proxy for target (an http or https URL)
// that the environment, read through getenv, names, following the rules of
// net/http's ProxyFromEnvironment (golang.org/x/net/http/httpproxy), but
// at every call rather than once per process:
//
//   - HTTPS_PROXY (or https_proxy) for https, HTTP_PROXY (or http_proxy)
//     for http; the upper-case name wins. When that variable is empty,
//     ALL_PROXY (or all_proxy), as curl reads it (net/http does not). A
//     value without a scheme is taken as http://value. A value that cannot
//     be parsed is ignored.
//   - HTTP_PROXY is refused in a CGI program (REQUEST_METHOD set), where
//     a client's Proxy header would set it (golang.org/s/cgihttpproxy).
//   - localhost and loopback addresses are never proxied.
//   - NO_PROXY (or no_proxy) lists exceptions, comma-separated: "*" for
//     all; an IP address or a CIDR range; a domain, which matches itself
//     and its subdomains ("example.com"), or only its subdomains with a
//     leading dot or "*." (".example.com"); each with an optional port
//     that must then match too.
//
// Its errors never quote a value, which may hold credentials.
func proxyFromEnvironment(getenv func(string) string, target *url.URL) (*url.URL, error) {
	either := func(upper, lower string) string {
		if v := getenv(upper); v != "" {
			return v
		}
		return getenv(lower)
	}
	var value string
	switch target.Scheme {
	case "https":
		value = either("HTTPS_PROXY", "https_proxy")
	case "http":
		value = either("HTTP_PROXY", "http_proxy")
	}
	fromAll := false
	if value == "" {
		value, fromAll = either("ALL_PROXY", "all_proxy"), true
	}
	proxy := parseProxyValue(value)
	if proxy == nil {
		return nil, nil
	}
	// A CGI program's environment has a variable HTTP_PROXY for a
	// request's Proxy header; ALL_PROXY is no request header's.
	if target.Scheme == "http" && !fromAll && getenv("REQUEST_METHOD") != "" {
		return nil, errors.New("refusing to use HTTP_PROXY in a CGI program (REQUEST_METHOD is set); see golang.org/s/cgihttpproxy")
	}
	port := target.Port()
	if port == "" {
		port = "80"
		if target.Scheme == "https" {
			port = "443"
		}
	}
	if !useProxy(either("NO_PROXY", "no_proxy"), strings.ToLower(target.Hostname()), port) {
		return nil, nil
	}
	return proxy, nil
}

// parseProxyValue reads a proxy variable's value: a URL, or a host[:port]
// taken as http://host[:port]. It returns nil for an empty value or one
// that cannot be parsed.
func parseProxyValue(v string) *url.URL {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err == nil && u.Scheme != "" && u.Host != "" {
		return u
	}
	if u, err := url.Parse("http://" + v); err == nil {
		return u
	}
	return nil
}

// useProxy reports whether a connection to host (lower case, without
// brackets) and port goes through the proxy under the NO_PROXY list.
func useProxy(noProxy, host, port string) bool {
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return false
	}
	for entry := range strings.SplitSeq(noProxy, ",") {
		entry = strings.ToLower(strings.TrimSpace(entry))
		if entry == "" {
			continue
		}
		if entry == "*" {
			return false
		}
		if _, cidr, err := net.ParseCIDR(entry); err == nil {
			if ip != nil && cidr.Contains(ip) {
				return false
			}
			continue
		}
		eHost, ePort := entry, ""
		if h, p, err := net.SplitHostPort(entry); err == nil {
			eHost, ePort = h, p
		}
		if ePort != "" && ePort != port {
			continue
		}
		if eIP := net.ParseIP(eHost); eIP != nil {
			if ip != nil && eIP.Equal(ip) {
				return false
			}
			continue
		}
		if eHost == "" {
			continue
		}
		// "*.example.com" and ".example.com" match subdomains only;
		// "example.com" matches itself as well.
		if strings.HasPrefix(eHost, "*.") {
			eHost = eHost[1:]
		}
		if strings.HasPrefix(eHost, ".") {
			if strings.HasSuffix(host, eHost) {
				return false
			}
			continue
		}
		if host == eHost || strings.HasSuffix(host, "."+eHost) {
			return false
		}
	}
	return true
}

// openTunnel asks the proxy, over nc, for a tunnel to addr (host:port)
// with CONNECT, sending the proxy URL's user and password as Basic
// credentials, and returns the connection through the tunnel. When the
// proxy refuses, it returns the proxy's response (its body's first 1 KiB
// kept) and an error naming the proxy without its credentials.
func openTunnel(nc net.Conn, proxy *url.URL, addr string) (net.Conn, *http.Response, error) {
	b := make([]byte, 0, 256)
	b = append(b, "CONNECT "...)
	b = append(b, addr...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, addr...)
	b = append(b, "\r\n"...)
	if proxy.User != nil {
		password, _ := proxy.User.Password()
		b = append(b, "Proxy-Authorization: Basic "...)
		b = base64.StdEncoding.AppendEncode(b, []byte(proxy.User.Username()+":"+password))
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	shown := redactURL(proxy)
	if _, err := nc.Write(b); err != nil {
		return nil, nil, fmt.Errorf("asking proxy %s for a tunnel: %w", shown, err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect, URL: &url.URL{Host: addr}})
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, nil, fmt.Errorf("proxy %s closed the connection before answering CONNECT: %w", shown, err)
		case errors.As(err, &ne):
			return nil, nil, fmt.Errorf("reading the answer of proxy %s: %w", shown, err)
		}
		// net/http's parse errors quote the line they could not read.
		return nil, nil, fmt.Errorf("proxy %s answered CONNECT with something that is not an HTTP response", shown)
	}
	if resp.StatusCode/100 != 2 {
		keepBodyStart(resp)
		return nil, resp, fmt.Errorf("proxy %s answered CONNECT with %d %s", shown, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if n := br.Buffered(); n > 0 {
		// The proxy passed on bytes of the server's with its answer; they
		// come first. (A server never speaks first in a WebSocket or TLS
		// handshake, so this is rare.)
		early, _ := br.Peek(n)
		return &prefixConn{Conn: nc, prefix: early}, nil, nil
	}
	return nc, nil, nil
}

// prefixConn is a connection whose first bytes were already read into
// prefix.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
