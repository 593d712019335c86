package rally_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

// hubRoom serves a chat room through pubsub.Hub on event loops, as a user
// writes it: Open subscribes, Message publishes with PublishFrom (the
// sender left out). It returns the server and its n clients once all
// have joined.
func hubRoom(t *testing.T, loops, n int) (*rally.Server, []*rawpeer.Peer) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	var hub pubsub.Hub
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: loops,
		Options:    &rally.AcceptOptions{ConnOptions: rally.ConnOptions{BufferLimit: -1}},
		Open: func(c *rally.Conn) {
			if err := hub.Subscribe(c, "room"); err != nil {
				panic(err)
			}
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if _, err := hub.PublishFrom(c, "room", typ, p); err != nil {
				panic(err)
			}
		},
	}
	addr := serve(t, s)
	peers := make([]*rawpeer.Peer, n)
	for i := range peers {
		peers[i] = dialPeer(t, addr)
	}
	deadline := time.Now().Add(wireTimeout())
	for hub.SubscriberCount("room") < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clients subscribed", hub.SubscriberCount("room"), n)
		}
		time.Sleep(time.Millisecond)
	}
	return s, peers
}

// burst is the text frames "i:from" to "i:to-1" of client i, masked, for
// one write.
func burst(i, from, to int) []byte {
	var b []byte
	for j := from; j < to; j++ {
		b = append(b, rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: fmt.Appendf(nil, "%d:%d", i, j)})...)
	}
	return b
}

// readRoom reads want messages on p and checks that each publisher's
// messages arrive once each and in order, none from p's own client self.
func readRoom(p *rawpeer.Peer, self, publishers, per int) error {
	next := make([]int, publishers)
	want := (publishers - 1) * per
	for range want {
		f, err := p.ReadFrame()
		if err != nil {
			return fmt.Errorf("client %d: after %v: %v", self, next, err)
		}
		var from, k int
		if _, err := fmt.Sscanf(string(f.Payload), "%d:%d", &from, &k); err != nil || from < 0 || from >= publishers {
			return fmt.Errorf("client %d: unexpected message %q", self, f.Payload)
		}
		if from == self {
			return fmt.Errorf("client %d: got its own message %q back", self, f.Payload)
		}
		if k != next[from] {
			return fmt.Errorf("client %d: from %d got message %d, want %d (a message lost, repeated or out of order)", self, from, k, next[from])
		}
		next[from]++
	}
	return nil
}

// Publishes through the Hub from the callbacks of several event loops, to
// connections of every loop (most of them another loop's): each client
// gets every other client's messages once, in the order they were sent.
func TestEventLoopHubPublishesAcrossLoopsOnceAndInOrder(t *testing.T) {
	const loops, clients, rounds, per = 3, 9, 4, 25
	_, peers := hubRoom(t, loops, clients)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- readRoom(p, i, clients, rounds*per)
		}()
	}
	// Every client publishes in bursts (many messages per read, one turn
	// publishing many) and frames cut across writes (one message over
	// two turns), all at once.
	var senders sync.WaitGroup
	for i, p := range peers {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for r := range rounds {
				b := burst(i, r*per, (r+1)*per)
				if r%2 == 0 {
					p.WriteRaw(b)
				} else {
					p.WriteChopped(b, 7)
				}
			}
		}()
	}
	senders.Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// A publish through the Hub from loop callbacks is gathered: each
// connection gets what a turn (and what other loops' turns hand over)
// published in one write, far fewer writes than deliveries.
func TestEventLoopHubGathersWrites(t *testing.T) {
	const loops, clients, per = 2, 16, 8
	s, peers := hubRoom(t, loops, clients)
	before := s.LoopWritesForTest()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- readRoom(p, i, clients, per)
		}()
	}
	for i, p := range peers {
		go p.WriteRaw(burst(i, 0, per))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	deliveries := clients * (clients - 1) * per
	writes := s.LoopWritesForTest() - before
	// One write per delivery is what a server that gathers nothing makes;
	// a turn that reads one burst writes each connection once for its
	// per messages. The bound leaves room for a loaded machine's small
	// turns and partial writes.
	if float64(writes) > 0.25*float64(deliveries) {
		t.Fatalf("%d write system calls for %d deliveries (%.2f a delivery), want far fewer than one a delivery", writes, deliveries, float64(writes)/float64(deliveries))
	}
	t.Logf("%d write system calls for %d deliveries (%.3f a delivery)", writes, deliveries, float64(writes)/float64(deliveries))
}

// A loop held up by a callback does not hold up what other loops publish
// to its connections: they reach the client while the callback still
// runs.
func TestEventLoopHubPublishReachesTheConnectionsOfABlockedLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops are for Linux")
	}
	var hub pubsub.Hub
	blocked, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	joined := make(chan struct{}, 2)
	s := &rally.Server{
		EventLoop:  true,
		EventLoops: 2, // the two clients land on different loops
		Open: func(c *rally.Conn) {
			hub.Subscribe(c, "room")
			joined <- struct{}{}
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if string(p) == "block" {
				close(blocked)
				select {
				case <-release:
				case <-time.After(3 * wireTimeout()):
				}
				return
			}
			hub.PublishFrom(c, "room", typ, p)
		},
	}
	addr := serve(t, s)
	x := dialPeer(t, addr)
	<-joined
	y := dialPeer(t, addr)
	<-joined
	y.WriteFrame(rawpeer.Text("block"))
	<-blocked
	for i := range 20 {
		x.WriteFrame(rawpeer.Text(fmt.Sprint(i)))
	}
	for i := range 20 {
		f, err := y.ReadFrame()
		if err != nil {
			t.Fatalf("message %d did not reach the client of the blocked loop: %v", i, err)
		}
		if string(f.Payload) != fmt.Sprint(i) {
			t.Fatalf("got %q, want %q", f.Payload, fmt.Sprint(i))
		}
	}
}
