package interop_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// wireTap is a TCP proxy on loopback between a client and a server. It
// forwards bytes unchanged and records the frames of each direction, so a
// test states what was on the wire rather than what either side believes.
type wireTap struct {
	ln     net.Listener
	target string
	c2s    *wireLog // frames the client sent
	s2c    *wireLog // frames the server sent
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// newWireTap starts a tap in front of target and stops it when t ends.
func newWireTap(t testing.TB, target string) *wireTap {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireTap{ln: ln, target: target, c2s: newWireLog(true), s2c: newWireLog(false)}
	w.wg.Add(1)
	go w.serve()
	t.Cleanup(func() {
		ln.Close()
		w.mu.Lock()
		for _, c := range w.conns {
			c.Close()
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
	return w
}

// Addr is where clients connect.
func (w *wireTap) Addr() string { return w.ln.Addr().String() }

func (w *wireTap) serve() {
	defer w.wg.Done()
	for {
		client, err := w.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", w.target, waitFor)
		if err != nil {
			client.Close()
			continue
		}
		w.mu.Lock()
		w.conns = append(w.conns, client, server)
		w.mu.Unlock()
		w.wg.Add(2)
		go w.pump(client, server, w.c2s)
		go w.pump(server, client, w.s2c)
	}
}

// pump copies src to dst, recording what passes, and passes the end on:
// a FIN as a FIN (half close), anything else as a close.
func (w *wireTap) pump(src, dst net.Conn, log *wireLog) {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			log.feed(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				log.end("reset")
				src.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				log.end("eof")
				dst.(*net.TCPConn).CloseWrite()
				return
			}
			if errors.Is(err, syscall.ECONNRESET) {
				log.end("reset")
			}
			dst.Close()
			return
		}
	}
}

// wireLog holds the frames of one direction, after the HTTP head.
type wireLog struct {
	fromClient bool

	mu     sync.Mutex
	buf    []byte
	body   bool // the HTTP head has passed
	frames []string
	ended  bool
	pos    int
	signal chan struct{}
}

func newWireLog(fromClient bool) *wireLog {
	return &wireLog{fromClient: fromClient, signal: make(chan struct{}, 1)}
}

func (l *wireLog) feed(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.buf = append(l.buf, b...)
	if !l.body {
		i := bytes.Index(l.buf, []byte("\r\n\r\n"))
		if i < 0 {
			return
		}
		l.buf = l.buf[i+4:]
		l.body = true
	}
	for {
		s, n := parseFrame(l.buf, l.fromClient)
		if n == 0 {
			break
		}
		l.frames = append(l.frames, s)
		l.buf = l.buf[n:]
	}
	l.notify()
}

func (l *wireLog) end(how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.ended = true
		if len(l.buf) > 0 && l.body {
			how = "partial frame, then " + how
		}
		l.frames = append(l.frames, how)
		l.notify()
	}
}

func (l *wireLog) notify() {
	select {
	case l.signal <- struct{}{}:
	default:
	}
}

// next returns the next frame of this direction ("81 05 68656c6c6f"), "eof"
// or "reset" when the sender ended TCP, or "nothing" after waitFor.
func (l *wireLog) next() string {
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		if l.pos < len(l.frames) {
			s := l.frames[l.pos]
			l.pos++
			l.mu.Unlock()
			return s
		}
		l.mu.Unlock()
		select {
		case <-l.signal:
		case <-deadline.C:
			return "nothing"
		}
	}
}

// parseFrame parses one whole frame at the start of b (RFC 6455 5.2) and
// returns it rendered (see renderFrame) with the number of bytes it took,
// or n 0 while the frame is incomplete. A frame whose masking breaks the
// rule for its direction (a client masks, a server does not) is marked.
func parseFrame(b []byte, fromClient bool) (string, int) {
	if len(b) < 2 {
		return "", 0
	}
	masked := b[1]&0x80 != 0
	n := uint64(b[1] & 0x7F)
	hl := 2
	switch n {
	case 126:
		if len(b) < 4 {
			return "", 0
		}
		n = uint64(binary.BigEndian.Uint16(b[2:]))
		hl = 4
	case 127:
		if len(b) < 10 {
			return "", 0
		}
		n = binary.BigEndian.Uint64(b[2:])
		hl = 10
	}
	if masked {
		hl += 4
	}
	if len(b) < hl || uint64(len(b)-hl) < n {
		return "", 0
	}
	p := append([]byte(nil), b[hl:hl+int(n)]...)
	if masked {
		key := b[hl-4 : hl]
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	s := renderFrame(b[0]&0x80 != 0, b[0]&0x70, b[0]&0x0F, p)
	switch {
	case fromClient && !masked:
		s += " (unmasked)"
	case !fromClient && masked:
		s += " (masked)"
	}
	return s, hl + int(n)
}
