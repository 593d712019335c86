package rally_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// Isolation: once a receiver's queue is blocked (the kernel, or an HTTP/2
// stream's flow-control window, takes no more bytes), a send to it costs
// no write attempt and no walk over what it holds: the frame joins the
// queue, which is written when the peer reads again. A thousand publishes
// to a receiver that does not read make no more write attempts than one,
// in goroutine mode (from any goroutine, and from a corked batch as pub/sub
// makes it), in an event loop (from outside and from a loop callback), and
// over HTTP/2.

// isolationSends is how many sends each check makes to a blocked queue;
// maxAttempts is what it allows for the writer already running when the
// queue blocked (the flusher's last attempt): one write per send would be
// isolationSends of them.
// maxLoopAttempts is the event loop's: it writes again each time the
// kernel reports room (the socket's send buffer grows as the connection
// warms up, a few times at most), never once per send.
const (
	isolationSends  = 1000
	maxAttempts     = 3
	maxLoopAttempts = 10
)

// isolationFrame is a prepared message large enough that a few of them
// fill the kernel's buffers.
func isolationFrame(t *testing.T) *rally.PreparedMessage {
	pm, err := rally.NewPreparedMessage(rally.Binary, bytes.Repeat([]byte("isolated"), 8<<10))
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

// fillPreparedUntilQueued sends pm to c until the kernel refuses bytes (Queued),
// within a generous bound of sends.
func fillPreparedUntilQueued(t *testing.T, c *rally.Conn, pm *rally.PreparedMessage) {
	t.Helper()
	for range 4096 {
		st, err := c.SendPrepared(pm)
		if err != nil {
			t.Fatal(err)
		}
		if st == rally.Queued {
			return
		}
	}
	t.Fatal("4096 frames of 64 KiB were all sent at once to a peer that does not read")
}

func sendMany(t *testing.T, c *rally.Conn, pm *rally.PreparedMessage) {
	t.Helper()
	for i := range isolationSends {
		if st, err := c.SendPrepared(pm); st != rally.Queued || err != nil {
			t.Fatalf("send %d to a blocked queue: %v, %v; want queued", i, st, err)
		}
	}
}

func TestABlockedReceiverCostsNoWriteAttemptPerSend(t *testing.T) {
	pm := isolationFrame(t)
	t.Run("Goroutine", func(t *testing.T) {
		c, peer, err := rally.ServerConnPairForTest(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		defer c.CloseNow()
		w := rally.CountWritesForTest(c)
		fillPreparedUntilQueued(t, c, pm)
		before := w.Calls()
		if before == 0 {
			t.Fatal("no write attempt counted while the queue filled")
		}
		sendMany(t, c, pm)
		// As pub/sub publishes from a callback: each receiver joins the
		// sender's cork, and the batch ends with a flush of each.
		origin, opeer, err := rally.ServerConnPairForTest(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer opeer.Close()
		defer origin.CloseNow()
		origin.Cork(func() {
			for range isolationSends {
				c.JoinCork(origin)
				if st, err := c.SendPrepared(pm); st != rally.Queued || err != nil {
					t.Errorf("corked send to a blocked queue: %v, %v; want queued", st, err)
					return
				}
			}
		})
		if n := w.Calls() - before; n > maxAttempts {
			t.Fatalf("%d write attempts for %d sends to a queue the kernel blocks, want at most %d", n, 2*isolationSends, maxAttempts)
		}
	})
	t.Run("OverItsLimit", func(t *testing.T) {
		// Past its buffer limit a receiver drops what does not fit: a
		// thousand publishes to it are a thousand drops, with no write.
		c, peer, err := rally.ServerConnPairForTest(&rally.ConnOptions{BufferLimit: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		defer c.CloseNow()
		w := rally.CountWritesForTest(c)
		fillPreparedUntilQueued(t, c, pm)
		for c.BufferedAmount() <= 192<<10 {
			if st, err := c.SendPrepared(pm); st != rally.Queued || err != nil {
				t.Fatalf("send under the limit: %v, %v; want queued", st, err)
			}
		}
		before := w.Calls()
		for i := range isolationSends {
			if st, err := c.SendPrepared(pm); st != rally.Dropped || err != nil {
				t.Fatalf("send %d past the limit: %v, %v; want dropped", i, st, err)
			}
		}
		if n := w.Calls() - before; n > maxAttempts {
			t.Fatalf("%d write attempts for %d sends dropped past the limit, want at most %d", n, isolationSends, maxAttempts)
		}
		if _, err := c.SendPrepared(pm); err != nil {
			t.Fatal(err)
		}
		c.CloseNow()
		if st, err := c.SendPrepared(pm); err == nil {
			t.Fatalf("send after CloseNow: %v, nil; want the connection's error", st)
		}
	})
	t.Run("EventLoop", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("event loops are for Linux")
		}
		conns := make(chan *rally.Conn, 2)
		var blocked *rally.Conn
		published := make(chan int, 1)
		s := &rally.Server{
			EventLoop:  true,
			EventLoops: 1,
			Options:    &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}},
			Open:       func(c *rally.Conn) { conns <- c },
			Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
				// A publish from a loop callback: gathered by the turn.
				n := 0
				for range isolationSends {
					if st, _ := blocked.SendPrepared(pm); st == rally.Queued {
						n++
					}
				}
				published <- n
			},
		}
		addr := serve(t, s)
		dialPeer(t, addr) // never reads
		blocked = <-conns
		pub := dialPeer(t, addr)
		<-conns
		start := s.LoopWritesForTest()
		fillPreparedUntilQueued(t, blocked, pm)
		before := s.LoopWritesForTest()
		if before == start {
			t.Fatal("no write system call counted while the queue filled")
		}
		sendMany(t, blocked, pm)
		pub.WriteRaw(maskedZero(hx("82 01 00")))
		select {
		case n := <-published:
			if n != isolationSends {
				t.Fatalf("%d of %d sends from a loop callback to a blocked queue were queued", n, isolationSends)
			}
		case <-time.After(wireTimeout()):
			t.Fatal("the loop callback did not publish")
		}
		if n := s.LoopWritesForTest() - before; n > maxLoopAttempts {
			t.Fatalf("%d write system calls for %d sends to a queue the kernel blocks, want at most %d", n, 2*isolationSends, maxLoopAttempts)
		}
	})
	t.Run("HTTP2", func(t *testing.T) {
		requireH2(t)
		conns := make(chan *rally.Conn, 1)
		counters := make(chan *rally.WriteCounter, 1)
		s := &rally.Server{
			Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}},
			Open: func(c *rally.Conn) {
				counters <- rally.CountWritesForTest(c)
				conns <- c
			},
		}
		hs := startH2Server(t, s, nil)
		h2, err := rawpeer.DialH2(hs.Listener.Addr().String(), nil, wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		defer h2.Close()
		p, _, err := h2.DialClient("/", nil, wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close() // never reads
		w, c := <-counters, <-conns
		// A stream queues every send for its flusher. The peer's window
		// (4 MiB) takes the first 64 frames; the flusher's write of the
		// next one blocks.
		for range 80 {
			if _, err := c.SendPrepared(pm); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "the stream's 4 MiB window is filled and a write blocked", func() bool {
			return w.Writing() && w.Written() >= 4<<20
		})
		before := w.Calls()
		sendMany(t, c, pm)
		if n := w.Calls() - before; n > maxAttempts {
			t.Fatalf("%d writes for %d sends to a stream whose window is closed, want at most %d", n, isolationSends, maxAttempts)
		}
	})
}
