package rally

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rallyws/rally/internal/bufpool"
)

// Defaults of the raw upgrade, applied when AcceptOptions leaves the
// setting at its zero value.
const (
	// DefaultUpgradeTimeout bounds how long Upgrade waits for a request
	// head and takes to answer it.
	DefaultUpgradeTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds the request head Upgrade reads.
	DefaultMaxHeaderBytes = 16 << 10
)

// upgradeReadSize is how much Upgrade asks the connection for at a time.
const upgradeReadSize = 4 << 10

// Upgrade performs the server side of the opening handshake on nc, a
// connection fresh from a net.Listener (or a *tls.Conn), without net/http:
// it reads the request straight from nc, answers it, and returns the open
// server-side connection together with the request. A nil opts means the
// defaults, as for Accept.
//
// The request head may take at most opts.MaxHeaderBytes
// (DefaultMaxHeaderBytes when 0; 431 past it) and must arrive, and the
// answer be written, within opts.HandshakeTimeout (DefaultUpgradeTimeout
// when 0), which is the defence against clients that hold connections
// open by sending slowly. With opts.MemoryBudget set, the head is charged
// to the budget at its largest while it arrives, and a new connection gets
// 503 (with Retry-After) when the budget is under pressure or has no room
// for it; at most the budget's MaxPendingHandshakes heads are read at once,
// the oldest one still arriving answered 503 and closed past it (see
// MemoryBudgetOptions). A malformed head gets 400 (505 for an HTTP
// version other than 1.x). A well-formed request then meets the same
// rules and hooks as in Accept, in the same order, and a refused one gets
// the same answers. Bytes the client sent after the request head (an
// eager client's first frames) are the start of the WebSocket stream.
//
// Upgrade owns nc from the call on: when it fails, nc has been answered
// (if the failure allows it) and closed. The request is returned whenever
// a well-formed head was read, also with an error: its URL and headers say
// what was asked, its Body is empty, RemoteAddr is nc's, and TLS is set
// for a *tls.Conn. Every failure but a rejection by opts.Authorize is also
// told to opts.OnHandshakeError. Upgrade blocks until the handshake is
// done; to serve many connections, call it on a goroutine per connection.
func Upgrade(nc net.Conn, opts *AcceptOptions) (*Conn, *http.Request, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultUpgradeTimeout
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		nc.Close()
		return nil, nil, opts.handshakeFailed(nil, fmt.Errorf("rally: accept: setting the handshake deadline: %w", err))
	}

	p := requestParser{max: opts.MaxHeaderBytes}
	if p.max <= 0 {
		p.max = DefaultMaxHeaderBytes
	}
	// The head is charged to the memory budget at its largest: the read
	// buffer and a head of p.max bytes.
	budget := opts.MemoryBudget
	headCost := int64(upgradeReadSize + p.max)
	h, rf := budget.admitHead(nc, headCost)
	if rf != nil {
		return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, rf))
	}
	buf := bufpool.Get(upgradeReadSize)
	*buf = (*buf)[:cap(*buf)]
	var rest []byte
	for {
		k, err := nc.Read(*buf)
		if k > 0 {
			n, done, perr := p.feed((*buf)[:k])
			if perr != nil {
				bufpool.Put(buf)
				budget.headDone(h, headCost)
				return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, perr.(*refusalError).rf))
			}
			if done {
				rest = (*buf)[n:k]
				break
			}
		}
		if err != nil {
			bufpool.Put(buf)
			if budget.headDone(h, headCost) {
				return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, headsCut()))
			}
			nc.Close()
			return nil, nil, opts.handshakeFailed(nil, readRequestError(err, p.used, timeout))
		}
	}
	if budget.headDone(h, headCost) {
		bufpool.Put(buf)
		return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, headsCut()))
	}
	if len(rest) == 0 {
		bufpool.Put(buf)
		rest = nil
	}
	// Otherwise the buffer is handed over with the bytes in it: newConn
	// takes ownership of them, and the buffer is never put back.

	r, answer, n, rf := p.answer(nc, opts)
	if rf != nil {
		return nil, r, opts.refused(r, refuseRaw(nc, rf), rf)
	}
	if _, err := nc.Write(answer); err != nil {
		nc.Close()
		return nil, r, opts.handshakeFailed(r, fmt.Errorf("rally: accept: writing the 101 response: %w", err))
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		nc.Close()
		return nil, r, opts.handshakeFailed(r, fmt.Errorf("rally: accept: clearing the handshake deadline: %w", err))
	}
	c := startConn(nc, rest, true, n.subprotocol, &opts.ConnOptions)
	if n.ext != "" {
		c.enableCompression(opts.Compression, n.params)
	}
	c.setData(n.data)
	return c, r, nil
}

// answer applies the handshake's rules and hooks, in the same order as
// Accept, to the complete head p read from nc: it returns the request and
// the bytes of the 101 response with what was negotiated, or the refusal
// to answer with. The request is nil when the head's framing was wrong
// (see request). Upgrade and the event loops' raw handshakes (see
// loop_accept_linux.go) both answer through it.
func (p *requestParser) answer(nc net.Conn, opts *AcceptOptions) (*http.Request, []byte, negotiation, *refusal) {
	r, rf := p.request(nc)
	if rf != nil {
		return nil, nil, negotiation{}, rf
	}
	q := upgradeRequestOf(r)
	key, rf := q.check(opts)
	header := http.Header{}
	n, rf := opts.negotiate(r, &q, header, rf)
	if rf != nil {
		return r, nil, n, rf
	}
	return r, appendSwitchingProtocols(make([]byte, 0, 160), key, n.subprotocol, n.ext, header), n, nil
}

// admitHead admits a request head that Upgrade is about to read on nc, of
// at most size bytes with its buffer: it charges them to the budget and
// counts the head among those in progress (cutting the oldest one if that
// makes more than MaxPendingHandshakes). It refuses with 503 when the
// budget does not admit new connections or has no room for the head. A
// nil budget admits every head and tracks none.
func (b *MemoryBudget) admitHead(nc net.Conn, size int64) (*pendingHead, *refusal) {
	if b == nil {
		return nil, nil
	}
	if rf := b.refuseNew(); rf != nil {
		return nil, rf
	}
	if !b.charge(MemoryHandshakes, size) {
		return nil, memoryBusy()
	}
	return b.heads.start(nc, b.opts.MaxPendingHandshakes), nil
}

// refuseNew returns the answer to a new connection when the budget does
// not admit new ones (see AdmitsNew), or nil.
func (b *MemoryBudget) refuseNew() *refusal {
	if b == nil || b.AdmitsNew() {
		return nil
	}
	return memoryBusy()
}

// memoryBusy is the answer to a new connection the memory budget has no
// room for.
func memoryBusy() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, reason: "server busy: memory budget under pressure; retry later",
		headers: []string{"Retry-After", "5"}}
}

// headDone ends a head admitHead admitted (it arrived, or will not):
// its charge is given back. It reports whether the head had been cut to
// make room for newer ones, in which case it must be refused with
// headsCut.
func (b *MemoryBudget) headDone(h *pendingHead, size int64) (cut bool) {
	if b == nil {
		return false
	}
	b.release(MemoryHandshakes, size)
	return b.heads.finish(h)
}

// headsCut is the answer to a head cut to make room for newer ones.
func headsCut() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, reason: "server busy: too many request heads in progress; retry later",
		headers: []string{"Retry-After", "5"}}
}

// headQueue holds the request heads Upgrade reads at once for the
// connections of one MemoryBudget, oldest first. Past a bound, the oldest
// head still arriving is cut: its read is woken (a read deadline in the
// past) and its Upgrade answers 503. A client that sends its head at once
// is served while slow ones (a slowloris) give way, oldest first.
type headQueue struct {
	mu      sync.Mutex
	pending int
	queue   []*pendingHead // in the order they started; finished ones are skipped
}

// pendingHead is one head in progress. Its fields are guarded by the
// queue's mutex.
type pendingHead struct {
	nc   net.Conn
	done bool // finished, or cut
	cut  bool
}

// start counts a new head on nc, cutting the oldest other one if that
// makes more than limit (limit <= 0: no bound).
func (q *headQueue) start(nc net.Conn, limit int) *pendingHead {
	h := &pendingHead{nc: nc}
	q.mu.Lock()
	q.queue = append(q.queue, h)
	q.pending++
	var oldest *pendingHead
	if limit > 0 && q.pending > limit {
		oldest = q.oldestLocked(h)
	}
	if len(q.queue) > 2*max(q.pending, 512) {
		q.compactLocked()
	}
	q.mu.Unlock()
	if oldest != nil {
		oldest.nc.SetReadDeadline(time.Now())
	}
	return h
}

// oldestLocked cuts and returns the oldest head in progress other than
// h, or nil, dropping it and the finished heads before it from the queue.
func (q *headQueue) oldestLocked(h *pendingHead) *pendingHead {
	for i, o := range q.queue {
		if o == h || o.done {
			continue
		}
		o.done, o.cut = true, true
		q.pending--
		clear(q.queue[:i+1])
		q.queue = q.queue[i+1:]
		return o
	}
	return nil
}

// compactLocked drops finished heads from the queue.
func (q *headQueue) compactLocked() {
	k := q.queue[:0]
	for _, o := range q.queue {
		if !o.done {
			k = append(k, o)
		}
	}
	clear(q.queue[len(k):])
	q.queue = k
}

// finish ends h and reports whether it had been cut.
func (q *headQueue) finish(h *pendingHead) (cut bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !h.done {
		h.done = true
		q.pending--
	}
	return h.cut
}

// pendingHeads returns how many request heads Upgrade is reading now on
// connections charged to the budget.
func (b *MemoryBudget) pendingHeads() int {
	b.heads.mu.Lock()
	defer b.heads.mu.Unlock()
	return b.heads.pending
}

// readRequestError describes why the request head could not be read, after
// used bytes of it had arrived.
func readRequestError(err error, used int, timeout time.Duration) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("rally: accept: the request head did not arrive within %v (%d bytes came): %w", timeout, used, err)
	case used == 0:
		return fmt.Errorf("rally: accept: reading the request: %w", err)
	}
	return fmt.Errorf("rally: accept: the connection ended within the request head (%d bytes came): %w", used, err)
}

// refuseRaw answers a declined handshake on nc, closes nc, and returns the
// error Upgrade reports.
func refuseRaw(nc net.Conn, rf *refusal) error {
	nc.Write(appendRefusal(make([]byte, 0, 256), rf))
	lingerClose(nc)
	return &HandshakeError{Status: rf.status, Reason: rf.reason}
}

// lingerLimit bounds what lingerClose reads and how long it waits for it.
const (
	lingerBytes = 64 << 10
	lingerTime  = 500 * time.Millisecond
)

// lingerClose closes nc after an answer was written to it, so that the
// client reads the answer: closing a TCP socket with unread bytes in it
// sends a reset, which may destroy the answer in flight. So it closes the
// sending side first and drops what the client still sends, up to a bound
// in bytes and time, before closing.
func lingerClose(nc net.Conn) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		nc.Close()
		return
	}
	deadline := time.Now().Add(lingerTime)
	nc.SetReadDeadline(deadline)
	var b [512]byte
	for n := 0; n < lingerBytes; {
		k, err := nc.Read(b[:])
		n += k
		if err != nil {
			break
		}
	}
	nc.Close()
}
