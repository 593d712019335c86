package rally_test

import (
	"bytes"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// A message being gathered grows only within the memory budget: past it
// the message fails with 1013 before the memory is taken, the refusal is
// counted, and the connection's charge is given back when it ends.
func TestAMessagePastTheMemoryBudgetFailsWith1013AndGivesItsChargeBack(t *testing.T) {
	budget := rally.NewMemoryBudget(64 << 10)
	rec := newRecorder()
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}},
		Close:   rec.close,
	}
	p := dialPeer(t, serve(t, s))
	chunk := bytes.Repeat([]byte{'x'}, 16<<10)
	if err := p.WriteFrame(rawpeer.Fragment(rawpeer.OpBinary, chunk, false)); err != nil {
		t.Fatal(err)
	}
	for range 20 { // 336 KiB in all, far past the budget
		if err := p.WriteFrame(rawpeer.Continuation(chunk, false)); err != nil {
			break // the server closed while the peer was still sending
		}
	}
	f := p.ExpectClose(t, rally.CloseTryAgainLater)
	checkCloseFrame(t, f)
	p.Close()
	if ce := rec.waitClose(t); ce.Code != rally.CloseTryAgainLater {
		t.Fatalf("Server.Close got %v, want 1013", ce)
	}
	st := budget.Stats()[rally.MemoryAssembly]
	if st.Refused == 0 || st.Peak > 64<<10 || st.Used != 0 {
		t.Fatalf("assembly: %d refused, peak %d, %d still charged; want refusals, a peak within 64 KiB and 0 charged after the end", st.Refused, st.Peak, st.Used)
	}
}

// A send queue is charged for the memory it holds (its buffer's capacity):
// sends to a peer that does not read stop being queued near the budget
// (dropped, or the connection, the largest queue, is cut to make room),
// the charge never goes far past it, and once the connection ends it is
// back to 0.
func TestSendQueuesAreChargedToTheMemoryBudgetAndSendsPastItAreDropped(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 20)
	stalledSides(t, rally.ConnOptions{MemoryBudget: budget, BufferLimit: -1}, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, _ bool) {
		msg := make([]byte, 64<<10)
		dropped := 0
		for range 64 { // 4 MiB to a peer that does not read
			if st, _ := c.Send(rally.Binary, msg); st == rally.Dropped {
				dropped++
			}
		}
		st := budget.Stats()[rally.MemorySendQueues]
		if dropped == 0 || st.Peak == 0 || st.Peak > 2<<20 {
			t.Fatalf("4 MiB sent to a stalled peer with a 1 MiB budget: %d dropped, a peak charge of %d bytes; want drops and a peak near the budget", dropped, st.Peak)
		}
		c.CloseNow()
		waitDone(t, c)
		if st := budget.Stats()[rally.MemorySendQueues]; st.Used != 0 {
			t.Fatalf("%d bytes still charged after the connection ended", st.Used)
		}
	})
}
