package rally

import (
	"net"
	"testing"
)

// On an event loop, a Message callback's JoinCork joins nothing and says
// so: the turn gathers the callback's sends to every connection already,
// and writes each receiver once when it ends, whatever the number of
// messages the turn sent it.
func TestJoinCorkOnAnEventLoopJoinsNothingAndTheTurnWritesEachReceiverOnce(t *testing.T) {
	const receivers, per = 4, 3
	var rcv []*Conn
	joined := make(chan bool, receivers*per)
	s := &Server{EventLoop: true, EventLoops: 1}
	s.Message = func(c *Conn, typ MessageType, p []byte) {
		for _, r := range rcv {
			joined <- r.JoinCork(c)
			r.Send(typ, p)
		}
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	var peers []net.Conn
	for range receivers {
		c, peer, _ := adoptPair(t, s, false)
		rcv = append(rcv, c)
		peers = append(peers, peer)
	}
	_, speer, _ := adoptPair(t, s, false)
	w0 := s.loops.writeCalls()
	// One write, so that one turn reads the three messages.
	speer.Write(clientFrames(16, per))
	for _, p := range peers {
		readFrames(t, p, 16, per)
	}
	for range receivers * per {
		if <-joined {
			t.Fatal("JoinCork joined a cork inside an event loop's turn")
		}
	}
	if w := s.loops.writeCalls() - w0; w != receivers {
		t.Fatalf("%d writes for %d receivers of %d messages each, want one each", w, receivers, per)
	}
}
