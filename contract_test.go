package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The tests of this file each reproduce one way the write side broke its
// contract (issue #12), through the public API and on the wire, as a user
// would meet it. Each failed on the engine before the send queue, the
// transport seam and the callback invoker.

// quietWait is how long a test lets pass to see that something that must
// not happen does not: a Write that must stay blocked while the peer does
// not read. It never decides a test by itself passing quickly.
const quietWait = 500 * time.Millisecond

// waitUntil polls cond, a state only observable by asking (BufferedAmount),
// until it holds, and fails the test naming what was awaited after
// wireTimeout.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wireTimeout())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// acceptStalled is acceptConnWith behind a small send buffer on rally's
// side and a small receive buffer on the peer's, so that the kernel pushes
// back after a few dozen KiB while the peer does not read.
func acceptStalled(t *testing.T, opts *rally.AcceptOptions, h http.Header) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	conns := make(chan *rally.Conn, 1)
	addr := serveSmall(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := rally.Accept(w, r, opts); err == nil {
			conns <- c
		}
	}))
	p := dialStalledPeer(t, addr, h)
	select {
	case c := <-conns:
		t.Cleanup(func() { c.CloseNow() })
		return c, p
	case <-time.After(wireTimeout()):
		t.Fatal("Accept did not return a connection")
		return nil, nil
	}
}

// readInBackground reads c until it ends, so that pings are answered and
// close frames seen, and returns the error that ended it on the channel.
func readInBackground(c *rally.Conn) <-chan error {
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

// readData reads one frame and fails unless it is a data frame of opcode
// op, with fin as given, carrying want.
func readData(t *testing.T, p *rawpeer.Peer, what string, op byte, fin bool, want []byte) {
	t.Helper()
	f, err := p.ReadFrame()
	if err != nil {
		t.Fatalf("reading %s: %v", what, err)
	}
	if f.Opcode != op || f.Fin != fin || !bytes.Equal(f.Payload, want) {
		t.Fatalf("reading %s: got %s, want opcode %#x fin %v with %d bytes", what, describe(f), op, fin, len(want))
	}
}

func TestWriteReturnsOnlyAfterItsFrameLeftWhenAPongOvertakesIt(t *testing.T) {
	const queued, big = 1 << 20, 8 << 20
	for _, streamed := range []bool{false, true} {
		name := "Write"
		if streamed {
			name = "Writer"
		}
		t.Run(name, func(t *testing.T) {
			c, p := acceptStalled(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}}, nil)
			readInBackground(c)
			first := bytes.Repeat([]byte{'q'}, queued)
			if st, err := c.Send(rally.Binary, first); st != rally.Queued {
				t.Fatalf("setup: a 1 MiB Send to a peer that does not read got %v, %v; want queued", st, err)
			}
			type result struct {
				err  error
				left int // BufferedAmount when the blocking call returned
			}
			returned := make(chan result, 1)
			payload := bytes.Repeat([]byte{'w'}, big)
			// No deadline on the blocking call: it lasts as long as the
			// peer takes to read 8 MiB on this machine, and the peer's
			// reads bound the wait (each fails after wireTimeout without
			// a byte).
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() {
				if !streamed {
					err := c.Write(ctx, rally.Binary, payload)
					returned <- result{err, c.BufferedAmount()}
					return
				}
				w, err := c.Writer(ctx, rally.Binary)
				if err == nil {
					_, err = w.Write(payload) // one fragment, sent directly
					left := c.BufferedAmount()
					w.Close()
					returned <- result{err, left}
					return
				}
				returned <- result{err, c.BufferedAmount()}
			}()
			waitUntil(t, "the big frame is queued behind the 1 MiB Send", func() bool { return c.BufferedAmount() > big })
			if err := p.WriteFrame(rawpeer.Ping([]byte("overtake"))); err != nil {
				t.Fatal(err)
			}
			// The peer reads the 1 MiB message and the pong put after it,
			// then stops reading: the big frame cannot all be in the kernel.
			readData(t, p, "the queued Send", rawpeer.OpBinary, true, first)
			f, err := p.ReadFrame()
			if err != nil || f.Opcode != rawpeer.OpPong || string(f.Payload) != "overtake" {
				t.Fatalf("after the queued Send: got %s, %v; want the pong", describe(f), err)
			}
			var early *result
			select {
			case r := <-returned:
				early = &r
			case <-time.After(quietWait):
			}
			if early != nil && early.err == nil {
				t.Errorf("%s returned nil while %d bytes were still waiting (BufferedAmount) and the peer was not reading", name, early.left)
			}
			readData(t, p, "the big frame", rawpeer.OpBinary, !streamed, payload)
			if streamed {
				readData(t, p, "the Writer's last fragment", rawpeer.OpContinuation, true, []byte{})
			}
			if early == nil {
				select {
				case r := <-returned:
					if r.err != nil || r.left != 0 {
						t.Errorf("%s returned %v with BufferedAmount %d once the peer read it all; want nil, 0", name, r.err, r.left)
					}
				case <-time.After(wireTimeout()):
					t.Fatalf("%s did not return once the peer had read its frame", name)
				}
			}
		})
	}
}

// A Close while a Writer streams does not wait for the message: the close
// frame follows the fragment already sent, nothing follows it (not the
// Send held for the message's end, not the Writer's last fragment), the
// held Send's completion reports ErrClosed, and the Writer's Close fails.
func TestNoDataFrameLeavesAfterTheCloseFrame(t *testing.T) {
	c, p := acceptConn(t, nil)
	ctx := ctxT(t)
	w, err := c.Writer(ctx, rally.Text)
	if err != nil {
		t.Fatal(err)
	}
	part := bytes.Repeat([]byte{'a'}, 40<<10) // larger than the Writer's buffer: one fragment now
	if _, err := w.Write(part); err != nil {
		t.Fatal(err)
	}
	completed := make(chan error, 1)
	st, err := c.SendDone(rally.Text, []byte("held"), func(err error) { completed <- err })
	if st != rally.Queued || err != nil {
		t.Fatalf("SendDone during the stream = %v, %v; want queued", st, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close(rally.CloseNormal, "bye") }()
	readData(t, p, "the Writer's fragment", rawpeer.OpText, false, part)
	p.ExpectClose(t, rally.CloseNormal)
	if err := w.Close(); !errors.Is(err, rally.ErrClosed) {
		t.Errorf("Writer.Close after Close = %v, want ErrClosed", err)
	}
	if err := p.WriteFrame(rawpeer.Close(rally.CloseNormal, "")); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := p.ReadFrame()
		if err != nil {
			if !rawpeer.IsClosedByPeer(err) {
				t.Fatalf("waiting for the end after the close frame: %v", err)
			}
			break
		}
		t.Errorf("after the close frame the peer read %s", describe(f))
	}
	p.NetConn().Close() // the server closed first; the client closes now (RFC 6455 7.1.1)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(wireTimeout()):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-completed:
		if !errors.Is(err, rally.ErrClosed) {
			t.Errorf("SendDone's completion reported %v for %q, which never left before the close frame; want ErrClosed", err, "held")
		}
	case <-time.After(wireTimeout()):
		t.Error("SendDone returned queued but its completion was never called")
	}
}

// A Write compressed with context takeover can never be taken back (the
// compressor's history holds it): cancelling it fails the connection. The
// peer never gets a message that inflates to something else.
func TestCancelledWriteDoesNotCorruptContextTakeover(t *testing.T) {
	c, p := acceptStalled(t, &rally.AcceptOptions{
		Compression: &rally.CompressionOptions{},
		ConnOptions: rally.ConnOptions{BufferLimit: -1},
	}, extHeader("permessage-deflate"))
	fill := noise(12, 512<<10) // does not compress: fills the socket buffers
	if st, err := c.Send(rally.Binary, fill); st != rally.Queued {
		t.Fatalf("setup: a 512 KiB Send to a peer that does not read got %v, %v; want queued", st, err)
	}
	a := jsonish(7, 4<<10)
	b := bytes.Clone(a) // the compressor refers to a's bytes to send b
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	errA := c.Write(cancelled, rally.Text, a)
	stB, errB := c.Send(rally.Text, b)
	t.Logf("Write with a cancelled context: %v; Send after it: %v, %v", errA, stB, errB)

	in := &oracleInflater{takeover: true}
	next := func(what string) (rawpeer.Frame, []byte, bool) {
		f, err := p.ReadFrame()
		if err != nil {
			if rawpeer.IsClosedByPeer(err) {
				return f, nil, false
			}
			t.Fatalf("reading %s: %v", what, err)
		}
		if f.Opcode == rawpeer.OpClose {
			return f, nil, false
		}
		if f.Rsv&rawpeer.Rsv1 == 0 {
			return f, f.Payload, true
		}
		out, err := in.inflate(f.Payload)
		if err != nil {
			t.Fatalf("%s does not inflate with the messages the peer received before it: %v", what, err)
		}
		return f, out, true
	}
	if errA != nil && !errors.Is(errA, context.Canceled) {
		t.Fatalf("Write with a cancelled context: %v, want an error wrapping context.Canceled", errA)
	}
	failed := errA != nil && strings.Contains(errA.Error(), "connection closed")
	if !failed {
		t.Fatalf("a cancelled Write compressed with context takeover returned %v; want the connection failed (it cannot be taken back)", errA)
	}
	if stB != rally.Dropped || !errors.Is(errB, rally.ErrClosed) {
		t.Fatalf("Send after the failed connection = %v, %v; want dropped, ErrClosed", stB, errB)
	}
	// What the peer still reads (part of the 512 KiB message at most) is
	// never a message inflating to something else.
	if _, out, ok := next("the first message"); ok && !bytes.Equal(out, fill) {
		t.Fatalf("the first message arrived changed")
	}
	_, out, ok := next("the message after the first")
	if ok && errA == nil && !bytes.Equal(out, a) {
		t.Fatalf("Write returned nil, but the next message inflates to %d bytes %.20q, not the Write's", len(out), out)
	}
	if ok && errA == nil {
		_, out, ok = next("the Send after the Write")
	}
	if stB == rally.Dropped {
		return
	}
	if !ok {
		t.Fatalf("the Send after the cancelled Write returned %v, %v, but the connection ended before it arrived", stB, errB)
	}
	if !bytes.Equal(out, b) {
		t.Fatalf("the Send after the cancelled Write (%v) inflates to %d bytes starting %.20q, not to what was sent: the compressed stream refers to bytes the peer never received", errA, len(out), out)
	}
}

func TestAutomaticCorkDoesNotCountAgainstBufferLimit(t *testing.T) {
	const size = 700_000
	statuses := make(chan string, 1)
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimitAction: rally.CloseConnection}},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			var got []string
			for i := range 2 {
				st, err := c.Send(rally.Binary, bytes.Repeat([]byte{'a' + byte(i)}, size))
				got = append(got, fmt.Sprint(st, err))
			}
			statuses <- strings.Join(got, ", ")
		},
	}
	p := dialPeer(t, serve(t, s))
	if err := p.WriteFrame(rawpeer.Text("go")); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case got = <-statuses:
	case <-time.After(wireTimeout()):
		t.Fatal("the Message callback did not run")
	}
	if got != "sent <nil>, sent <nil>" && got != "sent <nil>, queued <nil>" {
		t.Errorf("two 700 KB Sends from a callback to a fast peer (BufferLimit 1 MiB): %s; want both accepted", got)
	}
	for i := range 2 {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("reading message %d: %v", i, err)
		}
		if f.Opcode != rawpeer.OpBinary || !bytes.Equal(f.Payload, bytes.Repeat([]byte{'a' + byte(i)}, size)) {
			t.Fatalf("message %d: got %s (Sends: %s)", i, describe(f), got)
		}
	}
}

func TestCorkHoldsOnlyTheCallbacksOwnSends(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	inCallback := make(chan *rally.Conn, 1)
	s := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		inCallback <- c
		<-release
	}}
	p := dialPeer(t, serve(t, s))
	if err := p.WriteFrame(rawpeer.Text("hold the callback")); err != nil {
		t.Fatal(err)
	}
	var c *rally.Conn
	select {
	case c = <-inCallback:
	case <-time.After(wireTimeout()):
		t.Fatal("the Message callback did not run")
	}
	st, err := c.Send(rally.Text, []byte("from another goroutine"))
	if st != rally.Sent || err != nil {
		t.Fatalf("Send from another goroutine to a fast peer: %v, %v; want sent", st, err)
	}
	f, err := p.ReadFrame()
	if err != nil {
		t.Fatalf("a Send from another goroutine reported sent but did not reach the peer while a callback ran: %v", err)
	}
	if f.Opcode != rawpeer.OpText || string(f.Payload) != "from another goroutine" {
		t.Fatalf("got %s", describe(f))
	}
}

func TestCloseFromPingHookOfReadDrivenConnReturnsPromptly(t *testing.T) {
	for _, hook := range []string{"OnPing", "OnPong"} {
		t.Run(hook, func(t *testing.T) {
			closed := make(chan error, 1)
			closeFromHook := func(c *rally.Conn, _ []byte) { closed <- c.Close(rally.CloseNormal, "from the hook") }
			o := rally.ConnOptions{CloseTimeout: 2 * time.Second}
			trigger := rawpeer.Ping([]byte("p"))
			if hook == "OnPing" {
				o.OnPing = closeFromHook
			} else {
				o.OnPong = closeFromHook
				trigger = rawpeer.Pong([]byte("p"))
			}
			c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: o})
			readInBackground(c)
			if err := p.WriteFrame(trigger); err != nil {
				t.Fatal(err)
			}
			p.ExpectClose(t, rally.CloseNormal)
			if err := p.WriteFrame(rawpeer.Close(rally.CloseNormal, "")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-closed:
				var ce *rally.CloseError
				if errors.As(err, &ce) && ce.Code == rally.CloseAbnormal {
					t.Errorf("Close from the %s hook returned %v, though the peer answered the close at once", hook, err)
				}
			case <-time.After(wireTimeout()):
				t.Fatalf("Close from the %s hook did not return", hook)
			}
		})
	}
}

func TestSendDoneReportsAFailureOnce(t *testing.T) {
	c, p := acceptConn(t, nil)
	tc, ok := p.NetConn().(*net.TCPConn)
	if !ok {
		t.Fatal("the peer is not on TCP")
	}
	tc.SetLinger(0) // closing sends a reset
	p.Close()
	checkReportedOnce(t, c, sendDoneUntilDropped(c, 100))
}

// sendCall is one SendDone and what became of it.
type sendCall struct {
	st    rally.SendStatus
	err   error
	dones atomic.Int32
	last  atomic.Value
}

// sendDoneUntilDropped sends up to n messages with SendDone, stopping at
// the first that is dropped.
func sendDoneUntilDropped(c *rally.Conn, n int) []*sendCall {
	var calls []*sendCall
	for i := range n {
		k := &sendCall{}
		calls = append(calls, k)
		k.st, k.err = c.SendDone(rally.Binary, []byte(fmt.Sprint("message ", i)), func(err error) {
			k.dones.Add(1)
			k.last.Store(fmt.Sprint(err))
		})
		if k.st == rally.Dropped {
			break
		}
	}
	return calls
}

// checkReportedOnce waits for c to end and checks that every send's fate
// was reported once: a dropped one by SendDone's result alone, any other
// by exactly one completion.
func checkReportedOnce(t *testing.T, c *rally.Conn, calls []*sendCall) {
	t.Helper()
	waitDone(t, c)
	for i, k := range calls {
		deadline := time.Now().Add(wireTimeout())
		for k.st != rally.Dropped && k.dones.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // a completion run by the flusher may come a moment after Done
		}
		n := k.dones.Load()
		switch {
		case k.st == rally.Dropped && n != 0:
			t.Errorf("SendDone %d returned %v, %v and its completion also reported %v", i, k.st, k.err, k.last.Load())
		case k.st != rally.Dropped && n != 1:
			t.Errorf("SendDone %d returned %v, %v and its completion ran %d times", i, k.st, k.err, n)
		}
	}
}

// Found by the model-based test: after the peer reset the connection, a
// client's SendDone returned Dropped with the error and its completion
// reported the same failure (TestSendDoneReportsAFailureOnce is a server).
func TestClientSendDoneReportsAFailureOnce(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "TCP"
		if overTLS {
			name = "TLS"
		}
		t.Run(name, func(t *testing.T) { clientSendDoneAfterReset(t, overTLS) })
	}
}

func clientSendDoneAfterReset(t *testing.T, overTLS bool) {
	ln := listen(t)
	peers := make(chan *rawpeer.Peer, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			peers <- nil
			return
		}
		if overTLS {
			nc = tls.Server(nc, modelTLS())
		}
		p, _, err := rawpeer.AcceptServer(nc, nil, wireTimeout())
		if err != nil {
			p = nil
		}
		peers <- p
	}()
	scheme := "ws://"
	if overTLS {
		scheme = "wss://"
	}
	c, _, err := rally.Dial(ctxT(t), scheme+ln.Addr().String()+"/", &rally.DialOptions{
		TLSConfig:   &tls.Config{InsecureSkipVerify: true},
		Compression: &rally.CompressionOptions{Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	p := <-peers
	if p == nil {
		t.Fatal("raw server handshake failed")
	}
	tcpOf(p.NetConn()).SetLinger(0) // closing sends a reset
	p.Close()
	checkReportedOnce(t, c, sendDoneUntilDropped(c, 200))
}

// Found while reproducing a hang the model met over TLS: CloseNow on a TLS
// client whose peer does not read waited for the socket to take bytes that
// would never be read (its close flushed on the socket a blocked flush
// held). The issue suspected up to 5 s; it waited until the peer went.
func TestCloseNowOverTLSReturnsWhileThePeerDoesNotRead(t *testing.T) {
	ln := listenSmallReceive(t)
	peers := make(chan *rawpeer.Peer, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			peers <- nil
			return
		}
		p, _, err := rawpeer.AcceptServer(tls.Server(nc, modelTLS()), nil, wireTimeout())
		if err != nil {
			p = nil
		}
		peers <- p
	}()
	var d net.Dialer
	c, _, err := rally.Dial(ctxT(t), "wss://"+ln.Addr().String()+"/", &rally.DialOptions{
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, network, addr)
			if err == nil {
				nc.(*net.TCPConn).SetWriteBuffer(testSocketBuffer)
			}
			return nc, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := <-peers
	if p == nil {
		t.Fatal("raw TLS server handshake failed")
	}
	defer p.Close() // lets a stuck CloseNow go, so that the test ends
	readInBackground(c)
	// Fill the queue to its limit, then a Write whose context ends while
	// it waits: the socket is full and a blocking flush holds it.
	for i := 0; ; i++ {
		st, err := c.Send(rally.Binary, bytes.Repeat([]byte{'x'}, 8000))
		if err != nil {
			t.Fatalf("setup: Send %d: %v, %v", i, st, err)
		}
		if st == rally.Dropped {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
	defer cancel()
	if err := c.Write(ctx, rally.Text, []byte("late")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("setup: Write behind a full queue with a 2 ms context: %v", err)
	}
	// A ping the reader answers: the pong joins the full queue.
	if err := p.WriteFrame(rawpeer.Ping([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.CloseNow() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("CloseNow: %v", err)
		}
	case <-time.After(wireTimeout()):
		t.Errorf("CloseNow over TLS did not return while the peer did not read (BufferedAmount %d)", c.BufferedAmount())
	}
}
