package interop_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// Opcodes as the tables name them; the tests spell the wire out on their
// own rather than borrow rally's frame package.
const (
	opCont   byte = 0x0
	opText   byte = 0x1
	opBinary byte = 0x2
	opClose  byte = 0x8
	opPing   byte = 0x9
	opPong   byte = 0xA
)

// endpoint is one side of a connection under a test's control: npm ws,
// rally, or a raw peer. The methods return what the caller saw, rendered
// as a line of a table ("send() ok", "close() refused"); Next returns the
// next thing the endpoint reported ("message text 6869", "close 1000 \"\"",
// "fail 1007"), or "nothing" when it reported nothing within waitFor.
type endpoint interface {
	Send(typ byte, p []byte, fin bool) string
	Ping(p []byte) string
	Close(code uint16, reason []byte) string
	Next() string
	Hangup()
}

// summary renders a payload: hex up to 32 bytes, else its length and the
// start of its SHA-256.
func summary(p []byte) string {
	if len(p) <= 32 {
		return hex.EncodeToString(p)
	}
	h := sha256.Sum256(p)
	return fmt.Sprintf("%dB:%x", len(p), h[:4])
}

// eventQueue carries the events of a rally endpoint to the test.
type eventQueue chan string

func (q eventQueue) next() string {
	select {
	case s := <-q:
		return s
	case <-time.After(waitFor):
		return "nothing"
	}
}

// pushEnd renders how a rally connection ended: a failure it detected
// ("fail <code>") comes first, as npm ws reports it, then the close.
func (q eventQueue) pushEnd(ce *rally.CloseError) {
	var pe *rally.ProtocolError
	if errors.As(ce, &pe) {
		q <- fmt.Sprintf("fail %d", pe.Code)
	}
	q <- fmt.Sprintf("close %d %q", ce.Code, ce.Reason)
}

func messageEvent(typ rally.MessageType, p []byte) string {
	return fmt.Sprintf("message %s %s", typ, summary(p))
}

// rallyEndpoint is a rally connection, served by a rally.Server (events
// from its callbacks) or dialed (events from a reading goroutine).
type rallyEndpoint struct {
	c      *rally.Conn
	events eventQueue
	done   chan struct{} // closed when the reading side has finished
}

func (e *rallyEndpoint) Send(typ byte, p []byte, fin bool) string {
	if !fin {
		return "send() unsupported: rally sends fragments through Writer"
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.c.Write(ctx, rally.MessageType(typ), p); err != nil {
		// Write reports every failure at once: it returns it.
		return "send() error at once"
	}
	return "send() ok"
}

func (e *rallyEndpoint) Ping(p []byte) string {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.c.Ping(ctx, p); err != nil {
		return "ping() error"
	}
	return "ping() ok"
}

// Close runs Close. A served connection's Close returns at once; a dialed
// one's returns when the handshake is over (the test's peers answer, and
// ConnOptions.CloseTimeout bounds the rest). Only a refused argument is
// reported as refused: a close that was sent, answered or not, is ok.
func (e *rallyEndpoint) Close(code uint16, reason []byte) string {
	if err := e.c.Close(code, string(reason)); err != nil && !errors.Is(err, rally.ErrClosed) {
		return "close() refused"
	}
	return "close() ok"
}

func (e *rallyEndpoint) Next() string { return e.events.next() }

func (e *rallyEndpoint) Hangup() { e.c.CloseNow() }

// newRallyServer starts a rally.Server in mode on loopback whose one
// connection reports to the returned channel.
func newRallyServer(t testing.TB, mode serverMode, opts *rally.AcceptOptions) (addr string, conns chan *rallyEndpoint) {
	conns = make(chan *rallyEndpoint, 4)
	ends := sync.Map{}
	srv := &rally.Server{
		Options: opts,
		Open: func(c *rally.Conn) {
			e := &rallyEndpoint{c: c, events: make(eventQueue, 1024), done: make(chan struct{})}
			ends.Store(c, e)
			conns <- e
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if e, ok := ends.Load(c); ok {
				e.(*rallyEndpoint).events <- messageEvent(typ, p)
			}
		},
		Ping: func(c *rally.Conn, p []byte) {
			if e, ok := ends.Load(c); ok {
				e.(*rallyEndpoint).events <- "ping " + summary(p)
			}
		},
		Pong: func(c *rally.Conn, p []byte) {
			if e, ok := ends.Load(c); ok {
				e.(*rallyEndpoint).events <- "pong " + summary(p)
			}
		},
		Close: func(c *rally.Conn, ce *rally.CloseError) {
			if e, ok := ends.Load(c); ok {
				e.(*rallyEndpoint).events.pushEnd(ce)
				close(e.(*rallyEndpoint).done)
			}
		},
	}
	hs := serveRally(t, mode, srv, nil)
	t.Cleanup(func() {
		ends.Range(func(k, v any) bool {
			k.(*rally.Conn).CloseNow()
			<-v.(*rallyEndpoint).done
			return true
		})
	})
	return hs.Listener.Addr().String(), conns
}

// dialRally opens a rally client to url whose events are read by a
// goroutine that ends with the connection.
func dialRally(t testing.TB, url string, opts *rally.DialOptions) (*rallyEndpoint, error) {
	e := &rallyEndpoint{events: make(eventQueue, 1024), done: make(chan struct{})}
	o := rally.DialOptions{}
	if opts != nil {
		o = *opts
	}
	o.OnPing = func(_ *rally.Conn, p []byte) { e.events <- "ping " + summary(p) }
	o.OnPong = func(_ *rally.Conn, p []byte) { e.events <- "pong " + summary(p) }
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, resp, err := rally.Dial(ctx, url, &o)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("refused %d: %w", resp.StatusCode, err)
		}
		return nil, err
	}
	e.c = c
	go func() {
		defer close(e.done)
		for {
			typ, p, err := c.Read(context.Background())
			if err != nil {
				var ce *rally.CloseError
				if errors.As(err, &ce) {
					e.events.pushEnd(ce)
				}
				return
			}
			e.events <- messageEvent(typ, p)
		}
	}()
	t.Cleanup(func() {
		c.CloseNow()
		<-e.done
		<-c.Done()
	})
	return e, nil
}

// rawEndpoint is an internal/rawpeer peer: it sends exactly what it is
// told, answers nothing and checks nothing.
type rawEndpoint struct {
	p         *rawpeer.Peer
	fragments bool // a fragmented message is open: the next data frame continues it
}

func (e *rawEndpoint) Send(typ byte, p []byte, fin bool) string {
	op := typ
	if e.fragments {
		op = opCont
	}
	e.fragments = !fin
	return writeResult("send()", e.p.WriteFrame(rawpeer.Frame{Fin: fin, Opcode: op, Payload: p}))
}

func (e *rawEndpoint) Ping(p []byte) string {
	return writeResult("ping()", e.p.WriteFrame(rawpeer.Ping(p)))
}

func (e *rawEndpoint) Close(code uint16, reason []byte) string {
	return writeResult("close()", e.p.WriteFrame(rawpeer.Close(code, string(reason))))
}

// Frame writes f as it is (masked with a random key when the peer is a
// client and f is not masked).
func (e *rawEndpoint) Frame(f rawpeer.Frame) string {
	return writeResult("frame", e.p.WriteFrame(f))
}

// Raw writes b exactly.
func (e *rawEndpoint) Raw(b []byte) string {
	return writeResult("raw", e.p.WriteRaw(b))
}

// Next reads the next frame the other side sent.
func (e *rawEndpoint) Next() string {
	f, err := e.p.ReadFrame()
	if err != nil {
		if rawpeer.IsClosedByPeer(err) {
			return "eof"
		}
		return "nothing"
	}
	return renderFrame(f.Fin, f.Rsv, f.Opcode, f.Payload)
}

func (e *rawEndpoint) Hangup() { e.p.Close() }

func writeResult(what string, err error) string {
	if err != nil {
		return what + " error"
	}
	return what + " ok"
}

// renderFrame renders a frame as its header bytes without the mask bit and
// key, then its payload: "81 05 68656c6c6f", "88 02 03e8". Close payloads
// are shown whole; others through summary.
func renderFrame(fin bool, rsv, op byte, p []byte) string {
	b0 := rsv | op
	if fin {
		b0 |= 0x80
	}
	var h strings.Builder
	fmt.Fprintf(&h, "%02x ", b0)
	switch n := len(p); {
	case n <= 125:
		fmt.Fprintf(&h, "%02x", n)
	case n <= 0xFFFF:
		fmt.Fprintf(&h, "7e%04x", n)
	default:
		fmt.Fprintf(&h, "7f%016x", n)
	}
	if len(p) > 0 {
		if op == opClose {
			h.WriteString(" " + hex.EncodeToString(p))
		} else {
			h.WriteString(" " + summary(p))
		}
	}
	return h.String()
}

// listenRaw accepts one connection on loopback and serves its handshake
// with rawpeer; the peer arrives on the returned channel.
func listenRaw(t testing.TB) (addr string, peers chan *rawEndpoint) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peers = make(chan *rawEndpoint, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		p, _, err := rawpeer.AcceptServer(nc, nil, waitFor)
		if err != nil {
			return
		}
		peers <- &rawEndpoint{p: p}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		select {
		case e := <-peers:
			e.Hangup()
			peers <- e
		default:
		}
	})
	return ln.Addr().String(), peers
}

// handshake sends a raw opening handshake request to addr with header's
// lines (a nil value drops a line of the default request) and returns the
// status and the header of the answer.
func handshake(t testing.TB, addr, method string, header map[string]string) (int, http.Header) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(waitFor))
	lines := map[string]string{
		"Host":                  addr,
		"Upgrade":               "websocket",
		"Connection":            "Upgrade",
		"Sec-WebSocket-Key":     "dGhlIHNhbXBsZSBub25jZQ==",
		"Sec-WebSocket-Version": "13",
	}
	for k, v := range header {
		lines[k] = v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s / HTTP/1.1\r\n", method)
	for _, k := range []string{"Host", "Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version"} {
		if v := lines[k]; v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := nc.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	p := rawpeer.NewPeer(nc, true)
	p.SetTimeout(waitFor)
	resp, _ := p.ReadResponse("dGhlIHNhbXBsZSBub25jZQ==")
	if resp == nil {
		t.Fatalf("no HTTP answer from %s", addr)
	}
	return resp.StatusCode, resp.Header
}
