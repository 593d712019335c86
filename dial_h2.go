package rally

// WebSockets over HTTP/2 (RFC 8441), client side: Dial sends an extended
// CONNECT on an HTTP/2 connection that net/http's HTTP/2 client holds, and
// the stream becomes a Conn. net/http's Transport refuses the :protocol
// pseudo-header, but the HTTP/2 client it hands TLS connections to (its
// TLSNextProto["h2"]) sends it, waits for the server's SETTINGS and fails
// if the server did not enable extended CONNECT; that client also pools
// connections, so WebSockets to one origin share one HTTP/2 connection.

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/rallyws/rally/deflate"
)

// HTTP2Mode says whether Dial opens a WebSocket as a stream of an HTTP/2
// connection (RFC 8441) or over a connection of its own (HTTP/1.1).
type HTTP2Mode int

const (
	// HTTP2Never dials HTTP/1.1 only (the default).
	HTTP2Never HTTP2Mode = iota

	// HTTP2Prefer uses HTTP/2 when the server offers it and HTTP/1.1
	// otherwise: for wss://, when TLS does not negotiate h2 or the server
	// does not enable extended CONNECT; for ws:// (HTTP/2 without TLS,
	// "h2c", by prior knowledge), when the server does not answer in
	// HTTP/2 or does not enable extended CONNECT. An origin found without
	// HTTP/2 is dialed with HTTP/1.1 from then on by the same transport.
	// A connection through a proxy (DialOptions.Proxy) uses HTTP/1.1.
	HTTP2Prefer

	// HTTP2Require uses HTTP/2 or fails.
	HTTP2Require
)

// String returns "never", "prefer" or "require".
func (m HTTP2Mode) String() string {
	switch m {
	case HTTP2Never:
		return "never"
	case HTTP2Prefer:
		return "prefer"
	case HTTP2Require:
		return "require"
	}
	return fmt.Sprintf("HTTP2Mode(%d)", int(m))
}

// ErrNoHTTP2 is behind Dial's error when DialOptions.HTTP2 is
// HTTP2Require and the server does not offer WebSockets over HTTP/2.
var ErrNoHTTP2 = errors.New("server does not offer WebSockets over HTTP/2")

// h2Pool is what rally keeps about one http.Transport's HTTP/2
// connections: the transport's HTTP/2 client, once rally handed it a first
// connection, and the origins found without HTTP/2.
type h2Pool struct {
	t    *http.Transport
	mu   sync.Mutex
	rt   map[string]http.RoundTripper // by scheme, "https" or "http"
	noH2 map[string]bool              // by scheme://host:port
}

var (
	h2Pools sync.Map // *http.Transport → *h2Pool
	// h2Transports are rally's own transports, one for each
	// DialOptions.TLSConfig: by a weak pointer to it (nil for none), so
	// that a program making a tls.Config for each Dial does not leave a
	// transport behind each. Once the tls.Config is collected, its
	// transport and pool are dropped (dropTransport).
	h2Transports sync.Map // weak.Pointer[tls.Config] or nil → *http.Transport
)

// h2PoolFor returns the pool of opts.HTTP2Transport, or of the transport
// rally keeps for Dials with opts.TLSConfig.
func h2PoolFor(opts *DialOptions) (*h2Pool, error) {
	t := opts.HTTP2Transport
	if t == nil {
		var key any
		if opts.TLSConfig != nil {
			key = weak.Make(opts.TLSConfig)
		}
		v, loaded := h2Transports.LoadOrStore(key, &http.Transport{ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second})
		t = v.(*http.Transport)
		if !loaded && opts.TLSConfig != nil {
			runtime.AddCleanup(opts.TLSConfig, dropTransport, key)
		}
	}
	if v, ok := h2Pools.Load(t); ok {
		return v.(*h2Pool), nil
	}
	// Clone sets the transport's protocols up, TLSNextProto included.
	t.Clone()
	if t.TLSNextProto["h2"] == nil || t.TLSNextProto["unencrypted_http2"] == nil {
		return nil, errors.New("DialOptions.HTTP2Transport has no HTTP/2 client (set ForceAttemptHTTP2, or leave TLSNextProto nil)")
	}
	v, _ := h2Pools.LoadOrStore(t, &h2Pool{t: t, rt: map[string]http.RoundTripper{}, noH2: map[string]bool{}})
	return v.(*h2Pool), nil
}

// dropTransport forgets the transport rally kept for a tls.Config that is
// gone, and its pool, and closes its idle connections; WebSockets on its
// connections go on.
func dropTransport(key any) {
	if v, ok := h2Transports.LoadAndDelete(key); ok {
		t := v.(*http.Transport)
		h2Pools.Delete(t)
		t.CloseIdleConnections()
	}
}

func (p *h2Pool) cached(scheme string) http.RoundTripper {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rt[scheme]
}

func (p *h2Pool) keep(scheme string, rt http.RoundTripper) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rt[scheme] = rt
}

func (p *h2Pool) withoutH2(origin string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.noH2[origin]
}

func (p *h2Pool) markWithoutH2(origin string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noH2[origin] = true
}

// h2Request is what an extended CONNECT carries, prepared once for the
// attempts of one Dial.
type h2Request struct {
	u        *url.URL
	scheme   string // https or http
	header   http.Header
	host     string
	offered  []string
	offer    string // Sec-WebSocket-Extensions
	zopts    *CompressionOptions
	where    string // the URL for errors, credentials hidden
	fallback bool   // HTTP2Prefer
}

// errFallback tells dialOnce to dial HTTP/1.1 instead.
var errFallback = errors.New("fall back to HTTP/1.1")

// dialH2 opens a WebSocket over HTTP/2 to u: on a connection the pool
// already holds for u's origin, or on a new one it adds to the pool. It
// returns errFallback when opts.HTTP2 is HTTP2Prefer and the server does
// not offer it. header has been checked by appendRequest.
func dialH2(ctx context.Context, u *url.URL, secure bool, header http.Header, offer string, zopts *CompressionOptions, opts *DialOptions) (*Conn, *http.Response, error) {
	where := redactURL(u)
	fail := func(err error) error { return fmt.Errorf("rally: dial %s: %w", where, err) }
	pool, err := h2PoolFor(opts)
	if err != nil {
		return nil, nil, fail(err)
	}
	q := &h2Request{u: u, scheme: "http", host: u.Host, offered: opts.Subprotocols, offer: offer, zopts: zopts, where: where, fallback: opts.HTTP2 == HTTP2Prefer}
	if secure {
		q.scheme = "https"
	}
	origin := q.scheme + "://" + hostPortOf(u, secure)
	if q.fallback && pool.withoutH2(origin) {
		return nil, nil, errFallback
	}
	q.header = make(http.Header, len(header)+4)
	for name, values := range header {
		if http.CanonicalHeaderKey(name) == "Host" {
			q.host = values[0]
			continue
		}
		q.header[name] = values
	}
	q.header[":protocol"] = []string{"websocket"}
	q.header["Sec-Websocket-Version"] = []string{"13"}
	if len(opts.Subprotocols) > 0 {
		q.header["Sec-Websocket-Protocol"] = []string{strings.Join(opts.Subprotocols, ", ")}
	}
	if offer != "" {
		q.header["Sec-Websocket-Extensions"] = []string{offer}
	}
	if u.User != nil && q.header.Get("Authorization") == "" {
		password, _ := u.User.Password()
		q.header["Authorization"] = []string{"Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password))}
	}

	if rt := pool.cached(q.scheme); rt != nil {
		c, resp, err := q.roundTrip(ctx, rt, opts)
		if !isNoCachedConn(err) {
			return q.outcome(pool, origin, c, resp, err)
		}
	}
	rt, err := q.connect(ctx, pool, secure, opts)
	if err != nil {
		if q.fallback && errors.Is(err, ErrNoHTTP2) {
			pool.markWithoutH2(origin)
			return nil, nil, errFallback
		}
		return nil, nil, fail(err)
	}
	pool.keep(q.scheme, rt)
	c, resp, err := q.roundTrip(ctx, rt, opts)
	var he *HandshakeError
	if err != nil && q.fallback && !secure && ctx.Err() == nil && !errors.As(err, &he) && !isNoExtendedConnect(err) {
		// h2c by prior knowledge to a server that does not speak it: the
		// new connection failed before any answer.
		pool.markWithoutH2(origin)
		return nil, nil, errFallback
	}
	return q.outcome(pool, origin, c, resp, err)
}

// outcome turns a server without extended CONNECT into a fallback or
// ErrNoHTTP2.
func (q *h2Request) outcome(pool *h2Pool, origin string, c *Conn, resp *http.Response, err error) (*Conn, *http.Response, error) {
	if err != nil && isNoExtendedConnect(err) {
		if q.fallback {
			pool.markWithoutH2(origin)
			return nil, nil, errFallback
		}
		return nil, nil, fmt.Errorf("rally: dial %s: %w (it did not enable extended CONNECT, RFC 8441)", q.where, ErrNoHTTP2)
	}
	return c, resp, err
}

// connect opens a new connection to the server and hands it to the pool's
// HTTP/2 client, which returns the RoundTripper to reach it.
func (q *h2Request) connect(ctx context.Context, pool *h2Pool, secure bool, opts *DialOptions) (http.RoundTripper, error) {
	dial := opts.NetDialContext
	if dial == nil {
		dial = pool.t.DialContext
	}
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(ctx, "tcp", hostPortOf(q.u, secure))
	if err == nil && nc == nil {
		err = errors.New("DialOptions.NetDialContext returned no connection and no error")
	}
	if err != nil {
		return nil, err
	}
	if !secure {
		// net/http's way to hand a connection without TLS to its HTTP/2
		// client: a *tls.Conn, never used for TLS, around a net.Conn that
		// says it is unencrypted.
		return pool.t.TLSNextProto["unencrypted_http2"](q.u.Host, tls.Client(unencrypted{nc}, nil)), nil
	}
	cfg := opts.TLSConfig
	if cfg == nil {
		cfg = pool.t.TLSClientConfig
	}
	cfg = cfg.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = q.u.Hostname()
	}
	cfg.NextProtos = []string{"h2"}
	if q.fallback {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// RFC 7301 3.2: the alert a server sends when it speaks none of
		// the protocols offered (crypto/tls does not export its type).
		if strings.Contains(err.Error(), "no application protocol") {
			return nil, fmt.Errorf("%w: TLS did not negotiate h2: %w", ErrNoHTTP2, err)
		}
		return nil, err
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, fmt.Errorf("%w: TLS did not negotiate h2", ErrNoHTTP2)
	}
	return pool.t.TLSNextProto["h2"](q.u.Host, tc), nil
}

// unencrypted marks a connection handed to net/http's HTTP/2 client
// without TLS (h2c); net/http looks for this method.
type unencrypted struct{ net.Conn }

func (u unencrypted) UnencryptedNetConn() net.Conn { return u.Conn }

// isNoCachedConn reports net/http's HTTP/2 client having no connection
// for the origin in its pool (its ErrNoCachedConn, which it recognises by
// this method).
func isNoCachedConn(err error) bool {
	var e interface{ IsHTTP2NoCachedConnError() }
	return errors.As(err, &e)
}

// isNoExtendedConnect reports net/http's HTTP/2 client refusing an
// extended CONNECT because the server's first SETTINGS did not enable it.
func isNoExtendedConnect(err error) bool {
	return err != nil && strings.Contains(err.Error(), "extended connect not supported")
}

// roundTrip sends the extended CONNECT through rt and checks the answer.
// The stream's context outlives ctx, which bounds only the handshake.
func (q *h2Request) roundTrip(ctx context.Context, rt http.RoundTripper, opts *DialOptions) (*Conn, *http.Response, error) {
	fail := func(err error) error { return fmt.Errorf("rally: dial %s: %w", q.where, err) }
	pr, pw := io.Pipe()
	body := &requestBody{r: pr, sent: make(chan struct{})}
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	var local, remote net.Addr
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		local, remote = info.Conn.LocalAddr(), info.Conn.RemoteAddr()
	}}
	path := q.u.Path
	if path == "" {
		path = "/"
	}
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Scheme: q.scheme, Host: q.u.Host, Path: path, RawPath: q.u.RawPath, RawQuery: q.u.RawQuery},
		Proto:  "HTTP/2.0", ProtoMajor: 2,
		Header: q.header,
		Body:   body,
		Host:   q.host,
	}
	req = req.WithContext(httptrace.WithClientTrace(streamCtx, trace))
	resp, err := rt.RoundTrip(req)
	abort := func() {
		stop()
		pw.Close()
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
	}
	if err != nil {
		abort()
		if ctx.Err() != nil {
			return nil, nil, fail(context.Cause(ctx))
		}
		return nil, nil, fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		keepBodyStart(resp)
		abort()
		return nil, resp, &HandshakeError{
			Status:   resp.StatusCode,
			Reason:   refusedReason(resp, q.u, opts.FollowRedirects),
			URL:      q.where,
			Response: resp,
		}
	}
	subprotocol, err := chosenSubprotocol(resp.Header["Sec-Websocket-Protocol"], q.offered)
	if err == nil {
		if ext := resp.Header["Sec-Websocket-Extensions"]; len(ext) > 0 && q.offer == "" {
			err = fmt.Errorf("server accepted extension %q, but none was offered", ext[0])
		}
	}
	var params deflate.Params
	compressed := false
	if err == nil && q.offer != "" {
		params, compressed, err = deflate.Accept(resp.Header["Sec-Websocket-Extensions"], q.zopts.clientConfig())
	}
	if err != nil {
		abort()
		return nil, resp, &HandshakeError{Status: resp.StatusCode, Reason: err.Error(), URL: q.where, Response: resp}
	}
	if !stop() {
		abort()
		return nil, resp, fail(context.Cause(ctx))
	}
	if local == nil {
		local, remote = &net.TCPAddr{}, &net.TCPAddr{}
	}
	s := &h2ClientStream{pw: pw, sent: body.sent, body: resp.Body, cancel: cancel, local: local, remote: remote}
	s.r.start(resp.Body)
	s.wdl.onExpire = s.writeDeadlinePassed
	c := startConn(s, nil, false, subprotocol, &opts.ConnOptions)
	if compressed {
		c.enableCompression(q.zopts, params)
	}
	return c, resp, nil
}

// requestBody is the request body net/http's HTTP/2 client reads; sent
// is closed once it has read to the end (or closed it), so every byte
// written before has gone out in DATA frames.
type requestBody struct {
	r    *io.PipeReader
	sent chan struct{}
	once sync.Once
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		b.once.Do(func() { close(b.sent) })
	}
	return n, err
}

func (b *requestBody) Close() error {
	b.once.Do(func() { close(b.sent) })
	return b.r.Close()
}

// h2CloseWait bounds how long Close lets bytes already written leave
// before the stream is released, when the peer's flow-control window
// holds them back.
const h2CloseWait = DefaultCloseTimeout

// h2ClientStream is the client's side of an HTTP/2 stream as a net.Conn:
// Read takes the response body's DATA, Write feeds the request body, whose
// bytes net/http's HTTP/2 client sends as DATA frames. Close ends the
// client's side with END_STREAM once what was written has been sent (as
// TCP sends what the kernel holds before its FIN), then releases the
// stream; if the server has not ended its side by then, the stream is
// reset (RST_STREAM CANCEL), as TCP resets a connection closed with data
// unread.
type h2ClientStream struct {
	r             streamReader
	pw            *io.PipeWriter
	sent          chan struct{}
	body          io.Closer
	cancel        context.CancelFunc
	local, remote net.Addr

	wmu     sync.Mutex
	wdl     deadline
	writing atomic.Bool
	once    sync.Once
}

func (s *h2ClientStream) Read(p []byte) (int, error) { return s.r.Read(p) }

// Write returns once net/http's HTTP/2 client has taken p to send it.
func (s *h2ClientStream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wdl.expired() {
		return 0, os.ErrDeadlineExceeded
	}
	s.writing.Store(true)
	defer s.writing.Store(false)
	n, err := s.pw.Write(p)
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

// writeDeadlinePassed interrupts a write in progress when the write
// deadline passes, by failing the request body: the stream is reset.
func (s *h2ClientStream) writeDeadlinePassed() {
	if s.writing.Load() && s.wdl.expired() {
		s.pw.CloseWithError(os.ErrDeadlineExceeded)
	}
}

func (s *h2ClientStream) Close() error {
	s.once.Do(func() {
		s.r.close()
		s.pw.Close()
		s.wdl.stop()
		release := func() {
			s.body.Close()
			s.cancel()
		}
		select {
		case <-s.sent:
			release()
		default:
			go func() {
				t := time.NewTimer(h2CloseWait)
				defer t.Stop()
				select {
				case <-s.sent:
				case <-t.C:
				}
				release()
			}()
		}
	})
	return nil
}

func (s *h2ClientStream) LocalAddr() net.Addr  { return s.local }
func (s *h2ClientStream) RemoteAddr() net.Addr { return s.remote }

func (s *h2ClientStream) SetDeadline(t time.Time) error {
	s.r.dl.set(t)
	s.wdl.set(t)
	return nil
}
func (s *h2ClientStream) SetReadDeadline(t time.Time) error  { s.r.dl.set(t); return nil }
func (s *h2ClientStream) SetWriteDeadline(t time.Time) error { s.wdl.set(t); return nil }
