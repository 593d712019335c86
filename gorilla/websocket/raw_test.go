package websocket_test

import (
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// rawPeer is the project's raw test peer (internal/rawpeer, written from
// RFC 6455, not from rally) with the few calls these tests make, failing
// the test on an error: it sends the server frames no well-behaved library
// would, and sees the bytes it answers.
type rawPeer struct {
	t testing.TB
	*rawpeer.Peer
	nc net.Conn // the TCP connection, for closing it or writing around the peer
}

// rawDial opens a TCP connection to the ws:// url and completes the
// opening handshake; each read and write of the peer is bounded by wait.
func rawDial(t testing.TB, url string) *rawPeer {
	t.Helper()
	host := strings.TrimPrefix(url, "ws://")
	path := "/"
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host, path = host[:i], host[i:]
	}
	p, _, err := rawpeer.DialClient(host, path, nil, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &rawPeer{t: t, Peer: p, nc: p.NetConn()}
}

// frame sends one masked frame.
func (p *rawPeer) frame(fin bool, op byte, payload []byte) {
	p.t.Helper()
	if err := p.WriteFrame(rawpeer.Frame{Fin: fin, Opcode: op, Payload: payload}); err != nil {
		p.t.Fatal(err)
	}
}

// send sends a masked frame whose header claims length bytes, then only
// payload (the first len(payload) of them).
func (p *rawPeer) send(fin bool, op byte, payload []byte, length int64) {
	p.t.Helper()
	full := make([]byte, length)
	copy(full, payload)
	b := rawpeer.Build(rawpeer.Frame{Fin: fin, Opcode: op, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: full})
	if err := p.WriteRaw(b[:len(b)-int(length)+len(payload)]); err != nil {
		p.t.Fatal(err)
	}
}

// closeFrame sends a close frame with code and reason.
func (p *rawPeer) closeFrame(code uint16, reason string) {
	p.t.Helper()
	p.frame(true, rawpeer.OpClose, rawpeer.CloseBody(code, reason))
}

// next reads one frame from the server.
func (p *rawPeer) next() (fin bool, op byte, payload []byte) {
	p.t.Helper()
	f, err := p.ReadFrame()
	if err != nil {
		p.t.Fatalf("reading a frame: %v", err)
	}
	return f.Fin, f.Opcode, f.Payload
}

// closeCode reads frames until a close frame and returns its code (1005
// for an empty one).
func (p *rawPeer) closeCode() int {
	p.t.Helper()
	for {
		_, op, payload := p.next()
		if op != rawpeer.OpClose {
			continue
		}
		if len(payload) < 2 {
			return 1005
		}
		code, _, _ := rawpeer.ParseClose(payload)
		return int(code)
	}
}

// acceptKey is Sec-WebSocket-Accept for key (RFC 6455 4.2.2).
func acceptKey(key string) string { return rawpeer.AcceptKey(key) }

type x509CertPool = x509.CertPool

var timeZero time.Time

// writerConn is a net.Conn whose writes go to w: a rawPeer over it
// records the frames it would send.
type writerConn struct {
	net.Conn
	w io.Writer
}

func (c writerConn) Write(p []byte) (int, error) { return c.w.Write(p) }
