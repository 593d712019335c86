package rawpeer

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// acceptGUID is the fixed string of RFC 6455 1.3 appended to the key.
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// AcceptKey returns the Sec-WebSocket-Accept value for a Sec-WebSocket-Key:
// base64 of the SHA-1 of the key followed by the GUID (RFC 6455 4.2.2).
func AcceptKey(key string) string {
	sum := sha1.Sum([]byte(key + acceptGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// NewKey returns a fresh Sec-WebSocket-Key: 16 random bytes in base64
// (RFC 6455 4.1).
func NewKey() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// HandshakeRequest returns the bytes of an opening handshake request (RFC
// 6455 4.1) for path on host with the given key, followed by header's lines
// in sorted order. A header value set in header replaces the default of the
// same name (Upgrade, Connection, Sec-WebSocket-Version, ...); a value of ""
// drops that default line, so a test can send a request that lacks it.
func HandshakeRequest(host, path, key string, header http.Header) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\n", path)
	defaults := [][2]string{
		{"Host", host},
		{"Upgrade", "websocket"},
		{"Connection", "Upgrade"},
		{"Sec-WebSocket-Key", key},
		{"Sec-WebSocket-Version", "13"},
	}
	for _, d := range defaults {
		if _, set := header[http.CanonicalHeaderKey(d[0])]; set {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\r\n", d[0], d[1])
	}
	for _, name := range slices.Sorted(maps.Keys(header)) {
		for _, v := range header[name] {
			if v == "" {
				continue
			}
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// Connect opens a TCP connection to addr (host:port) and returns it as a
// client peer, before any handshake: the caller writes the request with
// WriteRaw (together with frames if it likes) and reads the answer with
// ReadResponse. timeout bounds the dial and becomes the peer's timeout (see
// SetTimeout).
func Connect(addr string, timeout time.Duration) (*Peer, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	p := NewPeer(nc, true)
	p.SetTimeout(timeout)
	return p, nil
}

// DialClient connects to addr, sends an opening handshake for path with
// header's extra lines (see HandshakeRequest) and reads the response. It
// returns the peer, ready for frames, and the response. When the server does
// not answer 101 with the right Sec-WebSocket-Accept, the peer is closed and
// the error comes with the response if one was read (its body read, up to
// 64 KiB, and kept in resp.Body). timeout bounds each step and stays the
// peer's timeout.
func DialClient(addr, path string, header http.Header, timeout time.Duration) (*Peer, *http.Response, error) {
	p, err := Connect(addr, timeout)
	if err != nil {
		return nil, nil, err
	}
	key := NewKey()
	if err := p.WriteRaw(HandshakeRequest(addr, path, key, header)); err != nil {
		p.Close()
		return nil, nil, err
	}
	resp, err := p.ReadResponse(key)
	if err != nil {
		p.Close()
		return nil, resp, err
	}
	return p, resp, nil
}

// ReadResponse reads the server's answer to a handshake sent with key and
// checks it: status 101, Upgrade websocket, Connection upgrade and
// Sec-WebSocket-Accept equal to AcceptKey(key). Bytes the server sent after
// the response stay buffered and are read as frames. On a status other than
// 101 the body (up to 64 KiB) is read and kept in resp.Body, and the error
// names the status.
func (p *Peer) ReadResponse(key string) (*http.Response, error) {
	p.readDeadline()
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		return nil, fmt.Errorf("rawpeer: read handshake response: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, fmt.Errorf("rawpeer: handshake answered %s", resp.Status)
	}
	if !headerHasToken(resp.Header, "Upgrade", "websocket") {
		return resp, errors.New("rawpeer: handshake response lacks Upgrade: websocket")
	}
	if !headerHasToken(resp.Header, "Connection", "upgrade") {
		return resp, errors.New("rawpeer: handshake response lacks Connection: upgrade")
	}
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), AcceptKey(key); got != want {
		return resp, fmt.Errorf("rawpeer: Sec-WebSocket-Accept is %q, want %q", got, want)
	}
	return resp, nil
}

// AcceptServer serves the opening handshake on nc as a server: it reads the
// request, checks it (see Accept) and answers 101 with the right
// Sec-WebSocket-Accept and header's extra lines. On a bad request it
// answers 400, closes nc and returns the error with the request if it was
// read. timeout bounds each step and stays the peer's timeout.
func AcceptServer(nc net.Conn, header http.Header, timeout time.Duration) (*Peer, *http.Request, error) {
	p := NewPeer(nc, false)
	p.SetTimeout(timeout)
	r, err := p.ReadRequest()
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	if err := p.Accept(r, header); err != nil {
		p.Close()
		return nil, r, err
	}
	return p, r, nil
}

// ReadRequest reads an HTTP request head from the peer's connection. Bytes
// sent after the head stay buffered and are read as frames. The request is
// not checked; a request body is not read.
func (p *Peer) ReadRequest() (*http.Request, error) {
	p.readDeadline()
	r, err := http.ReadRequest(p.br)
	if err != nil {
		return nil, fmt.Errorf("rawpeer: read handshake request: %w", err)
	}
	return r, nil
}

// Accept checks r as an opening handshake (RFC 6455 4.2.1: GET, Upgrade
// websocket, Connection upgrade, Sec-WebSocket-Version 13, a key of 16
// bytes in base64) and answers 101 with Sec-WebSocket-Accept and header's
// extra lines, or 400 and an error naming the first rule broken.
func (p *Peer) Accept(r *http.Request, header http.Header) error {
	if err := checkRequest(r); err != nil {
		p.WriteRaw([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		return err
	}
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	fmt.Fprintf(&b, "Sec-WebSocket-Accept: %s\r\n", AcceptKey(r.Header.Get("Sec-WebSocket-Key")))
	for _, name := range slices.Sorted(maps.Keys(header)) {
		for _, v := range header[name] {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("\r\n")
	return p.WriteRaw(b.Bytes())
}

func checkRequest(r *http.Request) error {
	if r.Method != http.MethodGet {
		return fmt.Errorf("rawpeer: handshake method is %s, want GET", r.Method)
	}
	if !headerHasToken(r.Header, "Upgrade", "websocket") {
		return errors.New("rawpeer: handshake request lacks Upgrade: websocket")
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") {
		return errors.New("rawpeer: handshake request lacks Connection: upgrade")
	}
	if v := r.Header.Get("Sec-WebSocket-Version"); v != "13" {
		return fmt.Errorf("rawpeer: Sec-WebSocket-Version is %q, want 13", v)
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		return fmt.Errorf("rawpeer: Sec-WebSocket-Key %q is not 16 bytes in base64", key)
	}
	return nil
}

// headerHasToken reports whether a comma-separated header contains token,
// compared without regard to case (RFC 7230 3.2.6, RFC 6455 4.2.1).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
