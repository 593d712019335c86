package websocket_test

import (
	"bufio"
	"crypto/sha1"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawPeer is a client written by hand from RFC 6455, to send the server
// frames no well-behaved library would, and to see the bytes it answers.
type rawPeer struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

// rawDial opens a TCP connection to the ws:// url and completes the
// opening handshake.
func rawDial(t testing.TB, url string) *rawPeer {
	t.Helper()
	host := strings.TrimPrefix(url, "ws://")
	path := "/"
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host, path = host[:i], host[i:]
	}
	nc, err := net.DialTimeout("tcp", host, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(wait))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %s", resp.Status)
	}
	return &rawPeer{t: t, nc: nc, br: br}
}

// frame sends one masked frame.
func (p *rawPeer) frame(fin bool, op byte, payload []byte) {
	p.t.Helper()
	p.send(fin, op, payload, int64(len(payload)))
}

// send sends a masked frame header claiming length, then payload.
func (p *rawPeer) send(fin bool, op byte, payload []byte, length int64) {
	p.t.Helper()
	b0 := op
	if fin {
		b0 |= 0x80
	}
	h := []byte{b0}
	switch {
	case length < 126:
		h = append(h, 0x80|byte(length))
	case length < 1<<16:
		h = append(h, 0x80|126, byte(length>>8), byte(length))
	default:
		h = append(h, 0x80|127)
		h = binary.BigEndian.AppendUint64(h, uint64(length))
	}
	mask := [4]byte{1, 2, 3, 4}
	h = append(h, mask[:]...)
	masked := make([]byte, len(payload))
	for i, c := range payload {
		masked[i] = c ^ mask[i%4]
	}
	if _, err := p.nc.Write(append(h, masked...)); err != nil {
		p.t.Fatal(err)
	}
}

// closeFrame sends a close frame with code and reason.
func (p *rawPeer) closeFrame(code uint16, reason string) {
	p.t.Helper()
	p.frame(true, 0x8, append([]byte{byte(code >> 8), byte(code)}, reason...))
}

// next reads one unmasked frame from the server.
func (p *rawPeer) next() (fin bool, op byte, payload []byte) {
	p.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(p.br, h[:]); err != nil {
		p.t.Fatalf("reading a frame: %v", err)
	}
	n := int64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(p.br, b[:])
		n = int64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(p.br, b[:])
		n = int64(binary.BigEndian.Uint64(b[:]))
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(p.br, payload); err != nil {
		p.t.Fatalf("reading a payload: %v", err)
	}
	return h[0]&0x80 != 0, h[0] & 0x0f, payload
}

// closeCode reads frames until a close frame and returns its code (1005
// for an empty one).
func (p *rawPeer) closeCode() int {
	p.t.Helper()
	for {
		_, op, payload := p.next()
		if op != 0x8 {
			continue
		}
		if len(payload) < 2 {
			return 1005
		}
		return int(binary.BigEndian.Uint16(payload))
	}
}

// acceptKey is Sec-WebSocket-Accept for key (RFC 6455 4.2.2).
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

type x509CertPool = x509.CertPool

var timeZero time.Time

// writerConn is a net.Conn whose writes go to w: a rawPeer over it
// records the frames it would send.
type writerConn struct {
	net.Conn
	w io.Writer
}

func (c writerConn) Write(p []byte) (int, error) { return c.w.Write(p) }
