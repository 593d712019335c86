package rally_test

import (
	"sync"
	"sync/atomic"
	"testing"

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
