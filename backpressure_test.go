package rally_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The tests of this file stop a raw peer from reading, so that the
// kernel's socket buffers fill and rally's non-blocking Send has to queue,
// then let it read again. They check what a user sees: the status of each
// send, BufferedAmount, the buffer-limit policy (drop, or close with 1008
// or 1013), OnDrain, and every accepted message arriving whole, in order,
// with its frame type.

// numbered is message seq of a backpressure test: "seq:<n>:" padded with
// the letter of n to size bytes. Every third message is Text, the others
// Binary, so that a frame type lost in the queue shows.
func numbered(seq, size int) (rally.MessageType, []byte) {
	b := []byte("seq:" + strconv.Itoa(seq) + ":")
	if len(b) < size {
		b = append(b, bytes.Repeat([]byte{'a' + byte(seq%26)}, size-len(b))...)
	}
	if seq%3 == 0 {
		return rally.Text, b
	}
	return rally.Binary, b
}

// The rally side of these tests gets a small socket send buffer and the
// peer a small receive buffer, so that the kernel pushes back after a few
// dozen KiB instead of megabytes (both buffers otherwise grow to several
// MiB), and stops taking more soon after the peer stops reading.
const testSocketBuffer = 32 << 10

// smallReceiveBuffer is a net.Dialer's or net.ListenConfig's Control: it
// gives the socket a small receive buffer before it connects or listens
// (accepted sockets inherit their listener's). Set later, on a connected
// socket, the buffer would be smaller than the window already advertised:
// the kernel then prunes what overruns it and the sender retransmits with
// backoff, which made these tests time out under load.
var smallReceiveBuffer = receiveBufferBeforeConnect(testSocketBuffer)

// receiveBufferBeforeConnect is a dialer's or listener's Control that
// gives the socket a receive buffer of size bytes before it connects.
func receiveBufferBeforeConnect(size int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}); err != nil {
			return err
		}
		return serr
	}
}

// dialStalledPeer opens a raw client peer to addr, handshake done (with
// h's extra request lines), whose socket takes little before it pushes
// back. The peer then simply does not read until the test lets it.
func dialStalledPeer(t *testing.T, addr string, h http.Header) *rawpeer.Peer {
	t.Helper()
	d := net.Dialer{Timeout: wireTimeout(), Control: smallReceiveBuffer}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := rawpeer.NewPeer(nc, true)
	p.SetTimeout(wireTimeout())
	t.Cleanup(func() { p.Close() })
	key := rawpeer.NewKey()
	if err := p.WriteRaw(rawpeer.HandshakeRequest(addr, "/", key, h)); err != nil {
		t.Fatalf("raw client handshake: %v", err)
	}
	if _, err := p.ReadResponse(key); err != nil {
		t.Fatalf("raw client handshake: %v", err)
	}
	return p
}

// listenSmallReceive opens a loopback listener, closed when the test
// ends, whose connections' sockets take little before they push back.
func listenSmallReceive(t *testing.T) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: smallReceiveBuffer}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialStalledRaw dials, with rally and opts, a one-connection raw server
// on loopback whose socket takes little before it pushes back, and
// returns the client connection and the server's raw peer.
func dialStalledRaw(t *testing.T, opts *rally.DialOptions) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	ln := listenSmallReceive(t)
	peers := make(chan *rawpeer.Peer, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			peers <- nil
			return
		}
		p, _, err := rawpeer.AcceptServer(nc, nil, wireTimeout())
		if err != nil {
			nc.Close()
			p = nil
		}
		peers <- p
	}()
	c, _, err := rally.Dial(ctxT(t), "ws://"+ln.Addr().String()+"/", opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	p := <-peers
	if p == nil {
		t.Fatal("raw server handshake failed")
	}
	t.Cleanup(func() { p.Close() })
	return c, p
}

// smallSendBuffers gives every connection it accepts a small send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetWriteBuffer(testSocketBuffer)
	}
	return nc, err
}

// serveSmall is serve with small send buffers on the server's side.
func serveSmall(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Listener = smallSendBuffers{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// stalledSides runs f against a server connection (Accept) and a client
// connection (Dial), each with opts and a small send buffer, and a raw
// peer that reads only when f makes it; masked says whether that side's
// frames are masked on the wire.
func stalledSides(t *testing.T, opts rally.ConnOptions, f func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool)) {
	t.Run("Server", func(t *testing.T) {
		conns := make(chan *rally.Conn, 1)
		addr := serveSmall(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, err := rally.Accept(w, r, &rally.AcceptOptions{ConnOptions: opts}); err == nil {
				conns <- c
			}
		}))
		p := dialStalledPeer(t, addr, nil)
		select {
		case c := <-conns:
			t.Cleanup(func() { c.CloseNow() })
			f(t, c, p, false)
		case <-time.After(wireTimeout()):
			t.Fatal("Accept did not return a connection")
		}
	})
	t.Run("Client", func(t *testing.T) {
		var d net.Dialer
		c, p := dialStalledRaw(t, &rally.DialOptions{ConnOptions: opts,
			NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := d.DialContext(ctx, network, addr)
				if tc, ok := nc.(*net.TCPConn); ok {
					tc.SetWriteBuffer(testSocketBuffer)
				}
				return nc, err
			}})
		f(t, c, p, true)
	})
}

// servedStalled starts a Server s (its Open and Close are set here)
// behind small send buffers, connects a raw peer and returns the served
// connection, the peer and what the Server's Close saw.
func servedStalled(t *testing.T, s *rally.Server) (*rally.Conn, *rawpeer.Peer, *recorder) {
	t.Helper()
	rec := newRecorder()
	opened := make(chan *rally.Conn, 1)
	s.Open = func(c *rally.Conn) { opened <- c }
	s.Close = rec.close
	p := dialStalledPeer(t, serveSmall(t, s), nil)
	select {
	case c := <-opened:
		return c, p, rec
	case <-time.After(wireTimeout()):
		t.Fatal("Server.Open was not called")
		return nil, nil, nil
	}
}

// expectNumbered reads one frame and fails unless it is message seq of
// size bytes, final, with its type, masked when the sender is a client.
func expectNumbered(t *testing.T, p *rawpeer.Peer, seq, size int, masked bool) {
	t.Helper()
	f, err := p.ReadFrame()
	if err != nil {
		t.Fatalf("reading message %d: %v", seq, err)
	}
	typ, want := numbered(seq, size)
	if f.Opcode != byte(typ) || !f.Fin || f.Masked != masked || !bytes.Equal(f.Payload, want) {
		got := f.Payload
		if len(got) > 16 {
			got = got[:16]
		}
		t.Fatalf("message %d: opcode %#x fin %v masked %v, %d bytes starting %q; want opcode %#x, fin, masked %v, %d bytes starting %q",
			seq, f.Opcode, f.Fin, f.Masked, len(f.Payload), got, byte(typ), masked, len(want), want[:min(16, len(want))])
	}
}

// drainCounter is an OnDrain that counts its calls and signals each one.
type drainCounter struct {
	n    atomic.Int32
	each chan struct{}
}

func newDrainCounter() *drainCounter { return &drainCounter{each: make(chan struct{}, 16)} }

func (d *drainCounter) onDrain(*rally.Conn) {
	d.n.Add(1)
	d.each <- struct{}{}
}

// waitFor waits until OnDrain has been called n times in all.
func (d *drainCounter) waitFor(t *testing.T, n int32) {
	t.Helper()
	timeout := time.After(wireTimeout())
	for d.n.Load() < n {
		select {
		case <-d.each:
		case <-timeout:
			t.Fatalf("OnDrain called %d times after the peer caught up, want %d", d.n.Load(), n)
		}
	}
}

func TestSendTurnsQueuedWhenThePeerStopsReadingAndEveryMessageArrivesInOrderOnceItReads(t *testing.T) {
	const size = 4 << 10
	const extra = 20 // sends after the first Queued
	drains := map[bool]*drainCounter{false: newDrainCounter(), true: newDrainCounter()}
	var side atomic.Bool // which counter the connection being tested uses
	opts := rally.ConnOptions{BufferLimit: -1, OnDrain: func(c *rally.Conn) { drains[side.Load()].onDrain(c) }}
	stalledSides(t, opts, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
		side.Store(masked)
		drained := drains[masked]
		seq := 0
		for ; ; seq++ {
			if seq > 20_000 {
				t.Fatal("the socket buffers never filled")
			}
			st, err := c.Send(numbered(seq, size))
			if err != nil {
				t.Fatalf("Send %d: %v", seq, err)
			}
			if st == rally.Queued {
				break
			}
			if st != rally.Sent {
				t.Fatalf("Send %d = %v before any backpressure, want sent", seq, st)
			}
			if n := c.BufferedAmount(); n != 0 {
				t.Fatalf("BufferedAmount = %d after Send %d returned sent, want 0", n, seq)
			}
		}
		if n := c.BufferedAmount(); n <= 0 {
			t.Fatalf("BufferedAmount = %d after Send returned queued", n)
		}
		// More sends wait behind the first. Should the kernel take the whole
		// queue meanwhile (on a busy machine the peer's kernel acknowledges
		// late, then frees room at once), a send goes straight out again:
		// that episode of backpressure has ended, and its drain must come;
		// the next Queued starts another. Which one it is cannot be told
		// from BufferedAmount before the Send: the queue may empty between
		// the two calls.
		episodes, queued := 1, true
		for i := 0; i < extra || !queued; i++ {
			if i > 20_000 {
				t.Fatal("the socket buffers never filled again")
			}
			seq++
			st, err := c.Send(numbered(seq, size))
			switch {
			case err != nil || st != rally.Queued && st != rally.Sent:
				t.Fatalf("Send %d behind a queue = %v, %v; want queued", seq, st, err)
			case st == rally.Sent && queued:
				// Sent only if the queue had emptied: OnDrain says so.
				drained.waitFor(t, int32(episodes))
				queued = false
			case st == rally.Queued && (!queued || drained.n.Load() == int32(episodes)):
				episodes++
				queued = true
			}
		}
		if n := c.BufferedAmount(); n <= 0 {
			t.Fatalf("BufferedAmount = %d after %d queued sends", n, extra)
		}
		if n := drained.n.Load(); n >= int32(episodes) {
			t.Fatalf("OnDrain called %d times while the peer was not reading, for %d episodes of backpressure", n, episodes)
		}

		for i := 0; i <= seq; i++ {
			expectNumbered(t, p, i, size, masked)
		}
		drained.waitFor(t, int32(episodes))
		if n := c.BufferedAmount(); n != 0 {
			t.Fatalf("BufferedAmount = %d once drained, want 0", n)
		}
		// The queue is empty again: the next send goes straight out.
		seq++
		if st, err := c.Send(numbered(seq, size)); st != rally.Sent || err != nil {
			t.Fatalf("Send after the drain = %v, %v; want sent", st, err)
		}
		expectNumbered(t, p, seq, size, masked)
		if n := drained.n.Load(); n != int32(episodes) {
			t.Fatalf("OnDrain called %d times for %d episodes of backpressure, want once each", n, episodes)
		}
	})
}

func TestSendPastTheBufferLimitIsDroppedAndTheRestArrivesInOrder(t *testing.T) {
	const size = 1 << 10
	const limit = 64 << 10
	drained := newDrainCounter()
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: limit}},
		Drain:   drained.onDrain,
	}
	c, p, _ := servedStalled(t, s)

	var accepted []int
	queued := false
	seq := 0
	for ; ; seq++ {
		if seq > 100_000 {
			t.Fatal("no send was ever dropped")
		}
		st, err := c.Send(numbered(seq, size))
		if err != nil {
			t.Fatalf("Send %d: %v (a send dropped by the limit has a nil error)", seq, err)
		}
		if n := c.BufferedAmount(); n > limit {
			t.Fatalf("BufferedAmount = %d after Send %d, past the limit of %d", n, seq, limit)
		}
		if st == rally.Dropped {
			if !queued {
				t.Fatalf("Send %d dropped before any send was queued", seq)
			}
			break
		}
		if st == rally.Queued {
			queued = true
		}
		accepted = append(accepted, seq)
	}
	// Whatever is offered now, the queue stays within the limit, and so
	// does the memory behind it. (A message may still be accepted when the
	// kernel took the whole queue meanwhile.)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 64 << 10 { // 64 MiB offered
		seq++
		st, err := c.Send(numbered(seq, size))
		if err != nil {
			t.Fatalf("Send %d: %v", seq, err)
		}
		if st != rally.Dropped {
			accepted = append(accepted, seq)
		}
		if n := c.BufferedAmount(); n > limit {
			t.Fatalf("BufferedAmount = %d past the limit of %d", n, limit)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
		t.Fatalf("the heap grew by %d bytes while 64 MiB were offered to a full queue", grew)
	}
	t.Logf("%d of %d messages accepted", len(accepted), seq+1)

	for _, s := range accepted {
		expectNumbered(t, p, s, size, false)
	}
	drained.waitFor(t, 1)
	// The connection carries on: the next message is the next frame, so no
	// dropped one slipped through.
	seq++
	if st, err := c.Send(numbered(seq, size)); st != rally.Sent || err != nil {
		t.Fatalf("Send after the drain = %v, %v; want sent", st, err)
	}
	expectNumbered(t, p, seq, size, false)
	if n := drained.n.Load(); n < 1 {
		t.Fatalf("OnDrain called %d times, want at least once", n)
	}
}

// A queue of tiny frames is bounded by the memory it holds, not by its
// frames' bytes alone: each waiting record has about 100 bytes of
// bookkeeping (BufferedCost), and the limit counts it. Frames sent with a
// completion (SendDone) keep a record each: 64 KiB of 18-byte frames were
// 3,600 records (390 KB) under a 64 KiB limit before records were
// counted. Frames sent without one (Send, SendPrepared: what a publish
// is) join the record before them while they wait, so the queue of a
// peer that stopped reading costs their bytes: over HTTP/2, where every
// receiver's copy of a small compressed frame is its own, 2,000
// subscribers that did not read once held 2.3 GiB of records under
// their 1 MiB limits, and then paid 88 bytes a publish each until cut.
func TestTheBufferLimitCountsEachWaitingFramesBookkeeping(t *testing.T) {
	const size = 16
	const limit = 64 << 10
	for _, tc := range []struct {
		name string
		done bool
	}{{"Send", false}, {"SendDone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &rally.Server{Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: limit}}}
			c, p, _ := servedStalled(t, s)

			var accepted []int
			dropped := 0
			for seq := 0; seq < 200_000 && dropped < 1000; seq++ {
				var st rally.SendStatus
				var err error
				typ, msg := numbered(seq, size)
				if tc.done {
					st, err = c.SendDone(typ, msg, func(error) {})
				} else {
					st, err = c.Send(typ, msg)
				}
				if err != nil {
					t.Fatalf("Send %d: %v", seq, err)
				}
				if st == rally.Dropped {
					dropped++
				} else {
					accepted = append(accepted, seq)
				}
				if cost := c.BufferedCost(); cost > limit {
					t.Fatalf("BufferedCost = %d after Send %d, past the limit of %d", cost, seq, limit)
				}
			}
			if dropped == 0 {
				t.Fatal("no send was ever dropped")
			}
			amount, cost := c.BufferedAmount(), c.BufferedCost()
			switch {
			case tc.done && (amount > limit/2 || cost <= 2*amount):
				t.Fatalf("a full queue of %d-byte frames sent with completions: BufferedAmount %d, BufferedCost %d; want the bytes under half the limit of %d and the cost more than twice the bytes (a record per frame)",
					size+2, amount, cost, limit)
			case !tc.done && (amount < limit*3/4 || cost > amount+amount/8):
				t.Fatalf("a full queue of %d-byte frames sent without completions: BufferedAmount %d, BufferedCost %d; want the bytes over three quarters of the limit of %d and the cost within an eighth of them (the frames share records)",
					size+2, amount, cost, limit)
			}
			t.Logf("full queue: BufferedAmount %d, BufferedCost %d, %d messages accepted", amount, cost, len(accepted))
			for _, seq := range accepted {
				expectNumbered(t, p, seq, size, false)
			}
		})
	}
}

func TestSendPastTheBufferLimitClosesThePeerWhenThePolicySaysSo(t *testing.T) {
	for _, tc := range []struct {
		name string
		code uint16 // BufferLimitCloseCode
		want uint16
	}{
		{"WithPolicyViolation1008ByDefault", 0, rally.ClosePolicyViolation},
		{"WithTryAgainLater1013", rally.CloseTryAgainLater, rally.CloseTryAgainLater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 1 << 10
			c, p, rec := servedStalled(t, &rally.Server{
				Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
					BufferLimit:          32 << 10,
					BufferLimitAction:    rally.CloseConnection,
					BufferLimitCloseCode: tc.code,
					CloseTimeout:         wireTimeout(),
				}},
			})

			var accepted []int
			for seq := 0; ; seq++ {
				if seq > 100_000 {
					t.Fatal("the limit was never reached")
				}
				st, err := c.Send(numbered(seq, size))
				if st == rally.Dropped {
					if err != nil {
						t.Fatalf("the send that crossed the limit: %v, want a nil error", err)
					}
					break
				}
				accepted = append(accepted, seq)
			}
			st, err := c.Send(rally.Text, []byte("after the limit"))
			if st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
				t.Fatalf("Send once the limit closed the connection = %v, %v; want dropped, ErrClosed", st, err)
			}

			// What was accepted still leaves, then the close frame.
			for _, s := range accepted {
				expectNumbered(t, p, s, size, false)
			}
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatalf("reading the close frame: %v", err)
			}
			code, reason, ok := rawpeer.ParseClose(f.Payload)
			if f.Opcode != rawpeer.OpClose || !ok || code != tc.want {
				t.Fatalf("after the accepted messages: opcode %#x body %x, want a close frame with %d", f.Opcode, f.Payload, tc.want)
			}
			checkCloseFrame(t, f)
			t.Logf("close reason: %q", reason)
			if err := p.WriteFrame(rawpeer.Close(tc.want, "")); err != nil {
				t.Fatal(err)
			}
			p.ExpectEOF(t) // the server closes TCP first (RFC 6455 7.1.1)
			p.Close()
			if ce := rec.waitClose(t); ce.Code != tc.want {
				t.Fatalf("Server.Close got code %d, want %d", ce.Code, tc.want)
			}
		})
	}
}

func TestCloseAfterQueuedSendsSendsTheCloseFrameBehindThem(t *testing.T) {
	const size = 4 << 10
	c, p, rec := servedStalled(t, &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1, CloseTimeout: wireTimeout()}},
	})
	seq := 0
	for ; ; seq++ {
		if seq > 20_000 {
			t.Fatal("the socket buffers never filled")
		}
		if st, err := c.Send(numbered(seq, size)); err != nil || st == rally.Dropped {
			t.Fatalf("Send %d = %v, %v", seq, st, err)
		} else if st == rally.Queued {
			break
		}
	}
	if err := c.Close(rally.CloseNormal, "bye"); err != nil {
		t.Fatalf("Close on a served connection: %v", err)
	}
	if st, err := c.Send(rally.Text, []byte("too late")); st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
		t.Fatalf("Send after Close = %v, %v; want dropped, ErrClosed", st, err)
	}
	for i := 0; i <= seq; i++ {
		expectNumbered(t, p, i, size, false)
	}
	wantWire(t, p, "88 05 03 e8 62 79 65") // close 1000 "bye"
	if err := p.WriteFrame(rawpeer.Close(rally.CloseNormal, "")); err != nil {
		t.Fatal(err)
	}
	p.ExpectEOF(t)
	p.Close()
	if ce := rec.waitClose(t); ce.Code != rally.CloseNormal {
		t.Fatalf("Server.Close got %v, want code 1000", ce)
	}
}
