package loadgen_test

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// testServer is a small WebSocket server written for these tests from RFC
// 6455 alone (it shares no code with loadgen). Its reply decides what each
// test offers loadgen: a correct echo, a corrupted one, a chat room.
type testServer struct {
	t     *testing.T
	ln    net.Listener
	reply func(s *testServer, c *serverConn, op byte, payload []byte)
	// onOpen, when set, runs after the handshake, before the first read.
	onOpen func(c *serverConn)
	// accept overrides the Sec-WebSocket-Accept value sent.
	accept string
	scheme string // "ws" unless set

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[*serverConn]bool
	authz   []string
	pongs   chan []byte
	closing bool

	// What the server has seen, for tests that wait for an event: data
	// messages read, handshakes answered, connections that ended after
	// their handshake, and the channels to close when enough happened.
	data, handshakes int64
	pings            int64 // pings read (answered with pongs)
	ended            bool
	waiters          []waiter
}

// waiter is a channel to close once the server has read messages data
// messages or answered handshakes handshakes, or once a connection ended.
type waiter struct {
	messages, handshakes int64
	pings                int64
	ch                   chan struct{}
}

// enough returns a channel closed once the server has read messages data
// messages (0: any number) and answered handshakes handshakes, or as soon
// as a connection ends after its handshake (the client saw something it
// did not like, or the run is over).
func (s *testServer) enough(messages, handshakes int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := waiter{messages: messages, handshakes: handshakes, ch: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.wakeLocked()
	return w.ch
}

// pinged returns a channel closed once the server has read n pings (or a
// connection ended).
func (s *testServer) pinged(n int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := waiter{pings: n, ch: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.wakeLocked()
	return w.ch
}

// saw records an event (one of the counters advanced, or ended set) and
// closes the channels whose wait is over.
func (s *testServer) saw(event func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	event()
	s.wakeLocked()
}

func (s *testServer) wakeLocked() {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if s.ended || s.data >= w.messages && s.handshakes >= w.handshakes && s.pings >= w.pings {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	s.waiters = kept
}

// serverConn is one accepted connection; writes are serialised.
type serverConn struct {
	nc net.Conn
	wr sync.Mutex
}

func (c *serverConn) write(b []byte) {
	c.wr.Lock()
	defer c.wr.Unlock()
	c.nc.Write(b)
}

func startServer(t *testing.T, reply func(s *testServer, c *serverConn, op byte, payload []byte)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, ln, reply)
}

// startTLSServer is startServer behind TLS, with httptest's self-signed
// certificate.
func startTLSServer(t *testing.T, reply func(s *testServer, c *serverConn, op byte, payload []byte)) *testServer {
	t.Helper()
	certs := httptest.NewUnstartedServer(nil)
	certs.StartTLS()
	cfg := certs.TLS
	certs.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, tls.NewListener(ln, cfg), reply)
	s.scheme = "wss"
	return s
}

func serveOn(t *testing.T, ln net.Listener, reply func(s *testServer, c *serverConn, op byte, payload []byte)) *testServer {
	s := &testServer{t: t, ln: ln, reply: reply, conns: map[*serverConn]bool{}, pongs: make(chan []byte, 1024)}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) url(path string) string {
	scheme := s.scheme
	if scheme == "" {
		scheme = "ws"
	}
	return scheme + "://" + s.ln.Addr().String() + path
}

func (s *testServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *testServer) serve() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		c := &serverConn{nc: nc}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				nc.Close()
			}()
			s.handle(c)
		}()
	}
}

// room lists the open connections, for a chat reply.
func (s *testServer) room() []*serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*serverConn
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *testServer) handle(c *serverConn) {
	br := bufio.NewReader(c.nc)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.authz = append(s.authz, req.Header.Get("Authorization"))
	s.mu.Unlock()
	h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	accept := base64.StdEncoding.EncodeToString(h[:])
	if s.accept != "" {
		accept = s.accept
	}
	c.write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n"))
	s.saw(func() { s.handshakes++ })
	defer s.saw(func() { s.ended = true })
	if s.onOpen != nil {
		s.onOpen(c)
	}
	for {
		op, payload, err := readClientFrame(br)
		if err != nil {
			return
		}
		switch op {
		case 0x8:
			c.write(serverFrame(0x8, payload, true))
			return
		case 0x9:
			c.write(serverFrame(0xA, payload, true))
			s.saw(func() { s.pings++ })
		case 0xA:
			select {
			case s.pongs <- payload:
			default: // a test that does not count pongs
			}
		default:
			s.reply(s, c, op, payload)
			s.saw(func() { s.data++ })
		}
	}
}

// readClientFrame reads one masked frame and returns it unmasked. The
// tests' messages are never fragmented by loadgen.
func readClientFrame(br *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var key [4]byte
	if h[1]&0x80 == 0 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	if _, err := io.ReadFull(br, key[:]); err != nil {
		return 0, nil, err
	}
	if n > 64<<20 {
		// A garbage client (the hostile scenarios) can claim any length:
		// the test server refuses rather than allocate it.
		return 0, nil, fmt.Errorf("frame of %d bytes claimed", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, nil, err
	}
	for i := range p {
		p[i] ^= key[i%4]
	}
	return h[0] & 0x0F, p, nil
}

// serverFrame is an unmasked server frame.
func serverFrame(op byte, payload []byte, fin bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	n := len(payload)
	var f []byte
	switch {
	case n <= 125:
		f = []byte{b0, byte(n)}
	case n <= 0xFFFF:
		f = []byte{b0, 126, byte(n >> 8), byte(n)}
	default:
		f = []byte{b0, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(f, payload...)
}

// The replies the tests offer.

func echoReply(_ *testServer, c *serverConn, op byte, p []byte) {
	c.write(serverFrame(op, p, true))
}

// fragmentedEchoReply sends each reply in three frames with a ping between
// the first two, as a server may.
func fragmentedEchoReply(_ *testServer, c *serverConn, op byte, p []byte) {
	a, b := len(p)/3, 2*len(p)/3
	var out []byte
	out = append(out, serverFrame(op, p[:a], false)...)
	out = append(out, serverFrame(0x9, []byte("are you there"), true)...)
	out = append(out, serverFrame(0x0, p[a:b], false)...)
	out = append(out, serverFrame(0x0, p[b:], true)...)
	c.write(out)
}

func flippedByteReply(_ *testServer, c *serverConn, op byte, p []byte) {
	q := append([]byte(nil), p...)
	q[len(q)/2] ^= 0x20
	c.write(serverFrame(op, q, true))
}

func wrongTypeReply(_ *testServer, c *serverConn, op byte, p []byte) {
	c.write(serverFrame(op^0x3, p, true))
}

func shortReply(_ *testServer, c *serverConn, op byte, p []byte) {
	c.write(serverFrame(op, p[:len(p)-1], true))
}

func maskedReply(_ *testServer, c *serverConn, op byte, p []byte) {
	f := serverFrame(op, nil, true)
	f[1] |= 0x80
	f = append(f, 0, 0, 0, 0)
	c.write(append(f, p...))
}

// chatReply delivers every message to every connection, the sender included.
func chatReply(s *testServer, _ *serverConn, op byte, p []byte) {
	f := serverFrame(op, p, true)
	for _, c := range s.room() {
		c.write(f)
	}
}

// startVerbatimServer answers the handshake, then returns every byte it
// receives unchanged: a raw TCP echo.
// The channel returned is closed once it has echoed echoed bytes.
func startVerbatimServer(t *testing.T, echoed int64) (string, <-chan struct{}) {
	enough := make(chan struct{})
	var total atomic.Int64
	var once sync.Once
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				br := bufio.NewReader(nc)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Accept: " +
					base64.StdEncoding.EncodeToString(h[:]) + "\r\n\r\n"))
				buf := make([]byte, 32<<10)
				for {
					n, err := br.Read(buf)
					if n > 0 {
						nc.Write(buf[:n])
						if total.Add(int64(n)) >= echoed {
							once.Do(func() { close(enough) })
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "ws://" + ln.Addr().String() + "/", enough
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
