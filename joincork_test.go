package rally

import "testing"

// A receiver that joined the corks of two publishers whose batches overlap
// is written once, when the last of them ends; the first ending does not
// flush it.
func TestJoinCorkHoldsAReceiverUntilEveryJoinedBatchEnds(t *testing.T) {
	conn := func() *Conn {
		a, peer := socketPair(t)
		t.Cleanup(func() { peer.Close() })
		c := newConn(a, nil, true, "", nil)
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	a, b, r := conn(), conn(), conn()
	var heldAfterB, heldInside int
	a.Cork(func() {
		b.Cork(func() {
			if !r.JoinCork(b) || !r.JoinCork(a) || !r.JoinCork(b) {
				t.Fatal("JoinCork refused a corked origin")
			}
			if st, err := r.Send(Text, []byte("hello")); st != Sent || err != nil {
				t.Fatalf("Send = %v %v, want sent into the cork", st, err)
			}
			heldInside = r.BufferedAmount()
		})
		heldAfterB = r.BufferedAmount()
	})
	if heldInside != 7 || heldAfterB != 7 {
		t.Fatalf("bytes held: %d inside both batches, %d after the first ended; want 7 and 7", heldInside, heldAfterB)
	}
	if n := r.BufferedAmount(); n != 0 {
		t.Fatalf("%d bytes still held after both batches ended, want 0 (written)", n)
	}
	if r.JoinCork(a) {
		t.Fatal("JoinCork joined an origin that is not corked")
	}
}
