//go:build linux

package rally

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Serve with EventLoop: the loops read and answer the opening handshakes
// (loop_accept_linux.go).

// serveRaw runs s.Serve on a new loopback listener until the test ends
// and returns its address.
func serveRaw(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// watchHeadReads reports, after each read of a request head by a loop,
// how many bytes of the head the loop has parsed.
func watchHeadReads(t *testing.T) <-chan int {
	ch := make(chan int, 4096)
	hook := func(used int) {
		select {
		case ch <- used:
		default:
		}
	}
	testHookHeadRead.Store(&hook)
	t.Cleanup(func() { testHookHeadRead.Store(nil) })
	return ch
}

// waitHeadRead waits until a loop reports having parsed used bytes of a
// head.
func waitHeadRead(t *testing.T, reads <-chan int, used int) {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case n := <-reads:
			if n == used {
				return
			}
		case <-timeout:
			t.Fatalf("no loop read %d bytes of a head", used)
		}
	}
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(testTimeout))
	return nc
}

// loopEchoServer echoes every message, on one loop.
func loopEchoServer(opts *AcceptOptions) *Server {
	return &Server{
		EventLoop:  true,
		EventLoops: 1,
		Options:    opts,
		Message: func(c *Conn, typ MessageType, p []byte) {
			c.Write(context.Background(), typ, p)
		},
	}
}

// A head cut anywhere (inside a CRLF, inside a token) is read as a whole,
// and the frames sent behind it, whole or cut, are the start of the
// stream.
func TestLoopServeReadsAHeadCutAtEveryByteAndTheFramesBehindIt(t *testing.T) {
	reads := watchHeadReads(t)
	addr := serveRaw(t, loopEchoServer(nil))
	head := handshakeBytes("GET")
	frame := []byte{0x81, 0x82, 0, 0, 0, 0, 'h', 'i'} // "hi", masked with zeros
	all := append(bytes.Clone(head), frame...)
	for cut := 1; cut < len(all); cut++ {
		nc := dialTCP(t, addr)
		br := bufio.NewReader(nc)
		if _, err := nc.Write(all[:cut]); err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		var err error
		if cut < len(head) {
			// The loop has the first piece before the second is sent.
			waitHeadRead(t, reads, cut)
			nc.Write(all[cut:])
			resp, err = http.ReadResponse(br, nil)
		} else {
			// The head and part of the frame came at once: the 101 goes
			// out, the part waits for the rest of the frame.
			resp, err = http.ReadResponse(br, nil)
			nc.Write(all[cut:])
		}
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("cut at %d: answer %v, %v; want 101", cut, resp, err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "\x81\x02hi" {
			t.Fatalf("cut at %d: echo % x, %v; want 81 02 68 69", cut, got, err)
		}
		nc.Close()
	}
}

// A head longer than MaxHeaderBytes is answered 431 as soon as the bound
// is passed, and the connection is closed.
func TestLoopServeAnswersAHeadPastItsBoundWith431(t *testing.T) {
	addr := serveRaw(t, loopEchoServer(&AcceptOptions{MaxHeaderBytes: 512}))
	nc := dialTCP(t, addr)
	// The end of the head never comes: the answer does not wait for it.
	nc.Write(handshakeBytes("GET", "X-Padding: "+strings.Repeat("a", 600))[:600])
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close {
		t.Fatalf("answer %d (close %v), want 431 with Connection: close", resp.StatusCode, resp.Close)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the end of the stream", err)
	}
}

// A head that does not arrive within HandshakeTimeout is given up: the
// connection is closed without an answer, and OnHandshakeError says why.
func TestLoopServeClosesAHeadThatDoesNotArriveInTime(t *testing.T) {
	failed := make(chan error, 1)
	opts := &AcceptOptions{
		HandshakeTimeout: 50 * time.Millisecond,
		OnHandshakeError: func(r *http.Request, err error) { failed <- err },
	}
	addr := serveRaw(t, loopEchoServer(opts))
	nc := dialTCP(t, addr)
	head := handshakeBytes("GET")
	nc.Write(head[:len(head)-2]) // all but the final CRLF: a slowloris
	if n, err := nc.Read(make([]byte, 64)); n != 0 || err != io.EOF {
		t.Fatalf("read %d bytes, %v; want the end of the stream", n, err)
	}
	if err := <-failed; !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not arrive within 50ms") {
		t.Fatalf("OnHandshakeError got %v, want the head's deadline", err)
	}
}

// With a memory budget, at most MaxPendingHandshakes heads are read at
// once: past it the oldest still arriving is answered 503 and the others
// go on; the charges are given back.
func TestLoopServeCutsTheOldestHeadPastMaxPendingHandshakes(t *testing.T) {
	reads := watchHeadReads(t)
	budget := NewMemoryBudgetWith(0, &MemoryBudgetOptions{MaxPendingHandshakes: 2})
	failed := make(chan error, 4)
	opts := &AcceptOptions{
		ConnOptions:      ConnOptions{MemoryBudget: budget},
		OnHandshakeError: func(r *http.Request, err error) { failed <- err },
	}
	addr := serveRaw(t, loopEchoServer(opts))
	head := handshakeBytes("GET")
	part := head[:len(head)-2]
	var ncs []net.Conn
	for range 3 {
		nc := dialTCP(t, addr)
		nc.Write(part)
		waitHeadRead(t, reads, len(part))
		ncs = append(ncs, nc)
	}
	if code, hdr := status(t, ncs[0]); code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("the oldest head got %d (Retry-After %q), want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	for _, nc := range ncs[1:] {
		nc.Write([]byte("\r\n"))
		if code, _ := status(t, nc); code != http.StatusSwitchingProtocols {
			t.Fatalf("a newer head got %d, want 101", code)
		}
	}
	var he *HandshakeError
	if err := <-failed; !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable {
		t.Fatalf("OnHandshakeError got %v, want a 503 HandshakeError", err)
	}
	if st := budget.Stats()[MemoryHandshakes]; st.Used != 0 || st.Peak != 3*int64(DefaultMaxHeaderBytes) {
		t.Errorf("handshakes: %d still charged, peak %d; want 0 and %d", st.Used, st.Peak, 3*DefaultMaxHeaderBytes)
	}
	if n := budget.pendingHeads(); n != 0 {
		t.Errorf("%d heads still counted in progress", n)
	}
}

// Heads in progress cost no goroutine each, and once their clients are
// gone and the server shut down, no descriptor or goroutine is left.
func TestLoopServeHoldsHeadsWithoutAGoroutineEachAndLeavesNothingBehind(t *testing.T) {
	reads := watchHeadReads(t)
	fdsBefore, gBefore := OpenFDs(t), runtime.NumGoroutine()
	s := loopEchoServer(nil)
	s.EventLoops = 2
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	head := handshakeBytes("GET")
	part := head[:len(head)-2]
	const n = 200
	var ncs []net.Conn
	for range n {
		nc := dialTCP(t, ln.Addr().String())
		nc.Write(part)
		ncs = append(ncs, nc)
	}
	for range n {
		waitHeadRead(t, reads, len(part))
	}
	// Serve's goroutine and, per loop, its goroutine and those of its
	// watchdog and sweep timers if they happen to fire: nothing per head.
	if most := 1 + 3*s.EventLoops; runtime.NumGoroutine() > gBefore+most {
		t.Fatalf("%d goroutines with %d heads in progress, %d before: want at most %d more",
			runtime.NumGoroutine(), n, gBefore, most)
	}
	// Half finish their handshake and are served, half go away.
	for i, nc := range ncs {
		if i%2 == 0 {
			nc.Close()
			continue
		}
		nc.Write([]byte("\r\n"))
		if code, _ := status(t, nc); code != http.StatusSwitchingProtocols {
			t.Fatalf("got %d, want 101", code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	s.Shutdown(ctx) // cuts the open connections at once
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve = %v", err)
	}
	for _, nc := range ncs {
		nc.Close()
	}
	WaitNothingLeft(t, fdsBefore, gBefore, testTimeout)
}

// startServeServer starts Serve in goroutine mode or with event loops,
// reporting each connection opened (Open) and each handshake failure
// (OnHandshakeError) as Upgrade would return them.
func startServeServer(loop bool) startServer {
	return func(t *testing.T, opts *AcceptOptions) (string, <-chan accepted) {
		results := make(chan accepted, 16)
		told := opts.OnHandshakeError
		opts.OnHandshakeError = func(r *http.Request, err error) {
			if told != nil {
				told(r, err)
			}
			results <- accepted{err: err}
		}
		s := &Server{
			EventLoop:  loop,
			EventLoops: 1,
			Options:    opts,
			Open:       func(c *Conn) { results <- accepted{conn: c} },
		}
		return serveRaw(t, s), results
	}
}

// rawRefusalCases are heads Upgrade's parser refuses, for both modes of
// Serve.
func rawRefusalCases() []handshakeStatusCase {
	return []handshakeStatusCase{
		{"head past its bound", handshakeBytes("GET", "X-Padding: "+strings.Repeat("a", 17<<10)), nil, 431, [2]string{}, "the request head is longer"},
		{"malformed request line", []byte("GET /chat\r\nHost: x\r\n\r\n"), nil, 400, [2]string{}, "malformed request line"},
		{"HTTP/2.0", []byte(strings.Replace(string(handshakeBytes("GET")), "HTTP/1.1", "HTTP/2.0", 1)), nil, 505, [2]string{}, "HTTP version must be 1.x"},
		{"two Hosts", handshakeBytes("GET", "Host: a", "Host: b"), nil, 400, [2]string{}, "Host appears more than once"},
		{"folded line", []byte(strings.Replace(string(handshakeBytes("GET")), "Upgrade: websocket\r\n", "Upgrade:\r\n websocket\r\n", 1)), nil, 400, [2]string{}, "obsolete line folding"},
	}
}

// Serve's loops answer every handshake as Upgrade does: the same status,
// headers and body for each request, in both modes.
func TestLoopServeAnswersEachHandshakeAsServeWithoutLoopsDoes(t *testing.T) {
	for _, tc := range append(handshakeStatusCases(), rawRefusalCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			checkHandshakeStatus(t, tc, startServeServer(true))
			var answers [2]string
			for i, loop := range []bool{false, true} {
				var opts AcceptOptions
				if tc.opts != nil {
					opts = *tc.opts
				}
				addr, _ := startServeServer(loop)(t, &opts)
				resp, body, _ := exchange(t, addr, tc.raw)
				h := resp.Header.Clone()
				h.Del("Sec-WebSocket-Accept") // the same key: checked by checkHandshakeStatus
				answers[i] = resp.Status + "\n" + headerText(h) + "\n" + body
			}
			if answers[0] != answers[1] {
				t.Fatalf("goroutine mode answered\n%s\nevent loops answered\n%s", answers[0], answers[1])
			}
		})
	}
}

func headerText(h http.Header) string {
	var b strings.Builder
	h.Write(&b)
	return b.String()
}

// The Server's hooks run, and subprotocols and compression are
// negotiated, as without loops: the same answers, and the same data and
// subprotocol on the connection.
func TestLoopServeRunsTheHooksAndNegotiatesAsServeWithoutLoops(t *testing.T) {
	who := func(r *http.Request) (any, *Rejection) {
		if r.Header.Get("Authorization") == "" {
			return nil, &Rejection{Status: 401, Header: http.Header{"Www-Authenticate": {"Bearer"}}, Body: "who are you?"}
		}
		return "alice", nil
	}
	authorized := "Authorization: Bearer x"
	for _, tc := range []struct {
		name string
		raw  []byte
		opts AcceptOptions
	}{
		{"Authorize refuses", handshakeBytes("GET"), AcceptOptions{Authorize: who}},
		{"Authorize refuses with a status out of range", handshakeBytes("GET"),
			AcceptOptions{Authorize: func(*http.Request) (any, *Rejection) { return nil, &Rejection{Status: 200} }}},
		{"Authorize attaches data", handshakeBytes("GET", authorized), AcceptOptions{Authorize: who}},
		{"a subprotocol chosen", handshakeBytes("GET", "Sec-WebSocket-Protocol: chat, chat.v2"),
			AcceptOptions{Subprotocols: []string{"chat.v2", "chat"}}},
		{"SelectSubprotocol choosing one not offered", handshakeBytes("GET", "Sec-WebSocket-Protocol: chat"),
			AcceptOptions{SelectSubprotocol: func(*http.Request, []string) string { return "other" }}},
		{"permessage-deflate", handshakeBytes("GET", "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"),
			AcceptOptions{Compression: &CompressionOptions{ServerNoContextTakeover: true}}},
		{"ResponseHeader", handshakeBytes("GET"),
			AcceptOptions{ResponseHeader: func(r *http.Request, h http.Header) { h.Set("X-Node", "a") }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answers [2]string
			for i, loop := range []bool{false, true} {
				opts := tc.opts
				opened := make(chan string, 1)
				s := &Server{EventLoop: loop, EventLoops: 1, Options: &opts,
					Open: func(c *Conn) { opened <- fmt.Sprintf("data %v, subprotocol %q", c.Data(), c.Subprotocol()) }}
				resp, body, _ := exchange(t, serveRaw(t, s), tc.raw)
				answers[i] = resp.Status + "\n" + headerText(resp.Header) + "\n" + body
				if resp.StatusCode == http.StatusSwitchingProtocols {
					answers[i] += "\n" + <-opened
				}
			}
			if answers[0] != answers[1] {
				t.Fatalf("goroutine mode answered\n%s\nevent loops answered\n%s", answers[0], answers[1])
			}
		})
	}
}

// A head still arriving when Shutdown begins is answered when it is
// complete, and its connection told to go at once with 1001; Shutdown
// waits for it.
func TestLoopServeTellsAConnectionWhoseHeadCameDuringShutdownToGo(t *testing.T) {
	reads := watchHeadReads(t)
	s := loopEchoServer(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	nc := dialTCP(t, ln.Addr().String())
	head := handshakeBytes("GET")
	nc.Write(head[:len(head)-2])
	waitHeadRead(t, reads, len(head)-2)
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	nc.Write([]byte("\r\n"))
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v, %v; want 101", resp, err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || got[0] != 0x88 || got[2] != 0x03 || got[3] != 0xe9 {
		t.Fatalf("got % x, %v; want a close frame with 1001", got, err)
	}
	io.ReadFull(br, make([]byte, int(got[1])-2)) // the reason
	nc.Write([]byte{0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe9})
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the close handshake: %v, want the end of the stream", err)
	}
	nc.Close() // the server waits for the client to close TCP first
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
