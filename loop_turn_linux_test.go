package rally_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// An event loop's turn reads a bounded amount from its connections,
// however many stream large messages at once: each gets a share of the
// turn's bytes, and what it leaves in its socket is read in the next
// turn. (Before, each connection read four full buffers per readiness
// event, a MiB; a thousand clients sending messages of 1 MiB made a turn
// of a GiB copied, and a fresh client's echo waited 1.2-1.8 s for it.)
func TestAnEventLoopTurnReadsABoundedAmountWhateverItsConnectionsSend(t *testing.T) {
	const (
		streamers = 32
		size      = 4 << 20 // each streamer's message
	)
	var mu sync.Mutex
	most, mostReady := 0, 0
	over := 0
	rally.OnLoopTurnRead(t, func(read, ready int) {
		mu.Lock()
		defer mu.Unlock()
		if read > most {
			most, mostReady = read, ready
		}
		if read > rally.TurnReadBound(ready) {
			over++
		}
	})
	var got atomic.Int64
	done := make(chan struct{})
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 1,
		Options:    &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: size}},
		Message: func(c *rally.Conn, _ rally.MessageType, p []byte) {
			if len(p) != size {
				t.Errorf("a message of %d bytes, want %d", len(p), size)
			}
			if got.Add(1) == streamers {
				close(done)
			}
		},
	}
	addr := serve(t, s)
	wire := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: make([]byte, size)})
	var peers []*rawpeer.Peer
	for range streamers {
		peers = append(peers, dialPeer(t, addr))
	}
	for _, p := range peers {
		go p.WriteRaw(wire)
	}
	waitOrFail(t, done, "every streamer's message")
	mu.Lock()
	defer mu.Unlock()
	if over > 0 {
		t.Errorf("%d turns read more than their bound; the most, %d bytes with %d connections ready (bound %d)", over, most, mostReady, rally.TurnReadBound(mostReady))
	}
	t.Logf("the most a turn read: %d bytes, with %d connections ready", most, mostReady)
}

// An event loop delivers to a fresh client before the turn's streaming
// connections (those whose last delivery left input behind): they go on
// after the others, for a few milliseconds a turn. (Before, a turn
// delivered in the order epoll reported, and a thousand clients
// streaming messages of 1 MiB − 1 kept a fresh client's echo waiting a
// whole round of them, 0.5-1.3 s.) The streamers here take 2 ms of the
// loop per message, so that each of their deliveries yields with input
// left, whatever the machine's speed.
func TestAnEventLoopDeliversToAFreshClientBeforeItsStreamingConnections(t *testing.T) {
	const (
		streamers = 8
		probes    = 10
		size      = 64 << 10
	)
	type delivery struct {
		c         *rally.Conn
		streaming bool
		turn      uint64
	}
	var (
		mu          sync.Mutex
		deliveries  []delivery
		overtaken   []int // per probe, the streaming deliveries before it in its turn
		streamed    int
		streamingCh = make(chan struct{}) // closed once the streamers stream
	)
	rally.OnLoopDeliver(t, func(c *rally.Conn, streaming bool, turn uint64) {
		mu.Lock()
		defer mu.Unlock()
		if streaming {
			if streamed++; streamed == streamers {
				close(streamingCh)
			}
		}
		if len(deliveries) > 0 && deliveries[len(deliveries)-1].turn != turn {
			deliveries = deliveries[:0] // only the turn in progress matters
		}
		deliveries = append(deliveries, delivery{c, streaming, turn})
	})
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 1,
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if typ == rally.Binary {
				time.Sleep(2 * time.Millisecond) // past the loop's share of a delivery: it yields
				return
			}
			mu.Lock()
			n := 0
			for i := len(deliveries) - 1; i >= 0; i-- {
				if deliveries[i].c == c {
					for _, d := range deliveries[:i] {
						if d.streaming {
							n++
						}
					}
					break
				}
			}
			overtaken = append(overtaken, n)
			mu.Unlock()
			c.Send(typ, p)
		},
	}
	addr := serve(t, s)
	wire := bytes.Repeat(rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: make([]byte, size)}), 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range streamers {
		p := dialPeer(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p.WriteRaw(wire) != nil {
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	// Wait until the streamers stream: their deliveries leave input behind.
	waitOrFail(t, streamingCh, "streaming deliveries from the streamers")
	for i := range probes {
		p := dialPeer(t, addr)
		msg := []byte("probe")
		if err := p.WriteFrame(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{9, 8, 7, 6}, Payload: msg}); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		f, err := p.ReadFrame()
		if err != nil || f.Opcode != rawpeer.OpText || !bytes.Equal(f.Payload, msg) {
			t.Fatalf("probe %d: echo %v %q, %v", i, f.Opcode, f.Payload, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overtaken) != probes {
		t.Fatalf("%d probes delivered, want %d", len(overtaken), probes)
	}
	for i, n := range overtaken {
		if n > 0 {
			t.Errorf("probe %d: %d streaming deliveries before it in its turn", i, n)
		}
	}
	t.Logf("%d streaming deliveries in all", streamed)
}
