package rally_test

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

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

// A message that stops arriving is failed with 1008 once a whole
// MessageTimeout passes without MinMessageRate of it, and its memory is
// given back when the connection ends.
func TestAMessageThatStopsArrivingIsFailedWith1008AndGivesItsMemoryBack(t *testing.T) {
	budget := rally.NewMemoryBudgetWith(1<<20, &rally.MemoryBudgetOptions{MessageTimeout: 20 * time.Millisecond})
	rec := newRecorder()
	s := echoServer()
	s.Options = &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}}
	s.Close = rec.close
	p := dialPeer(t, serve(t, s))
	if err := p.WriteFrame(rawpeer.Fragment(rawpeer.OpBinary, make([]byte, 16<<10), false)); err != nil {
		t.Fatal(err)
	}
	f := p.ExpectClose(t, rally.ClosePolicyViolation)
	checkCloseFrame(t, f)
	if ce := rec.waitClose(t); ce.Code != rally.ClosePolicyViolation {
		t.Fatalf("Server.Close got %v, want 1008", ce)
	}
	if st := budget.Stats()[rally.MemoryAssembly]; st.Peak < 16<<10 || st.Used != 0 {
		t.Fatalf("assembly: peak %d, %d still charged; want the message charged, then 0", st.Peak, st.Used)
	}
}

// Messages being gathered take at most their share of the budget
// (AssemblyShare, half by default): one that needs more is failed with
// 1013 and so are the largest held ones, the budget keeps admitting new
// connections meanwhile, and a fresh client is served.
func TestHeldMessagesTakeOnlyTheirShareAndTheLargestAreShedWith1013(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 20) // 512 KiB for messages
	closes := make(chan *rally.CloseError, 4)
	s := echoServer()
	s.Options = &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}}
	s.Close = func(_ *rally.Conn, ce *rally.CloseError) { closes <- ce }
	addr := serve(t, s)

	// hold sends size bytes of a message that never ends, then a ping: its
	// pong says the server has gathered them.
	hold := func(size int) *rawpeer.Peer {
		p := dialPeer(t, addr)
		chunk := make([]byte, 64<<10)
		p.WriteFrame(rawpeer.Fragment(rawpeer.OpBinary, chunk, false))
		for sent := len(chunk); sent < size; sent += len(chunk) {
			p.WriteFrame(rawpeer.Continuation(chunk, false))
		}
		p.WriteFrame(rawpeer.Ping([]byte("held")))
		return p
	}
	a, b := hold(256<<10), hold(256<<10)
	for _, p := range []*rawpeer.Peer{a, b} {
		if f, err := p.ReadFrame(); err != nil || f.Opcode != rawpeer.OpPong {
			t.Fatalf("a peer holding 256 KiB: %v %v, want its pong", f, err)
		}
	}
	if st := budget.Stats()[rally.MemoryAssembly]; st.Used != 512<<10 || !budget.AdmitsNew() {
		t.Fatalf("two held messages: %d charged, admits new %v; want 512 KiB and true", st.Used, budget.AdmitsNew())
	}

	c := hold(64 << 10) // past the share
	for _, p := range []*rawpeer.Peer{c, a, b} {
		checkCloseFrame(t, p.ExpectClose(t, rally.CloseTryAgainLater))
		// Answer as a peer should: a peer that cuts TCP instead leaves
		// Server.Close to report what arrived first, the cut (1006) or
		// rally's own record of the 1013 it sent, which a busy machine
		// orders either way.
		p.WriteFrame(rawpeer.Close(rally.CloseTryAgainLater, ""))
		p.Close()
	}
	for range 3 {
		select {
		case ce := <-closes:
			if ce.Code != rally.CloseTryAgainLater {
				t.Errorf("Server.Close got %v, want 1013", ce)
			}
		case <-time.After(wireTimeout()):
			t.Fatal("Server.Close was not called three times")
		}
	}
	st := budget.Stats()[rally.MemoryAssembly]
	if st.Used != 0 || st.Peak > 512<<10 || st.Refused == 0 || budget.Shed() != 2 {
		t.Fatalf("assembly: %d charged, peak %d, %d refused, %d shed; want 0, at most 512 KiB, refusals and 2 shed", st.Used, st.Peak, st.Refused, budget.Shed())
	}

	fresh := dialPeer(t, addr)
	fresh.WriteFrame(rawpeer.Text("still served"))
	if f, err := fresh.ReadFrame(); err != nil || string(f.Payload) != "still served" {
		t.Fatalf("a fresh client's echo: %q %v", f.Payload, err)
	}
}

// A server whose memory budget is exhausted (what is charged at 90%, or
// the whole limit observed) refuses new connections with 503 and
// Retry-After; before that, while it sheds, it serves them.
func TestAcceptRefusesNewConnectionsWith503UnderMemoryPressure(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 20)
	s := echoServer()
	s.Options = &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}}
	addr := serve(t, s)
	budget.Observe(1 << 20) // the whole budget held
	_, resp, err := rally.Dial(ctxT(t), "ws://"+addr, nil)
	var he *rally.HandshakeError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a handshake with the whole budget held: %v, want 503 with Retry-After", err)
	}
	budget.Observe(950 << 10) // shedding, still admitting
	c, _, err := rally.Dial(ctxT(t), "ws://"+addr, nil)
	if err != nil {
		t.Fatalf("a handshake at 93%% of the budget observed: %v, want it served", err)
	}
	c.CloseNow()
}

// A peer that never reads what is sent to it is let go (1006) once bytes
// have waited WriteStallTimeout without the transport taking any, so that
// it cannot hold its send queue forever (rally serve sets 30 s).
func TestAPeerThatNeverReadsIsLetGoAfterTheWriteStallTimeout(t *testing.T) {
	c, _ := acceptStalled(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
		BufferLimit: -1, WriteStallTimeout: 20 * time.Millisecond,
	}}, nil)
	ended := readInBackground(c)
	final := make(chan *rally.CloseError, 1)
	c.OnClose(func(ce *rally.CloseError) { final <- ce })
	if st, err := c.Send(rally.Binary, make([]byte, 4<<20)); st != rally.Queued || err != nil {
		t.Fatalf("4 MiB to a peer that does not read: %v %v, want queued", st, err)
	}
	waitDone(t, c)
	var ce *rally.CloseError
	if err := <-ended; !errors.As(err, &ce) || ce.Code != rally.CloseAbnormal {
		t.Fatalf("the connection ended with %v, want 1006", err)
	}
	if ce := <-final; ce.Code != rally.CloseAbnormal || !errors.Is(ce, rally.ErrWriteStalled) {
		t.Fatalf("the connection's end is %v, want 1006 caused by rally.ErrWriteStalled", ce)
	}
	if n := c.BufferedAmount(); n != 0 {
		t.Errorf("%d bytes still queued after the end", n)
	}
}

// A connection read with Read that ends in the middle of a message gives
// the message's memory and its charge back (a budget shared by servers
// would otherwise lose it for good, one connection at a time).
func TestReadGivesBackTheChargeOfAMessageCutByTheEndOfTheConnection(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 20)
	c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}})
	if err := p.WriteFrame(rawpeer.Fragment(rawpeer.OpBinary, make([]byte, 16<<10), false)); err != nil {
		t.Fatal(err)
	}
	p.Close()
	var ce *rally.CloseError
	if _, _, err := c.Read(ctxT(t)); !errors.As(err, &ce) || ce.Code != rally.CloseAbnormal {
		t.Fatalf("Read = %v, want 1006", err)
	}
	if st := budget.Stats()[rally.MemoryAssembly]; st.Used != 0 || st.Peak < 16<<10 {
		t.Fatalf("assembly: %d still charged, peak %d; want the message charged, then 0", st.Used, st.Peak)
	}
}

// A connection is cut once: when the memory budget sheds its queue, a
// CloseNow (rally serve's own memory watch cutting slow readers) finds it
// ending and says so, and when CloseNow cut it first, the budget does not
// shed it again. Each cut is counted by the one who made it.
func TestAConnectionTheBudgetShedsIsNotCutAgainByCloseNowNorTheOtherWayRound(t *testing.T) {
	queue := func(t *testing.T, budget *rally.MemoryBudget) *rally.Conn {
		c, _ := acceptStalled(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget, BufferLimit: -1}}, nil)
		if st, err := c.Send(rally.Binary, make([]byte, 512<<10)); st != rally.Queued || err != nil {
			t.Fatalf("512 KiB to a peer that does not read: %v %v, want queued", st, err)
		}
		budget.Observe(budget.Limit() / 10 * 9) // pressure: Relieve sheds
		return c
	}
	t.Run("BudgetFirst", func(t *testing.T) {
		budget := rally.NewMemoryBudget(8 << 20)
		c := queue(t, budget)
		if n := budget.Relieve(); n != 1 {
			t.Fatalf("Relieve shed %d, want the one queue", n)
		}
		if err := c.CloseNow(); !errors.Is(err, rally.ErrClosed) {
			t.Errorf("CloseNow on a connection the budget is cutting = %v, want rally.ErrClosed", err)
		}
		waitDone(t, c)
		if n := budget.Shed(); n != 1 {
			t.Errorf("Shed() = %d, want 1", n)
		}
	})
	t.Run("CloseNowFirst", func(t *testing.T) {
		budget := rally.NewMemoryBudget(8 << 20)
		c := queue(t, budget)
		if err := c.CloseNow(); err != nil {
			t.Fatalf("CloseNow = %v, want nil (it cut the connection)", err)
		}
		if n := budget.Relieve(); n != 0 {
			t.Errorf("Relieve shed %d after CloseNow cut the connection, want 0", n)
		}
		if n := budget.Shed(); n != 0 {
			t.Errorf("Shed() = %d, want 0", n)
		}
	})
}
