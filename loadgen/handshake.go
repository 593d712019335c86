package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// handshakeTimeout bounds one dial plus opening handshake.
const handshakeTimeout = 10 * time.Second

// target is a parsed server address with its handshake request built once.
type target struct {
	addr     string // host:port to dial
	host     string // host name for TLS
	tls      bool
	insecure bool
	request  []byte // the request up to the key header
	loopback bool   // the server is on 127.0.0.0/8: spread source addresses
	compress bool   // offer permessage-deflate
	// compressed counts the handshakes that accepted permessage-deflate.
	compressed atomic.Int64
	next       atomic.Uint32
	// sources, when set, are the local addresses to dial from, in turn
	// (Config.SourceAddrs).
	sources []net.IP
}

func newTarget(rawURL string, insecure, compress bool) (*target, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: bad URL: %v", redactURLError(err))
	}
	t := &target{tls: u.Scheme == "wss" || u.Scheme == "https", insecure: insecure, host: u.Hostname(), compress: compress}
	port := u.Port()
	if port == "" {
		port = "80"
		if t.tls {
			port = "443"
		}
	}
	t.addr = net.JoinHostPort(t.host, port)
	if ip := net.ParseIP(t.host); ip != nil && ip.To4() != nil && ip.IsLoopback() {
		t.loopback = true
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\n")
	b.WriteString("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n")
	if u.User != nil {
		pw, _ := u.User.Password()
		b.WriteString("Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n")
	}
	if compress {
		b.WriteString("Sec-WebSocket-Extensions: " + deflateOffer + "\r\n")
	}
	b.WriteString("Sec-WebSocket-Key: ")
	t.request = []byte(b.String())
	return t, nil
}

// forwarded returns a target like t whose requests carry
// X-Forwarded-For: client, as a reverse proxy's would.
func (t *target) forwarded(client string) *target {
	f := &target{addr: t.addr, host: t.host, tls: t.tls, insecure: t.insecure, loopback: t.loopback, compress: t.compress, sources: t.sources}
	key := []byte("Sec-WebSocket-Key: ")
	head := bytes.TrimSuffix(t.request, key)
	f.request = append(append(append([]byte(nil), head...), "X-Forwarded-For: "+client+"\r\n"...), key...)
	return f
}

// localAddr spreads connections to a loopback server over the source
// addresses 127.0.0.1 to 127.0.0.250, so that many connections (and the
// TIME_WAIT left by many short ones) do not exhaust one address's
// ephemeral ports. spread is false for small runs, which keep 127.0.0.1.
func (t *target) localAddr(spread bool) net.Addr {
	if len(t.sources) > 0 {
		return &net.TCPAddr{IP: t.sources[int(t.next.Add(1)%uint32(len(t.sources)))]}
	}
	if !t.loopback || !spread {
		return nil
	}
	n := t.next.Add(1)
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+n%250))}
}

// handshakeError is a server that answered, but not with a valid 101.
type handshakeError struct{ reason string }

func (e *handshakeError) Error() string { return "handshake: " + e.reason }

// dial opens a TCP (or TLS) connection and performs the opening handshake.
// It returns the connection and the bytes the server sent after its 101
// response, which are the start of the WebSocket stream. When the server
// accepted permessage-deflate, the connection is a *compressedConn.
func (t *target) dial(ctx context.Context, spread bool) (net.Conn, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	d := net.Dialer{LocalAddr: t.localAddr(spread)}
	if d.LocalAddr != nil {
		d.Control = bindNoPort
	}
	nc, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	if t.tls {
		tc := tls.Client(nc, &tls.Config{ServerName: t.host, InsecureSkipVerify: t.insecure})
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, err
		}
		nc = tc
	}
	rest, answer, err := t.handshake(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	nc.SetDeadline(time.Time{})
	if answer != "" {
		noContext, _, _ := parseDeflateAnswer(answer) // checked by handshake
		t.compressed.Add(1)
		return &compressedConn{Conn: nc, serverNoContext: noContext}, rest, nil
	}
	return nc, rest, nil
}

// handshake writes the upgrade request on nc and checks the response
// (RFC 6455 4.1): status 101, Upgrade and Connection, the accept value of
// our key, and no extension unless permessage-deflate was offered, whose
// answer it returns.
func (t *target) handshake(nc net.Conn) ([]byte, string, error) {
	var raw [16]byte
	rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	req := make([]byte, 0, len(t.request)+len(key)+4)
	req = append(append(append(req, t.request...), key...), "\r\n\r\n"...)
	if _, err := nc.Write(req); err != nil {
		return nil, "", err
	}
	buf := make([]byte, 0, 1024)
	for {
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			answer, err := checkResponse(buf[:i], key, t.compress)
			if err != nil {
				return nil, "", err
			}
			return buf[i+4:], answer, nil
		}
		if len(buf) == cap(buf) {
			if len(buf) >= 16<<10 {
				return nil, "", &handshakeError{"response head longer than 16 KiB"}
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil && n == 0 {
			if errors.Is(err, net.ErrClosed) || len(buf) == 0 {
				return nil, "", fmt.Errorf("handshake: connection closed before a response: %w", err)
			}
			return nil, "", fmt.Errorf("handshake: %w", err)
		}
	}
}

// acceptGUID is the value RFC 6455 1.3 appends to the key.
const acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func acceptValue(key string) string {
	h := sha1.Sum([]byte(key + acceptGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// checkResponse checks a 101 response head and returns its
// Sec-WebSocket-Extensions answer, which may be non-empty only when
// permessage-deflate was offered.
func checkResponse(head []byte, key string, offered bool) (string, error) {
	lines := strings.Split(string(head), "\r\n")
	status := strings.Fields(lines[0])
	if len(status) < 2 || !strings.HasPrefix(status[0], "HTTP/1.") {
		return "", &handshakeError{fmt.Sprintf("not an HTTP response: %.40q", lines[0])}
	}
	if status[1] != "101" {
		return "", &handshakeError{fmt.Sprintf("status %s, want 101", strings.Join(status[1:], " "))}
	}
	var upgrade, connection, accept, extensions string
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "upgrade":
			upgrade = value
		case "connection":
			connection = value
		case "sec-websocket-accept":
			accept = value
		case "sec-websocket-extensions":
			extensions = value
		}
	}
	switch {
	case !strings.EqualFold(upgrade, "websocket"):
		return "", &handshakeError{fmt.Sprintf("Upgrade header %q, want websocket", upgrade)}
	case !headerHasToken(connection, "upgrade"):
		return "", &handshakeError{fmt.Sprintf("Connection header %q has no upgrade", connection)}
	case accept != acceptValue(key):
		return "", &handshakeError{"Sec-WebSocket-Accept does not match the key"}
	case extensions != "" && !offered:
		return "", &handshakeError{fmt.Sprintf("server chose extensions %q that were not offered", extensions)}
	}
	if _, _, err := parseDeflateAnswer(extensions); err != nil {
		return "", &handshakeError{err.Error()}
	}
	return extensions, nil
}

func headerHasToken(v, token string) bool {
	for _, t := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// redactURL returns rawURL without its user information and with the
// values of its query replaced, so that a report never shows a password or
// a token.
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
