package websocket

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rallyws/rally"
)

// ErrBadHandshake is returned by Dial when the server answered the opening
// handshake with anything but a valid 101; the response is returned too.
var ErrBadHandshake = errors.New("websocket: bad handshake")

// Dialer holds the options for connecting to a WebSocket server. It is
// safe to call its methods concurrently.
type Dialer struct {
	// NetDial, when set (and NetDialContext is not), opens the network
	// connection.
	NetDial func(network, addr string) (net.Conn, error)

	// NetDialContext, when set, opens the network connection.
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// NetDialTLSContext, when set, opens the connection for a wss:// URL
	// without a proxy, TLS handshake included; TLSClientConfig is then
	// not used.
	NetDialTLSContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Proxy chooses the proxy for a request (see http.Transport.Proxy);
	// nil means no proxy. HTTP, HTTPS and SOCKS5 proxies are supported.
	Proxy func(*http.Request) (*url.URL, error)

	// TLSClientConfig is the TLS configuration for wss://; nil means the
	// default, with the URL's host as server name.
	TLSClientConfig *tls.Config

	// HandshakeTimeout bounds connecting and the opening handshake; 0
	// means rally's default (30 s).
	HandshakeTimeout time.Duration

	// ReadBufferSize and WriteBufferSize are accepted for compatibility;
	// rally sizes its buffers itself.
	ReadBufferSize, WriteBufferSize int

	// WriteBufferPool is accepted for compatibility and not used.
	WriteBufferPool BufferPool

	// Subprotocols to offer, in order of preference.
	Subprotocols []string

	// EnableCompression offers permessage-deflate (RFC 7692) without
	// context takeover; it is used if the server accepts it.
	EnableCompression bool

	// Jar, when set, supplies the request's cookies and keeps the
	// response's.
	Jar http.CookieJar
}

// DefaultDialer is a Dialer that uses the environment's proxy and a
// handshake timeout of 45 seconds.
var DefaultDialer = &Dialer{
	Proxy:            http.ProxyFromEnvironment,
	HandshakeTimeout: 45 * time.Second,
}

var nilDialer = *DefaultDialer

// Dial connects to the ws:// or wss:// URL with DefaultDialer.
func Dial(urlStr string, requestHeader http.Header) (*Conn, *http.Response, error) {
	return DefaultDialer.Dial(urlStr, requestHeader)
}

// Dial is DialContext with context.Background.
func (d *Dialer) Dial(urlStr string, requestHeader http.Header) (*Conn, *http.Response, error) {
	return d.DialContext(context.Background(), urlStr, requestHeader)
}

// DialContext connects to the ws:// or wss:// URL and performs the opening
// handshake, bounded by ctx and HandshakeTimeout. requestHeader may hold
// extra request headers (Origin, Cookie, Authorization, a Host to send,
// and Sec-Websocket-Protocol when Subprotocols is empty); the handshake's
// own headers are refused.
//
// It returns the connection and the server's 101 response. When the server
// answered with something else, it returns that response (its Body holds
// at most the first 1 KiB) and ErrBadHandshake.
func (d *Dialer) DialContext(ctx context.Context, urlStr string, requestHeader http.Header) (*Conn, *http.Response, error) {
	if d == nil {
		d = &nilDialer
	}
	u, err := url.Parse(urlStr)
	if err != nil {
		return nil, nil, err
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return nil, nil, errMalformedURL
	}
	if u.Host == "" {
		return nil, nil, errMalformedURL
	}
	header := http.Header{}
	subprotocols := d.Subprotocols
	for k, vs := range requestHeader {
		switch ck := http.CanonicalHeaderKey(k); {
		case ck == "Upgrade", ck == "Connection", ck == "Sec-Websocket-Key",
			ck == "Sec-Websocket-Version", ck == "Sec-Websocket-Extensions",
			ck == "Sec-Websocket-Protocol" && len(d.Subprotocols) > 0:
			return nil, nil, errors.New("websocket: duplicate header not allowed: " + k)
		case ck == "Sec-Websocket-Protocol":
			subprotocols = nil
			for _, v := range vs {
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p != "" {
						subprotocols = append(subprotocols, p)
					}
				}
			}
		default:
			header[ck] = append(header[ck], vs...)
		}
	}
	if d.Jar != nil {
		for _, ck := range d.Jar.Cookies(httpURL(u)) {
			header.Add("Cookie", ck.String())
		}
	}

	c := newConn()
	opts := &rally.DialOptions{
		ConnOptions:      c.connOptions(),
		Header:           header,
		Subprotocols:     subprotocols,
		TLSConfig:        d.TLSClientConfig,
		HandshakeTimeout: d.HandshakeTimeout,
		Proxy:            d.Proxy,
	}
	if opts.Proxy == nil {
		opts.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	}
	if d.EnableCompression {
		opts.Compression = &rally.CompressionOptions{ServerNoContextTakeover: true, ClientNoContextTakeover: true}
	} else {
		opts.Compression = &rally.CompressionOptions{Disabled: true}
	}
	netDial := d.NetDialContext
	if netDial == nil && d.NetDial != nil {
		netDial = func(_ context.Context, network, addr string) (net.Conn, error) { return d.NetDial(network, addr) }
	}
	target := urlStr
	if u.Scheme == "wss" && d.NetDialTLSContext != nil && d.proxyFor(u) == nil {
		// The dialer brings its own TLS: rally speaks plain HTTP over it.
		netDial = d.NetDialTLSContext
		target = plainURL(u)
		if header.Get("Host") == "" {
			header.Set("Host", u.Host)
		}
	}
	if netDial == nil {
		var nd net.Dialer
		netDial = nd.DialContext
	}
	opts.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := netDial(ctx, network, addr)
		if err == nil {
			c.nc = nc
		}
		return nc, err
	}
	rc, resp, err := rally.Dial(ctx, target, opts)
	if err != nil {
		var he *rally.HandshakeError
		if errors.As(err, &he) && resp != nil {
			return nil, resp, ErrBadHandshake
		}
		return nil, resp, err
	}
	if d.Jar != nil {
		if cookies := resp.Cookies(); len(cookies) > 0 {
			d.Jar.SetCookies(httpURL(u), cookies)
		}
	}
	c.rc = rc
	c.subprotocol = rc.Subprotocol()
	return c, resp, nil
}

// proxyFor returns the proxy d uses for u, or nil.
func (d *Dialer) proxyFor(u *url.URL) *url.URL {
	if d.Proxy == nil {
		return nil
	}
	p, err := d.Proxy(&http.Request{Method: http.MethodGet, URL: httpURL(u), Header: http.Header{}, Host: u.Host})
	if err != nil {
		return nil
	}
	return p
}

// httpURL is u with ws become http and wss https (cookies and proxies are
// chosen for those).
func httpURL(u *url.URL) *url.URL {
	h := *u
	if h.Scheme == "wss" {
		h.Scheme = "https"
	} else {
		h.Scheme = "http"
	}
	return &h
}

// plainURL is u as ws:// with an explicit port, for a connection whose
// TLS someone else does.
func plainURL(u *url.URL) string {
	p := *u
	p.Scheme = "ws"
	if p.Port() == "" {
		p.Host = net.JoinHostPort(p.Hostname(), "443")
	}
	return p.String()
}

// NewClient performs the client's opening handshake on netConn, a
// connection already open to u's host (TLS, if any, done), and returns the
// WebSocket connection. Deprecated in gorilla: use Dialer.
func NewClient(netConn net.Conn, u *url.URL, requestHeader http.Header, readBufSize, writeBufSize int) (c *Conn, response *http.Response, err error) {
	used := false
	d := Dialer{
		ReadBufferSize:  readBufSize,
		WriteBufferSize: writeBufSize,
		NetDialContext: func(context.Context, string, string) (net.Conn, error) {
			if used {
				return nil, errors.New("websocket: NewClient's connection was used already")
			}
			used = true
			return netConn, nil
		},
		HandshakeTimeout: time.Duration(1<<63 - 1),
	}
	target := *u
	target.Scheme = "ws"
	if u.Scheme == "wss" || u.Scheme == "https" {
		target.Host = u.Host
		if target.Port() == "" {
			target.Host = net.JoinHostPort(u.Hostname(), "443")
		}
		h := requestHeader.Clone()
		if h == nil {
			h = http.Header{}
		}
		if h.Get("Host") == "" {
			h.Set("Host", u.Host)
		}
		requestHeader = h
	}
	return d.Dial(target.String(), requestHeader)
}
