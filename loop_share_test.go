package rally_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// busyServer is a Server (on one event loop, or a goroutine each) with a
// connection whose messages each cost a few milliseconds of work, as a
// publish fanned out to many subscribers does: each "work" message sends
// chunk to every other connection, then works on. What the tests watch is
// how many of those messages were handled when something else happened
// on the server.
type busyServer struct {
	*rally.Server
	budget  *rally.MemoryBudget
	handled atomic.Int64  // "work" messages handled
	started chan struct{} // closed when the first "work" message is handled
	opened  chan struct{}
	closed  chan int64  // handled, when a connection that sent no work ended
	quick   chan int64  // handled, when a "quick" message was answered
	done    atomic.Bool // the test is over: work no more

	mu    sync.Mutex
	conns map[*rally.Conn]bool
	busy  *rally.Conn
}

func newBusyServer(t *testing.T, loop bool) *busyServer {
	b := &busyServer{
		budget:  rally.NewMemoryBudget(1 << 30),
		started: make(chan struct{}),
		opened:  make(chan struct{}, 64),
		closed:  make(chan int64, 64),
		quick:   make(chan int64, 1),
		conns:   map[*rally.Conn]bool{},
	}
	t.Cleanup(func() { b.done.Store(true) })
	chunk := make([]byte, 16<<10)
	var once sync.Once
	b.Server = &rally.Server{
		EventLoop:  loop,
		EventLoops: 1,
		Options:    &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: b.budget, BufferLimit: 64 << 20}},
		Open: func(c *rally.Conn) {
			b.mu.Lock()
			b.conns[c] = true
			b.mu.Unlock()
			b.opened <- struct{}{}
		},
		Message: func(c *rally.Conn, _ rally.MessageType, p []byte) {
			switch string(p) {
			case "quick":
				b.quick <- b.handled.Load()
				c.Write(context.Background(), rally.Text, p)
			case "work":
				if b.done.Load() {
					return
				}
				b.mu.Lock()
				b.busy = c
				for other := range b.conns {
					if other != c {
						other.Send(rally.Binary, chunk)
					}
				}
				b.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the rest of the work
				b.handled.Add(1)
				once.Do(func() { close(b.started) })
			}
		},
		Close: func(c *rally.Conn, _ *rally.CloseError) {
			b.mu.Lock()
			delete(b.conns, c)
			busy := c == b.busy
			b.mu.Unlock()
			if !busy {
				select {
				case b.closed <- b.handled.Load():
				default:
				}
			}
		},
	}
	return b
}

// works is the busy connection's input: n "work" messages in one write.
func works(n int) []byte {
	var wire []byte
	for range n {
		wire = append(wire, rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText,
			Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte("work")})...)
	}
	return wire
}

// waitOrFail waits for ch, with a bound generous for a busy machine.
func waitOrFail[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(slowness.Scale(60 * time.Second)):
		t.Fatalf("still waiting for %s", what)
		panic("unreachable")
	}
}

const busyWork = 1000 // "work" messages: seconds of work, whatever the machine

// A peer that goes away is let go (Server.Close, its queue's charge given
// back) while another connection of the same event loop still has work
// waiting, as in goroutine mode: a connection gets a share of its loop's
// turn (loopSharePerEvent), not the turn. (Before, four reads of a
// publisher's input held the loop for their whole work: after the
// adversary left, the event-loop server kept 455 connections and a
// growing charge for 48 s on a loaded machine.)
func TestAPeerThatGoesAwayIsLetGoWhileAnotherConnectionOfItsLoopIsBusy(t *testing.T) {
	for _, mode := range engines {
		t.Run(mode.name, func(t *testing.T) {
			b, addr, busy := busyServerWithItsBusyPeer(t, mode.loop)
			const peers = 8
			var gone []*rawpeer.Peer
			for range peers {
				gone = append(gone, dialPeer(t, addr))
				waitOrFail(t, b.opened, "a peer's Open")
			}
			go busy.WriteRaw(works(busyWork))
			waitOrFail(t, b.started, "the first work to be handled")
			for _, p := range gone {
				p.Close()
			}
			last := int64(0)
			for range peers {
				last = max(last, waitOrFail(t, b.closed, "the peers that went to be let go"))
			}
			if last >= busyWork {
				t.Fatalf("the peers that went were let go after the busy connection's %d messages were all handled, want while its work still waited", last)
			}
			// Nothing is sent to the busy connection: once the others are
			// let go, nothing is charged, whatever its work still holds.
			for b.budget.Used() != 0 {
				if b.handled.Load() >= busyWork {
					t.Fatalf("%d bytes still charged when the busy connection's work was done: the queues of the peers that went were held as long", b.budget.Used())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// A request on a connection is answered while another connection of the
// same event loop still has work waiting, as in goroutine mode. (Before,
// a resume from an old position on a busy loop waited for the loop's
// whole turn: 89 acks against 2,061 in goroutine mode under the
// adversary.)
func TestARequestIsAnsweredWhileAnotherConnectionOfItsLoopIsBusy(t *testing.T) {
	for _, mode := range engines {
		t.Run(mode.name, func(t *testing.T) {
			b, addr, busy := busyServerWithItsBusyPeer(t, mode.loop)
			asker := dialPeer(t, addr)
			waitOrFail(t, b.opened, "the asking connection's Open")
			go busy.WriteRaw(works(busyWork))
			waitOrFail(t, b.started, "the first work to be handled")
			asker.WriteFrame(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{9, 8, 7, 6}, Payload: []byte("quick")})
			at := waitOrFail(t, b.quick, "the request to be handled")
			if at >= busyWork {
				t.Fatalf("the request was handled after the busy connection's %d messages were all handled, want while its work still waited", at)
			}
			for {
				f, err := asker.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				if f.Opcode == rawpeer.OpText {
					if string(f.Payload) != "quick" {
						t.Fatalf("answer %q, want \"quick\"", f.Payload)
					}
					break
				}
			}
		})
	}
}

// busyServerWithItsBusyPeer starts a busyServer and connects the peer that
// will keep its loop busy.
func busyServerWithItsBusyPeer(t *testing.T, loop bool) (*busyServer, string, *rawpeer.Peer) {
	t.Helper()
	b := newBusyServer(t, loop)
	addr := serve(t, b.Server)
	busy := dialPeer(t, addr)
	waitOrFail(t, b.opened, "the busy connection's Open")
	return b, addr, busy
}
