package rally_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// The wire-level tests of this package talk to rally through
// internal/rawpeer, which writes exact bytes and reads exact frames, so
// each test states what is on the wire rather than what rally believes.
// This file holds the goroutine-leak check that runs after them all and the
// helpers they share.

// leakWait bounds how long the leak check gives goroutines to wind down
// after the tests (close handshakes in flight, lingering TCP).
const leakWait = 10 * time.Second

// TestMain runs the tests, then fails the run if goroutines that were not
// there before the tests are still alive after a bounded wait, printing
// their stacks.
func TestMain(m *testing.M) {
	before := goroutineIDs(allStacks())
	code := m.Run()
	if code == 0 {
		if leaked := waitForLeaks(before, leakWait); leaked != "" {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines leaked by the tests (still alive %v after them):\n\n%s\n", leakWait, leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakExempt names functions whose goroutines belong to the runtime or the
// standard library rather than to a test: they may outlive the tests.
var leakExempt = []string{
	"os/signal.signal_recv",
	"os/signal.loop",
	"testing.(*M).startAlarm",
	"runtime.ensureSigM",
}

// waitForLeaks returns the stacks of goroutines that were not in before
// and are still alive after wait, or "" once there are none.
func waitForLeaks(before map[string]bool, wait time.Duration) string {
	// Keep-alive connections of http.DefaultClient used by any test would
	// otherwise hold two goroutines each.
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	deadline := time.Now().Add(wait)
	for {
		var leaked []string
		for _, g := range splitStacks(allStacks()) {
			id := goroutineID(g)
			if before[id] || slices.ContainsFunc(leakExempt, func(f string) bool { return strings.Contains(g, f) }) {
				continue
			}
			leaked = append(leaked, g)
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		// Nothing signals that another package's goroutine has exited, so
		// look again shortly; the deadline bounds the whole.
		time.Sleep(20 * time.Millisecond)
	}
}

// allStacks returns the stacks of all goroutines, however many there are.
func allStacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// splitStacks cuts runtime.Stack output into one block per goroutine, each
// starting with "goroutine N [state]:", and drops the calling goroutine's.
func splitStacks(all string) []string {
	blocks := strings.Split(strings.TrimSpace(all), "\n\n")
	if len(blocks) > 0 {
		blocks = blocks[1:] // the first block is always the caller
	}
	return blocks
}

func goroutineIDs(all string) map[string]bool {
	ids := map[string]bool{}
	for _, g := range strings.Split(strings.TrimSpace(all), "\n\n") {
		ids[goroutineID(g)] = true
	}
	return ids
}

func goroutineID(block string) string {
	f := strings.Fields(block)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// wireTimeout bounds every network step of these tests: each read of the
// raw peer, each rally call with a context, each wait for a callback. It
// is 5 s on an idle machine and grows with the measured load: on a busy
// one (load 30 on 2 cores) a step that will happen can take longer, and
// only a step that never happens waits the whole bound. It is measured at
// each call, so that the tests that run late in a long run get the load
// of then.
func wireTimeout() time.Duration { return slowness.Scale(5 * time.Second) }

// hx decodes hex written with spaces for readability: "81 02 ff fe".
func hx(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic("bad hex in a test: " + err.Error())
	}
	return b
}

// zeros returns n zero bytes as hex.
func zeros(n int) string { return strings.Repeat("00", n) }

// hexOf formats bytes as spaced hex for messages.
func hexOf(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(' ')
		}
		s.WriteString(hex.EncodeToString([]byte{c}))
	}
	return s.String()
}

// maskedZero turns frames written as a server sends them (unmasked) into
// the same frames as a client sends them: mask bit set, masking key
// 00 00 00 00, so that the payload bytes stay as written. A frame cut short
// at the end of b stays cut short: the header claims what it claims, and
// only the bytes present are sent.
func maskedZero(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		if len(b) < 2 {
			return append(out, b...)
		}
		if b[1]&0x80 != 0 {
			panic("maskedZero: frame already masked")
		}
		hl := 2
		var n uint64
		switch l := b[1] & 0x7F; l {
		case 126:
			hl = 4
		case 127:
			hl = 10
		default:
			n = uint64(l)
		}
		if len(b) < hl {
			return append(out, b...) // header cut short: no room for the key yet
		}
		switch hl {
		case 4:
			n = uint64(binary.BigEndian.Uint16(b[2:4]))
		case 10:
			n = binary.BigEndian.Uint64(b[2:10])
		}
		out = append(out, b[0], b[1]|0x80)
		out = append(out, b[2:hl]...)
		out = append(out, 0, 0, 0, 0)
		b = b[hl:]
		k := uint64(len(b))
		if n < k {
			k = n
		}
		out = append(out, b[:k]...)
		b = b[k:]
	}
	return out
}

// ctxT returns a context that ends with the test's step bound.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wireTimeout())
	t.Cleanup(cancel)
	return ctx
}

// readRaw reads one frame and returns it with its exact wire bytes in
// spaced hex (header and payload as they were on the wire, masked if they
// were).
func readRaw(t *testing.T, p *rawpeer.Peer) (rawpeer.Frame, string) {
	t.Helper()
	var raw []byte
	p.Trace = func(out bool, b []byte) {
		if !out {
			raw = append(raw[:0], b...)
		}
	}
	f, err := p.ReadFrame()
	p.Trace = nil
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	return f, hexOf(raw)
}

// wantWire reads one frame and fails unless its wire bytes are want.
func wantWire(t *testing.T, p *rawpeer.Peer, want string) rawpeer.Frame {
	t.Helper()
	f, got := readRaw(t, p)
	if norm(got) != norm(want) {
		t.Fatalf("on the wire: %s\nwant:        %s", got, want)
	}
	return f
}

func norm(h string) string { return strings.Join(strings.Fields(h), "") }

// serve starts s behind an httptest server and returns its address.
func serve(t *testing.T, s *rally.Server) string {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// dialPeer opens a raw client peer to addr, handshake done.
func dialPeer(t *testing.T, addr string) *rawpeer.Peer {
	t.Helper()
	p, _ := dialPeerWith(t, addr, nil)
	return p
}

// dialPeerWith is dialPeer with extra request header lines; it returns
// the 101 response too.
func dialPeerWith(t *testing.T, addr string, h http.Header) (*rawpeer.Peer, *http.Response) {
	t.Helper()
	p, resp, err := rawpeer.DialClient(addr, "/", h, wireTimeout())
	if err != nil {
		t.Fatalf("raw client handshake: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, resp
}

// acceptConn starts an httptest server whose handler calls rally.Accept
// with opts, connects a raw client peer and returns both ends.
func acceptConn(t *testing.T, opts *rally.AcceptOptions) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	return acceptConnWith(t, opts, nil)
}

// acceptConnWith is acceptConn with a client sending extra request header
// lines h.
func acceptConnWith(t *testing.T, opts *rally.AcceptOptions, h http.Header) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	conns := make(chan *rally.Conn, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := rally.Accept(w, r, opts)
		if err != nil {
			return
		}
		conns <- c
	}))
	t.Cleanup(ts.Close)
	p, _ := dialPeerWith(t, ts.Listener.Addr().String(), h)
	select {
	case c := <-conns:
		t.Cleanup(func() { c.CloseNow() })
		return c, p
	case <-time.After(wireTimeout()):
		t.Fatal("Accept did not return a connection")
		return nil, nil
	}
}

// listen opens a loopback listener closed when the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialRaw dials a one-connection raw server on loopback with rally and
// returns the client connection and the server's raw peer.
func dialRaw(t *testing.T, opts *rally.DialOptions) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	return dialRawWith(t, opts, func(nc net.Conn) (*rawpeer.Peer, error) {
		p, _, err := rawpeer.AcceptServer(nc, nil, wireTimeout())
		return p, err
	})
}

// dialRawWith is dialRaw with the server's side of the handshake done by
// handshake.
func dialRawWith(t *testing.T, opts *rally.DialOptions, handshake func(nc net.Conn) (*rawpeer.Peer, error)) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	ln := listen(t)
	type result struct {
		p   *rawpeer.Peer
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		p, err := handshake(nc)
		ch <- result{p, err}
	}()
	c, _, err := rally.Dial(ctxT(t), "ws://"+ln.Addr().String()+"/", opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	r := <-ch
	if r.err != nil {
		t.Fatalf("raw server handshake: %v", r.err)
	}
	t.Cleanup(func() { r.p.Close() })
	return c, r.p
}

// recorder keeps what a Server's callbacks saw of its connections.
type recorder struct {
	mu     sync.Mutex
	events []string
	closes int
	closed chan *rally.CloseError
}

func newRecorder() *recorder { return &recorder{closed: make(chan *rally.CloseError, 4)} }

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// close is a Server.Close callback.
func (r *recorder) close(c *rally.Conn, err *rally.CloseError) {
	r.mu.Lock()
	r.closes++
	r.events = append(r.events, "close "+strconv.Itoa(int(err.Code)))
	r.mu.Unlock()
	r.closed <- err
}

// waitClose waits for the Server.Close callback and checks it ran once.
func (r *recorder) waitClose(t *testing.T) *rally.CloseError {
	t.Helper()
	select {
	case err := <-r.closed:
		if err == nil {
			t.Fatal("Server.Close got a nil *CloseError")
		}
		t.Cleanup(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.closes != 1 {
				t.Errorf("Server.Close called %d times, want once", r.closes)
			}
		})
		return err
	case <-time.After(wireTimeout()):
		t.Fatal("Server.Close was not called")
		return nil
	}
}

// waitDone waits until c has ended.
func waitDone(t *testing.T, c *rally.Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(wireTimeout()):
		t.Fatal("the connection did not end")
	}
}

// checkProtocolError fails unless err is a *rally.CloseError with code,
// wrapping a *rally.ProtocolError with the same code whose rule mentions
// rule, and errors.Is(err, rally.ErrClosed) holds.
func checkProtocolError(t *testing.T, err error, code uint16, rule string) {
	t.Helper()
	var ce *rally.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *rally.CloseError", err, err)
	}
	if ce.Code != code {
		t.Errorf("CloseError.Code = %d, want %d (%v)", ce.Code, code, err)
	}
	var pe *rally.ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v does not wrap a *rally.ProtocolError", err)
	}
	if pe.Code != code {
		t.Errorf("ProtocolError.Code = %d, want %d", pe.Code, code)
	}
	if !strings.Contains(strings.ToLower(pe.Rule), strings.ToLower(rule)) {
		t.Errorf("ProtocolError.Rule = %q, want it to name %q", pe.Rule, rule)
	}
	if !errors.Is(err, rally.ErrClosed) {
		t.Errorf("errors.Is(%v, rally.ErrClosed) = false", err)
	}
}

// checkCloseFrame fails unless f, a close frame rally sent, has a body a
// peer can parse: a valid code and at most 123 bytes of valid UTF-8.
func checkCloseFrame(t *testing.T, f rawpeer.Frame) {
	t.Helper()
	_, reason, ok := rawpeer.ParseClose(f.Payload)
	if !ok || len(reason) > 123 || !rawpeer.ValidUTF8(reason) {
		t.Errorf("close frame body %s is not a valid close body", hexOf(f.Payload))
	}
}

// syncBuffer is a bytes.Buffer safe for a logger on another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
