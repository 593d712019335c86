package rally_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// sides runs f against a server connection (Accept) and a client
// connection (Dial), each with opts; masked says whether that side's frames
// are masked on the wire. toConn turns frames written as a server sends
// them into what this side receives (masked with a zero key for a server).
func sides(t *testing.T, opts rally.ConnOptions, f func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, toConn func([]byte) []byte)) {
	t.Run("Server", func(t *testing.T) {
		c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: opts})
		f(t, c, p, false, maskedZero)
	})
	t.Run("Client", func(t *testing.T) {
		c, p := dialRaw(t, &rally.DialOptions{ConnOptions: opts})
		f(t, c, p, true, func(b []byte) []byte { return b })
	})
}

func TestConcurrentWritersEachMessageArrivesWholeInOrderWithItsType(t *testing.T) {
	const writers = 8
	perWriter := 60
	if testing.Short() {
		// Each writer still sends every size a few times, interleaved
		// with the others.
		perWriter = 24
	}
	sizes := []int{8, 125, 126, 65535, 65536, 100_000}
	// message g/i: byte g, uint32 i, then bytes g+i; even writers send
	// Text (not valid UTF-8: sent unchanged), odd ones Binary.
	message := func(g, i int) []byte {
		b := bytes.Repeat([]byte{byte(g + i)}, sizes[(g+i)%len(sizes)])
		b[0] = byte(g)
		binary.BigEndian.PutUint32(b[1:5], uint32(i))
		return b
	}
	typeOf := func(g int) rally.MessageType { return []rally.MessageType{rally.Text, rally.Binary}[g%2] }
	sides(t, rally.ConnOptions{}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		// About 20 MB cross (8 under -short): a generous bound, scaled by
		// the load, for a busy machine under -race.
		ctx, cancel := context.WithTimeout(context.Background(), slowness.Scale(time.Minute))
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for g := range writers {
			wg.Go(func() {
				for i := range perWriter {
					if err := c.Write(ctx, typeOf(g), message(g, i)); err != nil {
						errs <- fmt.Errorf("writer %d message %d: %w", g, i, err)
						return
					}
				}
			})
		}
		next := make([]int, writers)
		for range writers * perWriter {
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatalf("reading: %v", err)
			}
			if len(f.Payload) < 5 {
				t.Fatalf("frame of %d bytes, opcode %#x", len(f.Payload), f.Opcode)
			}
			g, i := int(f.Payload[0]), int(binary.BigEndian.Uint32(f.Payload[1:5]))
			if g >= writers {
				t.Fatalf("frame from unknown writer %d", g)
			}
			if i != next[g] {
				t.Fatalf("writer %d: message %d arrived when %d was due", g, i, next[g])
			}
			next[g]++
			if !f.Fin || f.Masked != masked || f.Opcode != byte(typeOf(g)) {
				t.Fatalf("writer %d message %d: fin %v masked %v opcode %#x, want fin, masked %v, opcode %#x",
					g, i, f.Fin, f.Masked, f.Opcode, masked, byte(typeOf(g)))
			}
			if !bytes.Equal(f.Payload, message(g, i)) {
				t.Fatalf("writer %d message %d: payload differs", g, i)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestTextWithInvalidUTF8IsSentUnchanged(t *testing.T) {
	payload := hx("ff fe 80 c0 ed a0 80 f4 90")
	sides(t, rally.ConnOptions{}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		if err := c.Write(ctxT(t), rally.Text, payload); err != nil {
			t.Fatal(err)
		}
		w, err := c.Writer(ctxT(t), rally.Text)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(payload)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			f, raw := readRaw(t, p)
			if f.Opcode != rawpeer.OpText || !f.Fin || f.Masked != masked || !bytes.Equal(f.Payload, payload) {
				t.Fatalf("frame %s (payload %s), want a text frame carrying %s", raw, hexOf(f.Payload), hexOf(payload))
			}
			if !masked && norm(raw) != norm("81 09 "+hexOf(payload)) {
				t.Fatalf("on the wire %s, want 81 09 %s", raw, hexOf(payload))
			}
		}
	})
}

// fillUntilQueued sends messages of size bytes with the non-blocking Send
// while the peer does not read, until one has to wait in the queue: the
// socket buffers are then full. It returns how many were sent.
func fillUntilQueued(t *testing.T, c *rally.Conn, p *rawpeer.Peer, size int) int {
	t.Helper()
	msg := make([]byte, size)
	for n := 1; ; n++ {
		st, err := c.Send(rally.Binary, msg)
		if err != nil || st == rally.Dropped {
			t.Fatalf("Send %d: %v %v", n, st, err)
		}
		if st == rally.Queued {
			if c.BufferedAmount() == 0 {
				t.Fatal("Send returned Queued with BufferedAmount 0")
			}
			return n
		}
		if n > 10_000 {
			t.Fatal("the socket buffers never filled")
		}
	}
}

// drain reads n binary frames of size bytes and fails on anything else.
func drain(t *testing.T, p *rawpeer.Peer, n, size int) {
	t.Helper()
	for i := range n {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i+1, n, err)
		}
		if f.Opcode != rawpeer.OpBinary || !f.Fin || len(f.Payload) != size {
			t.Fatalf("frame %d of %d: opcode %#x fin %v %d bytes, want a binary frame of %d bytes", i+1, n, f.Opcode, f.Fin, len(f.Payload), size)
		}
	}
}

func TestWriteWhoseContextEndsBeforeAnyByteLeftReturnsCtxErrAndTheConnectionStaysUsable(t *testing.T) {
	const size = 256 << 10
	sides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		n := fillUntilQueued(t, c, p, size)
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Write(canceled, rally.Text, []byte("never")); !errors.Is(err, context.Canceled) || errors.Is(err, rally.ErrClosed) {
			t.Fatalf("Write with a canceled context behind a full queue = %v, want context.Canceled", err)
		}
		expired, cancel2 := context.WithTimeout(context.Background(), 0)
		defer cancel2()
		if err := c.Write(expired, rally.Binary, []byte("never either")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Write with an expired context behind a full queue = %v, want context.DeadlineExceeded", err)
		}
		written := make(chan error, 1)
		ctx := ctxT(t)
		go func() { written <- c.Write(ctx, rally.Text, []byte("after")) }()
		// The peer reads again: the fill, then "after"; the taken-back
		// frames never appear.
		drain(t, p, n, size)
		wantFrame(t, p, rawpeer.OpText, "after", masked)
		if err := <-written; err != nil {
			t.Fatalf("Write after the canceled ones = %v", err)
		}
	})
}

func TestWriteWhoseContextEndsMidFrameFailsTheConnection(t *testing.T) {
	sides(t, rally.ConnOptions{BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		// On an idle connection the first bytes of the frame leave at once;
		// the socket buffers cannot take 16 MiB, so the rest waits, and the
		// context has already ended.
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		err := c.Write(canceled, rally.Binary, make([]byte, 16<<20))
		if !errors.Is(err, context.Canceled) || err == context.Canceled {
			t.Fatalf("Write canceled mid-frame = %v, want an error that wraps context.Canceled and says the connection failed", err)
		}
		waitDone(t, c)
		if err := c.Write(ctxT(t), rally.Text, []byte("x")); !errors.Is(err, rally.ErrClosed) && err == nil {
			t.Errorf("Write after the failure = %v, want an error", err)
		}
		p.ExpectEOF(t) // the half frame is followed by the end of TCP, nothing else
	})
}

func TestReadWhoseContextEndsReturnsCtxErrAndTheNextReadGetsTheMessage(t *testing.T) {
	t.Run("WhileNothingArrives", func(t *testing.T) {
		sides(t, rally.ConnOptions{}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, toConn func([]byte) []byte) {
			expired, cancel := context.WithTimeout(context.Background(), 0)
			defer cancel()
			if _, _, err := c.Read(expired); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Read with an expired context = %v, want context.DeadlineExceeded", err)
			}
			if err := p.WriteRaw(toConn(hx("81 02 68 69"))); err != nil {
				t.Fatal(err)
			}
			if typ, msg, err := c.Read(ctxT(t)); err != nil || typ != rally.Text || string(msg) != "hi" {
				t.Fatalf("next Read = %v %q %v, want text \"hi\"", typ, msg, err)
			}
		})
	})
	t.Run("InTheMiddleOfAMessage", func(t *testing.T) {
		// The ping hook cancels the reading context between two fragments,
		// with half of the second fragment already in: Read must return
		// at the next wait for bytes, keeping what it has.
		var mu sync.Mutex
		var cancelRead context.CancelFunc // the reading context of the side under test
		opts := rally.ConnOptions{OnPing: func(*rally.Conn, []byte) {
			mu.Lock()
			defer mu.Unlock()
			cancelRead()
		}}
		sides(t, opts, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, toConn func([]byte) []byte) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			mu.Lock()
			cancelRead = cancel
			mu.Unlock()
			// "hello " (not final), ping, then "world" of which "wor" only.
			if err := p.WriteRaw(toConn(hx("01 06 68 65 6c 6c 6f 20  89 00  80 05 77 6f 72"))); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Read(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Read whose context ended mid-message = %v, want context.Canceled", err)
			}
			wantFrame(t, p, rawpeer.OpPong, "", masked)
			if err := p.WriteRaw(hx("6c 64")); err != nil { // "ld": the rest of the payload (mask key 0 for a server)
				t.Fatal(err)
			}
			if typ, msg, err := c.Read(ctxT(t)); err != nil || typ != rally.Text || string(msg) != "hello world" {
				t.Fatalf("next Read = %v %q %v, want text \"hello world\"", typ, msg, err)
			}
		})
	})
}

func TestWriterStreamsFragmentsAndLetsAPingOutBetweenThem(t *testing.T) {
	first := bytes.Repeat([]byte("a"), 40_000)
	last := []byte("0123456789")
	sides(t, rally.ConnOptions{}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, _ func([]byte) []byte) {
		ctx := ctxT(t)
		w, err := c.Writer(ctx, rally.Binary)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(first); err != nil {
			t.Fatal(err)
		}
		// A Writer's fragment has left by now; a ping from another
		// goroutine goes out before the message ends.
		pinged := make(chan error, 1)
		go func() { pinged <- c.Ping(ctx, []byte("between")) }()
		if err := <-pinged; err != nil {
			t.Fatalf("Ping while a Writer is open = %v", err)
		}
		// Other messages wait for the Writer: one that cannot wait fails...
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Write(canceled, rally.Text, []byte("never")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with a canceled context while a Writer is open = %v, want context.Canceled", err)
		}
		// ...and one that waits goes out after the message's last fragment.
		written := make(chan error, 1)
		go func() { written <- c.Write(ctx, rally.Text, []byte("after")) }()
		if _, err := w.Write(last); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}

		var got []byte
		var frames []string
		sawPing := false
		for n := 0; ; n++ {
			f, _ := readRaw(t, p)
			if f.Masked != masked {
				t.Fatalf("frame %d masked %v, want %v", n, f.Masked, masked)
			}
			if f.Opcode == rawpeer.OpPing {
				if string(f.Payload) != "between" || len(got) == 0 || sawPing {
					t.Fatalf("ping %q after %d bytes of the message; want one ping \"between\" after the first fragment", f.Payload, len(got))
				}
				sawPing = true
				continue
			}
			frames = append(frames, fmt.Sprintf("op %#x fin %v %d bytes", f.Opcode, f.Fin, len(f.Payload)))
			wantOp := rawpeer.OpContinuation
			if n == 0 {
				wantOp = rawpeer.OpBinary
			}
			if f.Opcode != wantOp {
				t.Fatalf("fragments %v: want the first binary and the others continuations", frames)
			}
			got = append(got, f.Payload...)
			if f.Fin {
				break
			}
		}
		if !sawPing {
			t.Fatalf("fragments %v and no ping between them", frames)
		}
		if !bytes.Equal(got, append(bytes.Clone(first), last...)) {
			t.Fatalf("the fragments carry %d bytes, not the %d written", len(got), len(first)+len(last))
		}
		wantFrame(t, p, rawpeer.OpText, "after", masked)
		if err := <-written; err != nil {
			t.Fatalf("Write that waited for the Writer = %v", err)
		}
	})
}

func TestPongsToAPingFloodAreReplacedNotQueued(t *testing.T) {
	const size, pings = 256 << 10, 100
	c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}})
	// The peer stops reading; the server's socket buffers fill up. Then
	// 16 MiB more wait in the queue, far beyond what the kernel can take
	// while the peer does not read (its send buffer may still grow), so the
	// queue cannot drain during the flood and every pong has to wait.
	n := fillUntilQueued(t, c, p, size)
	for range 64 {
		if st, err := c.Send(rally.Binary, make([]byte, size)); err != nil || st != rally.Queued {
			t.Fatalf("Send behind a full socket: %v %v, want queued", st, err)
		}
		n++
	}
	// The peer floods pings and then says "done"; the server reads them all.
	var flood []byte
	for i := range pings {
		flood = append(flood, maskedZero(rawpeer.Build(rawpeer.Ping(fmt.Appendf(nil, "ping-%03d", i))))...)
	}
	flood = append(flood, maskedZero(hx("81 04 64 6f 6e 65"))...)
	if err := p.WriteRaw(flood); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctxT(t)); err != nil || string(msg) != "done" {
		t.Fatalf("Read = %q %v, want \"done\"", msg, err)
	}
	written := make(chan error, 1)
	// No deadline on the Write: it waits behind the 16 MiB the peer is about
	// to read, which takes as long as the machine needs; the peer's reads
	// bound the wait (each fails after wireTimeout without a byte).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { written <- c.Write(ctx, rally.Text, []byte("end")) }()
	// The peer reads again: the fill, one pong for the newest ping (RFC
	// 6455 5.5.3), then "end".
	var pongs []string
	for sent := 0; ; {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		switch {
		case f.Opcode == rawpeer.OpPong:
			pongs = append(pongs, string(f.Payload))
		case f.Opcode == rawpeer.OpBinary && len(f.Payload) == size:
			sent++
		case f.Opcode == rawpeer.OpText && string(f.Payload) == "end":
			if sent != n {
				t.Errorf("%d of the %d filling messages arrived", sent, n)
			}
			if len(pongs) != 1 || pongs[0] != fmt.Sprintf("ping-%03d", pings-1) {
				t.Errorf("pongs %q for %d pings sent while the peer did not read, want one pong for the newest, ping-%03d", pongs, pings, pings-1)
			}
			if err := <-written; err != nil {
				t.Fatal(err)
			}
			return
		default:
			t.Fatalf("unexpected frame: opcode %#x, %d bytes", f.Opcode, len(f.Payload))
		}
	}
}
