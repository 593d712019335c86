package rally_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// The tests of this file pin the non-blocking send from the outside:
// completions (SendDone), many goroutines sending at once, a send while a
// Writer streams, Cork and JoinCork, and arguments checked at the call.
//
// Where a test counts system calls, the connection runs over a
// SOCK_SEQPACKET Unix socket instead of TCP: rally takes the same path
// there (non-blocking writes on the socket), and the socket keeps the
// boundaries of each write, so every Read of the peer returns exactly what
// one write of rally's carried.

// packetServe serves h on a SOCK_SEQPACKET Unix socket and returns its path.
func packetServe(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rally") // short: a socket path has at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unixpacket", path)
	if err != nil {
		t.Skipf("SOCK_SEQPACKET Unix sockets are not available: %v", err)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	return path
}

// packetDial opens a client connection to the packet server at path and
// does the opening handshake. Nothing is sent before the 101 has arrived,
// so the whole stream after it is WebSocket frames, one write per record.
func packetDial(t *testing.T, path string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("unixpacket", path, wireTimeout())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	p := rawpeer.NewPeer(nc, true)
	p.SetTimeout(wireTimeout())
	key := rawpeer.NewKey()
	if err := p.WriteRaw(rawpeer.HandshakeRequest("localhost", "/", key, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadResponse(key); err != nil {
		t.Fatalf("handshake over a packet socket: %v", err)
	}
	return nc
}

// packetConn accepts one connection on a packet socket and returns the
// server's end and the client's socket.
func packetConn(t *testing.T, opts *rally.AcceptOptions) (*rally.Conn, net.Conn) {
	t.Helper()
	conns := make(chan *rally.Conn, 4)
	path := packetServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := rally.Accept(w, r, opts); err == nil {
			conns <- c
		}
	}))
	nc := packetDial(t, path)
	select {
	case c := <-conns:
		t.Cleanup(func() { c.CloseNow() })
		return c, nc
	case <-time.After(wireTimeout()):
		t.Fatal("Accept did not return a connection")
		return nil, nil
	}
}

// readWrite reads what one write of the server carried and returns the
// payloads of its frames, written "text:..." or "binary:...".
func readWrite(t *testing.T, nc net.Conn) []string {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(wireTimeout()))
	buf := make([]byte, 1<<20)
	n, err := nc.Read(buf)
	if err != nil {
		t.Fatalf("reading one write: %v", err)
	}
	var out []string
	for b := buf[:n]; len(b) > 0; {
		f, rest, err := cutFrame(b)
		if err != nil {
			t.Fatalf("write %x: %v", buf[:n], err)
		}
		out = append(out, describe(f))
		b = rest
	}
	return out
}

// cutFrame parses the unmasked, final frame at the start of b (RFC 6455
// 5.2), for frames a server sent.
func cutFrame(b []byte) (rawpeer.Frame, []byte, error) {
	if len(b) < 2 {
		return rawpeer.Frame{}, nil, errors.New("a frame cut short in its header")
	}
	f := rawpeer.Frame{Fin: b[0]&0x80 != 0, Opcode: b[0] & 0x0f, Masked: b[1]&0x80 != 0}
	n, hl := uint64(b[1]&0x7f), 2
	switch n {
	case 126:
		hl = 4
	case 127:
		hl = 10
	}
	if f.Masked || len(b) < hl {
		return f, nil, errors.New("a masked frame, or a header cut short")
	}
	switch hl {
	case 4:
		n = uint64(binary.BigEndian.Uint16(b[2:4]))
	case 10:
		n = binary.BigEndian.Uint64(b[2:10])
	}
	if uint64(len(b)-hl) < n {
		return f, nil, fmt.Errorf("a frame of %d bytes with %d left in the write", n, len(b)-hl)
	}
	f.Payload = b[hl : hl+int(n)]
	return f, b[hl+int(n):], nil
}

func describe(f rawpeer.Frame) string {
	kind := fmt.Sprintf("opcode%#x", f.Opcode)
	switch f.Opcode {
	case rawpeer.OpText:
		kind = "text"
	case rawpeer.OpBinary:
		kind = "binary"
	case rawpeer.OpClose:
		kind = "close"
	}
	if !f.Fin {
		kind += "(no fin)"
	}
	return kind + ":" + string(f.Payload)
}

func TestCorkSendsWhatWasSentDuringItInOneWrite(t *testing.T) {
	c, nc := packetConn(t, nil)
	// Without a cork, each send is its own write.
	for _, m := range []string{"a", "b", "c"} {
		if st, err := c.Send(rally.Text, []byte(m)); st != rally.Sent || err != nil {
			t.Fatalf("Send %q = %v, %v", m, st, err)
		}
	}
	for _, m := range []string{"a", "b", "c"} {
		if got := readWrite(t, nc); !slices.Equal(got, []string{"text:" + m}) {
			t.Fatalf("uncorked write = %q, want just %q", got, "text:"+m)
		}
	}

	var want []string
	c.Cork(func() {
		waiting := 0
		for i := range 10 {
			typ, m := rally.Text, fmt.Sprintf("m%d", i)
			if i%2 == 1 {
				typ = rally.Binary
			}
			st, err := c.Send(typ, []byte(m))
			if st != rally.Sent || err != nil {
				t.Errorf("Send %q inside a cork = %v, %v; want sent (it joins the batch)", m, st, err)
			}
			want = append(want, typ.String()+":"+m)
			waiting += 2 + len(m)
			if n := c.BufferedAmount(); n != waiting {
				t.Errorf("BufferedAmount inside the cork = %d, want %d (the batch waits)", n, waiting)
			}
		}
	})
	if n := c.BufferedAmount(); n != 0 {
		t.Fatalf("BufferedAmount = %d once the cork ended, want 0", n)
	}
	if got := readWrite(t, nc); !slices.Equal(got, want) {
		t.Fatalf("the corked batch arrived as the write %q, want one write %q", got, want)
	}
}

func TestWriteInsideACorkFlushesWhatWasGatheredFirst(t *testing.T) {
	c, nc := packetConn(t, nil)
	ctx := ctxT(t)
	c.Cork(func() {
		c.Send(rally.Text, []byte("a"))
		c.Send(rally.Text, []byte("b"))
		if err := c.Write(ctx, rally.Binary, []byte("c")); err != nil {
			t.Errorf("Write inside a cork: %v", err)
		}
		c.Send(rally.Text, []byte("d"))
	})
	// a and b leave together, before c; d waits for the end of the cork.
	var writes [][]string
	for n := 0; n < 4; {
		w := readWrite(t, nc)
		writes = append(writes, w)
		n += len(w)
	}
	want := [][]string{{"text:a", "text:b"}, {"binary:c"}, {"text:d"}}
	if !slices.EqualFunc(writes, want, slices.Equal) {
		t.Fatalf("writes %q, want %q", writes, want)
	}
}

func TestJoinCorkHoldsSendsUntilTheOriginsCorkEnds(t *testing.T) {
	conns := make(chan *rally.Conn, 2)
	path := packetServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := rally.Accept(w, r, nil); err == nil {
			conns <- c
		}
	}))
	var cs [2]*rally.Conn
	var ncs [2]net.Conn
	for i := range cs {
		ncs[i] = packetDial(t, path)
		select {
		case cs[i] = <-conns:
			t.Cleanup(func() { cs[i].CloseNow() })
		case <-time.After(wireTimeout()):
			t.Fatal("Accept did not return a connection")
		}
	}
	origin, other := cs[0], cs[1]

	if other.JoinCork(origin) {
		t.Fatal("JoinCork reported joining an origin that is not corked")
	}
	if other.JoinCork(other) || other.JoinCork(nil) {
		t.Fatal("JoinCork joined itself or nil")
	}
	other.Send(rally.Text, []byte("alone"))
	if got := readWrite(t, ncs[1]); !slices.Equal(got, []string{"text:alone"}) {
		t.Fatalf("send after a JoinCork that did nothing: write %q", got)
	}

	origin.Cork(func() {
		if !other.JoinCork(origin) {
			t.Error("JoinCork inside the origin's cork = false")
		}
		if !other.JoinCork(origin) {
			t.Error("a second JoinCork in the same batch = false")
		}
		for _, m := range []string{"x", "y", "z"} {
			if st, err := other.Send(rally.Binary, []byte(m)); st != rally.Sent || err != nil {
				t.Errorf("Send %q on a joined connection = %v, %v", m, st, err)
			}
			origin.Send(rally.Text, []byte("o"+m))
		}
		if n := other.BufferedAmount(); n != 9 {
			t.Errorf("BufferedAmount of the joined connection = %d inside the batch, want 9", n)
		}
	})
	if got, want := readWrite(t, ncs[1]), []string{"binary:x", "binary:y", "binary:z"}; !slices.Equal(got, want) {
		t.Fatalf("joined connection: write %q, want one write %q", got, want)
	}
	if got, want := readWrite(t, ncs[0]), []string{"text:ox", "text:oy", "text:oz"}; !slices.Equal(got, want) {
		t.Fatalf("origin: write %q, want one write %q", got, want)
	}
}

func TestServerSendsWhatItsCallbacksSendForOneReadBatchInOneWrite(t *testing.T) {
	s := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Send(typ, append([]byte("echo "), p...))
		c.Send(rally.Binary, p)
	}}
	nc := packetDial(t, packetServe(t, s))
	var batch []byte
	for _, m := range []string{"1", "2", "3"} {
		batch = append(batch, rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte(m)})...)
	}
	if _, err := nc.Write(batch); err != nil { // one record: one read batch
		t.Fatal(err)
	}
	want := []string{"text:echo 1", "binary:1", "text:echo 2", "binary:2", "text:echo 3", "binary:3"}
	if got := readWrite(t, nc); !slices.Equal(got, want) {
		t.Fatalf("answers to one batch of three messages came as the write %q, want one write %q", got, want)
	}
}

// completions records the calls of SendDone's done functions, by message.
type completions struct {
	mu    sync.Mutex
	calls map[int][]error
	order []int
	each  chan struct{}
}

func newCompletions() *completions {
	return &completions{calls: map[int][]error{}, each: make(chan struct{}, 1<<16)}
}

func (cs *completions) done(seq int) func(error) {
	return func(err error) {
		cs.mu.Lock()
		cs.calls[seq] = append(cs.calls[seq], err)
		cs.order = append(cs.order, seq)
		cs.mu.Unlock()
		cs.each <- struct{}{}
	}
}

// waitFor waits until n completions have been called in all.
func (cs *completions) waitFor(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(wireTimeout())
	for {
		cs.mu.Lock()
		got := len(cs.order)
		cs.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-cs.each:
		case <-timeout:
			t.Fatalf("%d completions called, want %d", got, n)
		}
	}
}

// check fails unless the completion of every message in seqs was called
// exactly once, those of the other messages never, and returns the errors
// in the order of seqs.
func (cs *completions) check(t *testing.T, seqs []int) []error {
	t.Helper()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	errs := make([]error, len(seqs))
	for i, s := range seqs {
		if n := len(cs.calls[s]); n != 1 {
			t.Fatalf("the completion of message %d was called %d times, want once", s, n)
		}
		errs[i] = cs.calls[s][0]
	}
	if len(cs.order) != len(seqs) {
		t.Fatalf("%d completions called, want %d: %v", len(cs.order), len(seqs), cs.order)
	}
	return errs
}

// fillWithSendDone sends numbered messages with completions until one is
// queued, then extra more; it returns the messages accepted.
func fillWithSendDone(t *testing.T, c *rally.Conn, cs *completions, size, extra int) []int {
	t.Helper()
	var seqs []int
	queued := -1
	for seq := 0; queued < 0 || seq <= queued+extra; seq++ {
		if seq > 20_000 {
			t.Fatal("the socket buffers never filled")
		}
		typ, p := numbered(seq, size)
		st, err := c.SendDone(typ, p, cs.done(seq))
		if err != nil || st == rally.Dropped {
			t.Fatalf("SendDone %d = %v, %v", seq, st, err)
		}
		if st == rally.Queued && queued < 0 {
			queued = seq
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

func TestSendDoneReportsNilOnceForEachFrameInTheOrderTheyReachTheKernel(t *testing.T) {
	const size = 4 << 10
	stalledSides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
		cs := newCompletions()
		seqs := fillWithSendDone(t, c, cs, size, 20)
		for _, s := range seqs {
			expectNumbered(t, p, s, size, masked)
		}
		cs.waitFor(t, len(seqs))
		for i, err := range cs.check(t, seqs) {
			if err != nil {
				t.Fatalf("completion of message %d: %v, want nil", seqs[i], err)
			}
		}
		if !slices.IsSorted(cs.order) {
			t.Fatalf("completions called in the order %v, want the order of the sends", cs.order)
		}
	})
}

func TestSendDoneReportsWhyQueuedFramesNeverLeftWhenTheConnectionDies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kill   func(c *rally.Conn, p *rawpeer.Peer)
		closed bool // the error is ErrClosed
	}{
		{"ClosedByThisSide", func(c *rally.Conn, _ *rawpeer.Peer) { c.CloseNow() }, true},
		{"ResetByThePeer", func(_ *rally.Conn, p *rawpeer.Peer) { p.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stalledSides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, _ bool) {
				cs := newCompletions()
				seqs := fillWithSendDone(t, c, cs, 4<<10, 20)
				tc.kill(c, p)
				waitDone(t, c)
				cs.waitFor(t, len(seqs))
				errs := cs.check(t, seqs)
				// The frames that left are a prefix of the sends: nil for
				// them, then an error for each of the rest.
				failed := slices.IndexFunc(errs, func(err error) bool { return err != nil })
				if failed < 0 {
					t.Fatal("every completion reported nil, though the peer read nothing")
				}
				for i, err := range errs[failed:] {
					if err == nil {
						t.Fatalf("completion of message %d: nil after message %d failed", seqs[failed+i], seqs[failed])
					}
					if tc.closed && !errors.Is(err, rally.ErrClosed) {
						t.Fatalf("completion of message %d: %v, want ErrClosed", seqs[failed+i], err)
					}
				}
				t.Logf("%d frames left before the end, %d never did: %v", failed, len(errs)-failed, errs[failed])
				if st, err := c.SendDone(rally.Text, []byte("after"), cs.done(-1)); st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
					t.Fatalf("SendDone after the end = %v, %v; want dropped, ErrClosed", st, err)
				}
				cs.check(t, seqs) // the dropped send's completion is never called
			})
		})
	}
}

func TestSendDoneNeverCallsTheCompletionOfADroppedSend(t *testing.T) {
	stalledSides(t, rally.ConnOptions{BufferLimit: 16 << 10}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, _ bool) {
		cs := newCompletions()
		var accepted []int
		dropped := 0
		for seq := 0; dropped < 10; seq++ {
			if seq > 20_000 {
				t.Fatal("no send was dropped")
			}
			typ, m := numbered(seq, 1<<10)
			st, err := c.SendDone(typ, m, cs.done(seq))
			if err != nil {
				t.Fatal(err)
			}
			if st == rally.Dropped {
				dropped++
			} else {
				accepted = append(accepted, seq)
			}
		}
		c.CloseNow()
		cs.waitFor(t, len(accepted))
		cs.check(t, accepted)
	})
}

func TestSendFromManyGoroutinesKeepsEachGoroutinesOrderAndTypes(t *testing.T) {
	const senders = 8
	perSender := 200
	if testing.Short() {
		// Every size and type still goes through the queue from every
		// sender, interleaved with the others, a few times over.
		perSender = 60
	}
	sizes := []int{0, 7, 125, 126, 4000, 70_000}
	// Message g/i: "g:i:" then filler; sender g uses Send (even g),
	// SendDone (odd g) or, for the last, the blocking Write, and its type
	// alternates with i, so a type lost or swapped in the queue shows.
	message := func(g, i int) (rally.MessageType, []byte) {
		p := fmt.Appendf(nil, "%d:%d:", g, i)
		p = append(p, bytes.Repeat([]byte{byte('a' + (g+i)%26)}, sizes[(g+i)%len(sizes)])...)
		return []rally.MessageType{rally.Text, rally.Binary}[(g+i)%2], p
	}
	sides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		// The blocking Write waits behind everything the others queued:
		// give it more than one step's time under the race detector, on a
		// busy machine.
		ctx, cancel := context.WithTimeout(context.Background(), slowness.Scale(60*time.Second))
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, senders+1)
		var completed atomic.Int32
		for g := range senders {
			wg.Go(func() {
				for i := range perSender {
					typ, m := message(g, i)
					var err error
					var st rally.SendStatus
					switch {
					case g == senders-1:
						err = c.Write(ctx, typ, m)
					case g%2 == 0:
						st, err = c.Send(typ, m)
					default:
						st, err = c.SendDone(typ, m, func(err error) {
							if err != nil {
								errs <- err
							}
							completed.Add(1)
						})
					}
					if err != nil || st == rally.Dropped {
						errs <- fmt.Errorf("sender %d message %d: %v %w", g, i, st, err)
						return
					}
				}
			})
		}
		wg.Go(func() { // pings go out between the messages
			for range 20 {
				if err := c.Ping(ctx, []byte("ping")); err != nil {
					errs <- err
					return
				}
			}
		})
		next := make([]int, senders)
		pings := 0
		for total := 0; total < senders*perSender; {
			f, err := p.ReadFrame()
			if err != nil {
				select {
				case serr := <-errs:
					t.Fatalf("after %d messages: %v (a sender failed: %v)", total, err, serr)
				default:
					t.Fatalf("after %d messages: %v", total, err)
				}
			}
			if f.Opcode == rawpeer.OpPing {
				pings++
				continue
			}
			var g, i int
			if _, err := fmt.Sscanf(string(f.Payload), "%d:%d:", &g, &i); err != nil || g < 0 || g >= senders {
				t.Fatalf("frame %q... is no sender's", f.Payload[:min(12, len(f.Payload))])
			}
			if i != next[g] {
				t.Fatalf("sender %d: message %d arrived when %d was due", g, i, next[g])
			}
			next[g]++
			total++
			typ, want := message(g, i)
			if !f.Fin || f.Masked != masked || f.Opcode != byte(typ) || !bytes.Equal(f.Payload, want) {
				t.Fatalf("sender %d message %d: fin %v masked %v opcode %#x %d bytes; want fin, masked %v, opcode %#x, %d bytes",
					g, i, f.Fin, f.Masked, f.Opcode, len(f.Payload), masked, byte(typ), len(want))
			}
		}
		wg.Wait()
		for pings < 20 {
			f, err := p.ReadFrame()
			if err != nil || f.Opcode != rawpeer.OpPing {
				t.Fatalf("waiting for the last pings: %v, opcode %#x", err, f.Opcode)
			}
			pings++
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := completed.Load(); n != int32(perSender*(senders/2-1)) {
			t.Errorf("%d completions called, want %d", n, perSender*(senders/2-1))
		}
	})
}

func TestSendWhileAWriterStreamsWaitsForTheWritersMessage(t *testing.T) {
	c, p := acceptConn(t, nil)
	ctx := ctxT(t)
	w, err := c.Writer(ctx, rally.Text)
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("w"), 40<<10) // large enough to go out as a fragment at once
	if _, err := w.Write(first); err != nil {
		t.Fatal(err)
	}
	f, err := p.ReadFrame()
	if err != nil || f.Opcode != rawpeer.OpText || f.Fin || !bytes.Equal(f.Payload, first) {
		t.Fatalf("first fragment: %v, opcode %#x fin %v %d bytes; want a non-final text frame of %d bytes", err, f.Opcode, f.Fin, len(f.Payload), len(first))
	}

	if st, err := c.Send(rally.Binary, []byte("x")); st != rally.Queued || err != nil {
		t.Fatalf("Send while a Writer streams = %v, %v; want queued", st, err)
	}
	done := make(chan error, 2)
	if st, err := c.SendDone(rally.Text, []byte("y"), func(err error) { done <- err }); st != rally.Queued || err != nil {
		t.Fatalf("SendDone while a Writer streams = %v, %v; want queued", st, err)
	}
	if _, err := w.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		opcode  byte
		payload string
	}{{rawpeer.OpContinuation, "tail"}, {rawpeer.OpBinary, "x"}, {rawpeer.OpText, "y"}} {
		f, err := p.ReadFrame()
		if err != nil || f.Opcode != want.opcode || !f.Fin || string(f.Payload) != want.payload {
			t.Fatalf("frame: %v, opcode %#x fin %v %q; want a final frame with opcode %#x %q", err, f.Opcode, f.Fin, f.Payload, want.opcode, want.payload)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("completion of the held send: %v", err)
		}
	case <-time.After(wireTimeout()):
		t.Fatal("the completion of the held send was not called")
	}
}

func TestSendRefusesAnInvalidTypeAtTheCallAndQueuesNothing(t *testing.T) {
	for _, typ := range []rally.MessageType{0, 3, 8, 9, 10, -1, 0x81} {
		t.Run(strings.ReplaceAll(typ.String(), "-", "minus"), func(t *testing.T) {
			stalledSides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
				check := func(when string) {
					t.Helper()
					before := c.BufferedAmount()
					if st, err := c.Send(typ, []byte("bad")); st != rally.Dropped || err == nil {
						t.Fatalf("Send of type %v %s = %v, %v; want dropped with an error", typ, when, st, err)
					}
					called := false
					if st, err := c.SendDone(typ, []byte("bad"), func(error) { called = true }); st != rally.Dropped || err == nil {
						t.Fatalf("SendDone of type %v %s = %v, %v; want dropped with an error", typ, when, st, err)
					}
					if called {
						t.Fatalf("the completion of a refused SendDone was called")
					}
					if after := c.BufferedAmount(); after != before {
						t.Fatalf("BufferedAmount went from %d to %d over refused sends", before, after)
					}
				}
				check("on an idle connection")
				if pm, err := rally.NewPreparedMessage(typ, []byte("bad")); pm != nil || err == nil {
					t.Fatalf("NewPreparedMessage of type %v = %v, %v; want an error", typ, pm, err)
				}
				// Behind a queue too: nothing is queued to stall what follows.
				seq := 0
				for ; ; seq++ {
					if seq > 20_000 {
						t.Fatal("the socket buffers never filled")
					}
					if st, _ := c.Send(numbered(seq, 4<<10)); st == rally.Queued {
						break
					}
				}
				check("behind a queue")
				seq++
				c.Send(numbered(seq, 4<<10))
				for i := 0; i <= seq; i++ {
					expectNumbered(t, p, i, 4<<10, masked)
				}
			})
		})
	}
}

func TestSendAfterCloseIsDroppedWithErrClosedAtOnce(t *testing.T) {
	pm, err := rally.NewPreparedMessage(rally.Text, []byte("prepared"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, c *rally.Conn) {
		t.Helper()
		if st, err := c.Send(rally.Text, []byte("late")); st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
			t.Fatalf("Send = %v, %v; want dropped, ErrClosed", st, err)
		}
		called := make(chan error, 1)
		if st, err := c.SendDone(rally.Binary, []byte("late"), func(err error) { called <- err }); st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
			t.Fatalf("SendDone = %v, %v; want dropped, ErrClosed", st, err)
		}
		if st, err := c.SendPrepared(pm); st != rally.Dropped || !errors.Is(err, rally.ErrClosed) {
			t.Fatalf("SendPrepared = %v, %v; want dropped, ErrClosed", st, err)
		}
		select {
		case err := <-called:
			t.Fatalf("the completion of a dropped send was called with %v", err)
		default:
		}
	}
	t.Run("CloseStarted", func(t *testing.T) {
		rec := newRecorder()
		opened := make(chan *rally.Conn, 1)
		p := dialPeer(t, serve(t, &rally.Server{Open: func(c *rally.Conn) { opened <- c }, Close: rec.close}))
		c := <-opened
		if err := c.Close(rally.CloseNormal, ""); err != nil {
			t.Fatal(err)
		}
		check(t, c)
		p.ExpectClose(t, rally.CloseNormal)
		p.WriteFrame(rawpeer.Close(rally.CloseNormal, ""))
		p.ExpectEOF(t)
		p.Close()
		rec.waitClose(t)
		check(t, c)
	})
	t.Run("ClosedNow", func(t *testing.T) {
		c, _ := acceptConn(t, nil)
		c.CloseNow()
		check(t, c)
	})
}

// A prepared frame that several connections hold is charged once to the
// memory budget, by what the process holds: one frame, however many
// queues refer to it, from the first reference until the last queue lets
// go of it (the old rule charged it in full to each receiver: three times
// here).
func TestPreparedFrameWaitingInManyQueuesIsChargedOnce(t *testing.T) {
	budget := rally.NewMemoryBudget(64 << 20)
	pm, err := rally.NewPreparedMessage(rally.Binary, bytes.Repeat([]byte("prepared "), 256<<10/9))
	if err != nil {
		t.Fatal(err)
	}
	frameLen := int64(len(frameHeader(len(pm.Payload())))) + int64(len(pm.Payload()))
	drained := make(chan struct{}, 3)
	type receiver struct {
		c    *rally.Conn
		peer net.Conn
	}
	var rs []receiver
	for range 3 {
		c, peer, err := rally.ServerConnPairForTest(&rally.ConnOptions{
			MemoryBudget: budget,
			BufferLimit:  -1,
			OnDrain:      func(*rally.Conn) { drained <- struct{}{} },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		defer c.CloseNow()
		rs = append(rs, receiver{c, peer})
	}
	waiting := 0
	for i, r := range rs {
		if st, err := r.c.SendPrepared(pm); st != rally.Queued || err != nil {
			t.Fatalf("receiver %d: SendPrepared of 256 KiB to a peer that does not read: %v, %v; want queued", i, st, err)
		}
		waiting += r.c.BufferedAmount()
	}
	used := budget.Stats()[rally.MemorySendQueues].Used
	if waiting < 3*(200<<10) || used < frameLen || used >= 2*frameLen {
		t.Fatalf("3 receivers wait to send %d bytes of one shared frame of %d; the budget charges %d for send queues, want the frame once (and the queues' own few bytes)", waiting, frameLen, used)
	}
	for i, r := range rs {
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(r.peer)
			got <- b
		}()
		<-drained
		r.c.CloseNow()
		b := <-got
		want := append(frameHeader(len(pm.Payload())), pm.Payload()...)
		if !bytes.Equal(b, want) {
			t.Fatalf("receiver %d's peer read %d bytes, want the frame's %d", i, len(b), len(want))
		}
		used := budget.Stats()[rally.MemorySendQueues].Used
		if last := i == len(rs)-1; !last && (used < frameLen || used >= 2*frameLen) {
			t.Fatalf("after receiver %d drained, %d still refer to the frame; the budget charges %d for send queues, want the frame's %d once", i, len(rs)-1-i, used, frameLen)
		}
	}
	if used := budget.Stats()[rally.MemorySendQueues].Used; used != 0 {
		t.Fatalf("every peer read its frame, yet the budget charges %d for send queues", used)
	}
}

// frameHeader is the header of an unmasked final binary frame of n bytes
// (RFC 6455 5.2), built here rather than by frame/.
func frameHeader(n int) []byte {
	switch {
	case n < 126:
		return []byte{0x82, byte(n)}
	case n < 1<<16:
		return []byte{0x82, 126, byte(n >> 8), byte(n)}
	}
	h := []byte{0x82, 127, 0, 0, 0, 0, 0, 0, 0, 0}
	for i := range 8 {
		h[9-i] = byte(n >> (8 * i))
	}
	return h
}
