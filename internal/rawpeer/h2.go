package rawpeer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// H2Client opens WebSockets over HTTP/2 (RFC 8441) as raw client peers:
// each DialClient sends an extended CONNECT with :protocol websocket on
// the one HTTP/2 connection it holds, and the stream becomes a Peer that
// writes exact frame bytes as DATA and reads the server's. The HTTP/2
// layer is net/http's client (reached through Transport.TLSNextProto,
// since Transport.RoundTrip refuses :protocol), not rally's.
type H2Client struct {
	tr     *http.Transport
	rt     http.RoundTripper
	nc     net.Conn // the TCP (or TLS) connection under it
	scheme string
	host   string
}

// DialH2 connects to addr and speaks HTTP/2 on the connection: with TLS
// (ALPN h2) when tlsConfig is not nil, without TLS (h2c, prior
// knowledge) otherwise.
func DialH2(addr string, tlsConfig *tls.Config, timeout time.Duration) (*H2Client, error) {
	tr := &http.Transport{ForceAttemptHTTP2: true}
	tr.Clone() // sets TLSNextProto up
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	h := &H2Client{tr: tr, nc: nc, host: addr}
	if tlsConfig == nil {
		h.scheme = "http"
		h.rt = tr.TLSNextProto["unencrypted_http2"](addr, tls.Client(unencrypted{nc}, nil))
		return h, nil
	}
	cfg := tlsConfig.Clone()
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(nc, cfg)
	nc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, errors.New("rawpeer: the server did not negotiate h2")
	}
	h.scheme, h.nc = "https", tc
	h.rt = tr.TLSNextProto["h2"](addr, tc)
	return h, nil
}

// unencrypted is how net/http's HTTP/2 client is handed a connection
// without TLS: a *tls.Conn around a net.Conn with this method.
type unencrypted struct{ net.Conn }

func (u unencrypted) UnencryptedNetConn() net.Conn { return u.Conn }

// Close closes the HTTP/2 connection.
func (h *H2Client) Close() { h.tr.CloseIdleConnections() }

// Drop closes the TCP connection at once, streams open or not, as a
// client that goes away without a word (no GOAWAY, no RST_STREAM).
func (h *H2Client) Drop() { h.nc.Close() }

// DialClient opens a stream to path with an extended CONNECT carrying
// Sec-WebSocket-Version 13 and header's fields (names as net/http
// canonicalises them). It returns the peer and the response; a status
// other than 200 is an error, returned with the response (its body read,
// up to 64 KiB). timeout bounds the request and stays the peer's timeout.
func (h *H2Client) DialClient(path string, header http.Header, timeout time.Duration) (*Peer, *http.Response, error) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect, h.scheme+"://"+h.host+path, pr)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.Header = http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}}
	for name, values := range header {
		req.Header[http.CanonicalHeaderKey(name)] = values
	}
	timer := time.AfterFunc(timeout, cancel)
	resp, err := h.rt.RoundTrip(req)
	if err != nil || !timer.Stop() {
		pw.Close()
		cancel()
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("rawpeer: no answer to the extended CONNECT within %v", timeout)
		}
		return nil, nil, fmt.Errorf("rawpeer: extended CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		pw.Close()
		cancel()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil, resp, fmt.Errorf("rawpeer: extended CONNECT answered %s", resp.Status)
	}
	s := &streamConn{w: pw, body: resp.Body, cancel: cancel, chunks: make(chan []byte), acks: make(chan struct{}), done: make(chan struct{})}
	go s.pump()
	p := NewPeer(s, true)
	p.SetTimeout(timeout)
	return p, resp, nil
}

// streamConn is a client's HTTP/2 stream as a net.Conn. Reads honour the
// read deadline without closing the stream; writes ignore deadlines (the
// request body pipe takes them as fast as net/http sends them). Close
// ends the client's side (END_STREAM) and resets the stream if the
// server has not ended its own.
type streamConn struct {
	w      *io.PipeWriter
	body   io.ReadCloser
	cancel context.CancelFunc

	chunks  chan []byte
	acks    chan struct{}
	done    chan struct{}
	perr    error
	pending []byte
	rerr    error

	mu       sync.Mutex
	deadline time.Time
	once     sync.Once
}

func (s *streamConn) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.body.Read(buf)
		if n > 0 {
			select {
			case s.chunks <- buf[:n]:
			case <-s.done:
				return
			}
			select {
			case <-s.acks:
			case <-s.done:
				return
			}
		}
		if err != nil {
			s.perr = err
			close(s.chunks)
			return
		}
	}
}

func (s *streamConn) Read(p []byte) (int, error) {
	if len(s.pending) == 0 && s.rerr == nil {
		s.mu.Lock()
		d := s.deadline
		s.mu.Unlock()
		var timeout <-chan time.Time
		if !d.IsZero() {
			wait := time.Until(d)
			if wait <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case c, ok := <-s.chunks:
			if !ok {
				s.rerr = s.perr
			}
			s.pending = c
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-s.done:
			return 0, net.ErrClosed
		}
	}
	if len(s.pending) == 0 {
		return 0, s.rerr
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		select {
		case s.acks <- struct{}{}:
		case <-s.done:
		}
	}
	return n, nil
}

func (s *streamConn) Write(p []byte) (int, error) { return s.w.Write(p) }

func (s *streamConn) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.w.Close()
		s.body.Close()
		s.cancel()
	})
	return nil
}

func (s *streamConn) LocalAddr() net.Addr  { return &net.TCPAddr{} }
func (s *streamConn) RemoteAddr() net.Addr { return &net.TCPAddr{} }

func (s *streamConn) SetDeadline(t time.Time) error { return s.SetReadDeadline(t) }

func (s *streamConn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	return nil
}

func (s *streamConn) SetWriteDeadline(time.Time) error { return nil }
