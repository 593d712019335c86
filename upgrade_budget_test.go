package rally

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// readingConn tells when Upgrade first reads from it: by then the head is
// charged to the budget and counted among those in progress.
type readingConn struct {
	net.Conn
	once    sync.Once
	reading chan struct{}
}

func (c *readingConn) Read(p []byte) (int, error) {
	c.once.Do(func() { close(c.reading) })
	return c.Conn.Read(p)
}

// rawHeads runs Upgrade with opts on the server side of each connection
// dial opens, one at a time; dial returns once Upgrade reads it (or
// connect, at once).
type rawHeads struct {
	t       *testing.T
	ln      net.Listener
	opts    *AcceptOptions
	results chan error
	wg      sync.WaitGroup
}

func newRawHeads(t *testing.T, opts *AcceptOptions) *rawHeads {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &rawHeads{t: t, ln: ln, opts: opts, results: make(chan error, 16)}
	t.Cleanup(func() {
		ln.Close()
		h.wg.Wait()
	})
	return h
}

func (h *rawHeads) dial() net.Conn { return h.open(true) }

func (h *rawHeads) connect() net.Conn { return h.open(false) }

func (h *rawHeads) open(wait bool) net.Conn {
	h.t.Helper()
	nc, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	sc, err := h.ln.Accept()
	if err != nil {
		h.t.Fatal(err)
	}
	rc := &readingConn{Conn: sc, reading: make(chan struct{})}
	h.wg.Go(func() {
		c, _, err := Upgrade(rc, h.opts)
		if c != nil {
			c.CloseNow()
		}
		h.results <- err
	})
	if !wait {
		return nc
	}
	select {
	case <-rc.reading:
	case <-time.After(rawTimeout):
		h.t.Fatal("Upgrade did not read the connection")
	}
	return nc
}

// status reads the status code of the answer on nc.
func status(t *testing.T, nc net.Conn) (int, http.Header) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(rawTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// rawTimeout bounds each wait of these tests (a failure, not a measure).
const rawTimeout = 5 * time.Second

const rawHead = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"

// Upgrade charges each request head in progress to the memory budget and
// reads at most MaxPendingHandshakes at once: past it the oldest head
// still arriving is answered 503, and the charges are given back.
func TestUpgradeChargesHeadsInProgressAndCutsTheOldestPastTheBound(t *testing.T) {
	budget := NewMemoryBudgetWith(0, &MemoryBudgetOptions{MaxPendingHandshakes: 2})
	h := newRawHeads(t, &AcceptOptions{ConnOptions: ConnOptions{MemoryBudget: budget}})
	perHead := int64(upgradeReadSize + DefaultMaxHeaderBytes)

	oldest, second := h.dial(), h.dial()
	for _, nc := range []net.Conn{oldest, second} {
		nc.Write([]byte(rawHead)) // the head, but for its last line
	}
	if got := budget.Stats()[MemoryHandshakes].Used; got != 2*perHead {
		t.Fatalf("two heads in progress charge %d, want %d", got, 2*perHead)
	}
	third := h.dial()

	if code, hdr := status(t, oldest); code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("the oldest head got %d (Retry-After %q), want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	for _, nc := range []net.Conn{second, third} {
		if nc == third {
			nc.Write([]byte(rawHead))
		}
		nc.Write([]byte("\r\n"))
		if code, _ := status(t, nc); code != http.StatusSwitchingProtocols {
			t.Fatalf("a newer head got %d, want 101", code)
		}
	}
	var refused int
	for range 3 {
		if err := <-h.results; err != nil {
			if he, ok := err.(*HandshakeError); !ok || he.Status != http.StatusServiceUnavailable {
				t.Fatalf("Upgrade returned %v, want a 503 HandshakeError", err)
			}
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d heads refused, want the oldest only", refused)
	}
	if st := budget.Stats()[MemoryHandshakes]; st.Used != 0 || st.Peak != 3*perHead {
		t.Errorf("handshakes: %d still charged, peak %d; want 0 and %d", st.Used, st.Peak, 3*perHead)
	}
	if n := budget.pendingHeads(); n != 0 {
		t.Errorf("%d heads still counted in progress", n)
	}
}

// A budget under pressure (or without room for a head) has Upgrade answer
// 503 before it reads anything.
func TestUpgradeRefusesNewConnectionsWith503WhenTheBudgetIsUnderPressure(t *testing.T) {
	budget := NewMemoryBudget(1 << 20)
	budget.Observe(1 << 20) // the whole budget held
	h := newRawHeads(t, &AcceptOptions{ConnOptions: ConnOptions{MemoryBudget: budget}})
	nc := h.connect()
	nc.Write([]byte(rawHead + "\r\n"))
	code, hdr := status(t, nc)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "5" {
		t.Fatalf("got %d (Retry-After %q), want 503 with Retry-After 5", code, hdr.Get("Retry-After"))
	}
	err := <-h.results
	if he, ok := err.(*HandshakeError); !ok || he.Status != http.StatusServiceUnavailable || !strings.Contains(he.Reason, "memory") {
		t.Fatalf("Upgrade returned %v, want a 503 HandshakeError about memory", err)
	}
	if st := budget.Stats()[MemoryHandshakes]; st.Used != 0 || st.Peak != 0 {
		t.Errorf("a refused head was charged: %+v", st)
	}

	budget.Observe(0)
	budget.SetLimit(8 << 10) // less than a head costs
	nc = h.connect()
	nc.Write([]byte(rawHead + "\r\n"))
	if code, _ := status(t, nc); code != http.StatusServiceUnavailable {
		t.Fatalf("a head that does not fit the budget got %d, want 503", code)
	}
	<-h.results
	if st := budget.Stats()[MemoryHandshakes]; st.Refused != 1 || st.Used != 0 {
		t.Errorf("handshakes: %d refused, %d charged; want 1 and 0", st.Refused, st.Used)
	}
}
