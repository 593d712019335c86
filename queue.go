package rally

import (
	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// sendQueue holds what a connection accepted for sending and the transport
// has not taken yet: whole frames, back to back, in the order they go on
// the wire, with a record per frame. It does no I/O and takes no lock; the
// connection guards it with its write lock and runs the completions it
// collects once that lock is released.
//
// Invariants (asserted by queue_test.go after every operation):
//
//  1. Wire order. buf[head:] holds the records' bytes back to back;
//     recs[first:] describes them in the same order, each ending at its
//     end offset. Bytes before head have been taken by the transport.
//  2. One completion per record, exactly once: a record completes when the
//     transport has taken its last byte (advance), or with the error that
//     stopped it (fail); a withdrawn record is completed by the caller
//     that withdrew it. Completions are collected in dones, never run
//     under the lock.
//  3. Ordered records (data frames, fragments, pings, the close frame)
//     never change places among themselves, so they carry increasing
//     sequence numbers and ordered record s has left exactly when
//     doneSeq >= s. Pongs are the control lane: they go to the first
//     record boundary the transport has not started (between two frames,
//     never inside one), behind the pongs already waiting there (pongs keep
//     their pings' order), carry no sequence number and so never move
//     doneSeq past data still waiting.
//  4. An unsent pong is replaced by a newer one (RFC 6455 5.5.3) only while
//     the queue is blocked (the kernel refused bytes since the queue was
//     last empty), never because the bytes are merely corked, nor because
//     a transport cannot offer bytes without blocking (a stream: there every
//     ping is answered).
//  5. Nothing after the close frame: once closed is set, push and hold
//     refuse.
//  6. While a message is streamed (streaming), whole frames sent meanwhile
//     wait in the held lane, in order, and join the tail when the stream
//     ends. They count in size (BufferedAmount, the limit, drain) like the
//     rest. A close frame accepted while a message is streamed does not
//     wait for it: the held frames fail (failHeld) and the close frame goes
//     after the fragments already queued.
//  7. A record marked keep (a fragment of a streamed message, a frame
//     compressed with context takeover, which the peer's inflater must see)
//     is never withdrawn.
//  8. Bytes in [head, busy) are being written by a transport outside the
//     lock: they are neither moved nor overwritten. The ahead bytes after
//     head are held by the transport (encrypted, not yet all in the
//     kernel): they count as started.
type sendQueue struct {
	buf   *[]byte // borrowed while the queue is non-empty
	head  int
	busy  int
	ahead int // bytes after head the transport holds though the kernel has not taken them
	recs  []record
	first int
	// start is where recs[first] begins in buf: below head once the
	// transport has taken part of it (negative after a compaction).
	start int

	held     *[]byte // the held lane's bytes (invariant 6)
	heldRecs []record

	seq, doneSeq uint64
	blocked      bool // invariant 4
	streaming    bool
	closed       bool

	dones []doneCall
}

// record is one frame in the queue.
type record struct {
	end  int    // offset in buf (or held) just past the frame's last byte
	seq  uint64 // 0 for a pong
	pong bool
	keep bool
	done func(error) // the sender's completion, if it asked for one
}

// doneCall is a completion to run once the write lock is released.
type doneCall struct {
	f   func(error)
	err error
}

// queued is the number of bytes in the main lane not yet taken.
func (q *sendQueue) queued() int {
	if q.buf == nil {
		return 0
	}
	return len(*q.buf) - q.head
}

// size is every byte accepted and not yet taken: the main lane and the
// held lane.
func (q *sendQueue) size() int {
	n := q.queued()
	if q.held != nil {
		n += len(*q.held)
	}
	return n
}

// footprint is the memory the queue holds: its buffers' capacity.
func (q *sendQueue) footprint() int64 {
	var n int
	if q.buf != nil {
		n += cap(*q.buf)
	}
	if q.held != nil {
		n += cap(*q.held)
	}
	return int64(n)
}

// empty reports whether nothing waits in either lane.
func (q *sendQueue) empty() bool { return q.size() == 0 }

// pending returns the main lane's bytes not yet taken.
func (q *sendQueue) pending() []byte {
	if q.buf == nil {
		return nil
	}
	return (*q.buf)[q.head:]
}

// push appends a frame made of hdr and payload at the tail of the main lane
// (payload masked with key when masked) and returns its sequence number.
// The caller checked closed.
func (q *sendQueue) push(hdr, payload []byte, masked bool, key [4]byte, keep bool, done func(error)) uint64 {
	q.seq++
	q.appendFrame(hdr, payload, masked, key)
	q.recs = append(q.recs, record{end: len(*q.buf), seq: q.seq, keep: keep, done: done})
	return q.seq
}

// pushTaken records a frame whose first taken bytes the transport accepted
// before it was queued (a direct write that the kernel took part of, or
// none of): rest is what is left of it, and the record starts taken bytes
// before the queue does. Only for an empty main lane. It returns the
// frame's sequence number (0 for a pong).
func (q *sendQueue) pushTaken(taken int, rest1, rest2 []byte, pong, keep bool, done func(error)) uint64 {
	r := record{pong: pong, keep: keep, done: done}
	if !pong {
		q.seq++
		r.seq = q.seq
	}
	q.appendBytes(rest1)
	q.appendBytes(rest2)
	r.end = len(*q.buf)
	q.recs = append(q.recs, r)
	q.start = q.head - taken
	return r.seq
}

// setDone gives waiting ordered record seq its completion.
func (q *sendQueue) setDone(seq uint64, done func(error)) {
	for i := len(q.recs) - 1; i >= q.first; i-- {
		if q.recs[i].seq == seq {
			q.recs[i].done = done
			return
		}
	}
}

// hold appends a whole frame to the held lane (invariant 6).
func (q *sendQueue) hold(hdr, payload []byte, masked bool, key [4]byte, keep bool, done func(error)) {
	n := len(hdr) + len(payload)
	if q.held == nil {
		q.held = bufpool.Get(n)
	} else if len(*q.held)+n > cap(*q.held) {
		nb := bufpool.Get(len(*q.held) + n)
		*nb = append(*nb, *q.held...)
		bufpool.Put(q.held)
		q.held = nb
	}
	*q.held = appendFrame(q.held, hdr, payload, masked, key)
	q.heldRecs = append(q.heldRecs, record{end: len(*q.held), keep: keep, done: done})
}

// endStream ends a streamed message: the held lane joins the tail of the
// main lane, its records getting their sequence numbers now (invariant 3).
// It returns the sequence number of the last of them (0 if none).
func (q *sendQueue) endStream() uint64 {
	q.streaming = false
	if q.held == nil {
		return 0
	}
	q.reserve(len(*q.held)) // may compact: the base is read after it
	base := len(*q.buf)
	q.appendBytes(*q.held)
	for _, r := range q.heldRecs {
		q.seq++
		r.end += base
		r.seq = q.seq
		q.recs = append(q.recs, r)
	}
	q.dropHeld()
	return q.seq
}

// failHeld completes every held frame with err and drops them: a close
// frame is about to end the connection in the middle of the streamed
// message they wait for.
func (q *sendQueue) failHeld(err error) {
	for i := range q.heldRecs {
		if d := q.heldRecs[i].done; d != nil {
			q.dones = append(q.dones, doneCall{d, err})
		}
	}
	q.dropHeld()
}

func (q *sendQueue) dropHeld() {
	bufpool.Put(q.held)
	q.held = nil
	clear(q.heldRecs)
	q.heldRecs = q.heldRecs[:0]
}

// pushPong puts a pong frame (already framed and masked) in the control
// lane: at the first record boundary not started, after replacing an
// unsent pong if the queue is blocked (invariants 3 and 4).
func (q *sendQueue) pushPong(f []byte) {
	if q.blocked {
		start := q.start
		for i := q.first; i < len(q.recs); i++ {
			if q.recs[i].pong && q.unstarted(start) {
				q.remove(i, start)
				break
			}
			start = q.recs[i].end
		}
	}
	q.reserve(len(f)) // may compact: offsets are read after it
	// The first boundary not started and behind every pong still waiting
	// (pongs keep the order of their pings).
	after := q.first
	for i := q.first; i < len(q.recs); i++ {
		if q.recs[i].pong {
			after = i + 1
		}
	}
	at, pos := len(q.recs), len(*q.buf)
	start := q.start
	for i := q.first; i < len(q.recs); i++ {
		if i >= after && q.unstarted(start) {
			at, pos = i, start
			break
		}
		start = q.recs[i].end
	}
	b := (*q.buf)[:len(*q.buf)+len(f)]
	copy(b[pos+len(f):], b[pos:len(b)-len(f)])
	copy(b[pos:], f)
	*q.buf = b
	for j := at; j < len(q.recs); j++ {
		q.recs[j].end += len(f)
	}
	q.recs = append(q.recs, record{})
	copy(q.recs[at+1:], q.recs[at:])
	q.recs[at] = record{end: pos + len(f), pong: true}
}

// unstarted reports whether a record starting at start has not begun to
// leave and is not being written.
func (q *sendQueue) unstarted(start int) bool {
	return start >= q.head+q.ahead && start >= q.busy
}

// advance records that the transport took n more bytes of the main lane,
// completing the records it finished (invariant 2).
func (q *sendQueue) advance(n int) {
	if n == 0 {
		return
	}
	q.head += n
	for q.first < len(q.recs) && q.recs[q.first].end <= q.head {
		r := &q.recs[q.first]
		if r.seq > q.doneSeq {
			q.doneSeq = r.seq
		}
		if r.done != nil {
			q.dones = append(q.dones, doneCall{r.done, nil})
			r.done = nil
		}
		q.start = r.end
		q.first++
	}
	if q.head == len(*q.buf) {
		q.blocked = false
		q.releaseIfEmpty()
	}
}

// withdraw takes back ordered record seq if none of its bytes have left and
// it may be withdrawn (invariant 7). It reports whether it did; the
// caller completes it.
func (q *sendQueue) withdraw(seq uint64) (func(error), bool) {
	start := q.start
	for i := q.first; i < len(q.recs); i++ {
		r := q.recs[i]
		if r.seq == seq {
			if r.keep || !q.unstarted(start) {
				return nil, false
			}
			q.remove(i, start)
			return r.done, true
		}
		start = r.end
	}
	return nil, false
}

// remove deletes record i, which starts at start and has not begun to leave.
func (q *sendQueue) remove(i, start int) {
	b := *q.buf
	end := q.recs[i].end
	size := end - start
	copy(b[start:], b[end:])
	*q.buf = b[:len(b)-size]
	for j := i + 1; j < len(q.recs); j++ {
		q.recs[j].end -= size
	}
	q.recs = append(q.recs[:i], q.recs[i+1:]...)
	q.releaseIfEmpty()
}

// fail completes every record still waiting, in both lanes, with err, and
// empties the queue (bytes being written stay until the writer is done).
func (q *sendQueue) fail(err error) {
	for i := q.first; i < len(q.recs); i++ {
		if d := q.recs[i].done; d != nil {
			q.dones = append(q.dones, doneCall{d, err})
			q.recs[i].done = nil
		}
	}
	for i := range q.heldRecs {
		if d := q.heldRecs[i].done; d != nil {
			q.dones = append(q.dones, doneCall{d, err})
		}
	}
	q.dropHeld()
	if q.buf != nil {
		q.head = len(*q.buf)
		q.first = len(q.recs)
	}
	q.blocked = false
	q.releaseIfEmpty()
}

// releaseIfEmpty gives an empty main lane's buffer back, so an idle
// connection holds none.
func (q *sendQueue) releaseIfEmpty() {
	if q.buf == nil || q.head != len(*q.buf) || q.busy != 0 {
		return
	}
	bufpool.Put(q.buf)
	q.buf = nil
	q.head = 0
	q.ahead = 0
	clear(q.recs)
	q.recs = q.recs[:0]
	q.first = 0
	q.start = 0
}

func (q *sendQueue) appendFrame(hdr, payload []byte, masked bool, key [4]byte) {
	q.reserve(len(hdr) + len(payload))
	*q.buf = appendFrame(q.buf, hdr, payload, masked, key)
}

func (q *sendQueue) appendBytes(b []byte) {
	if len(b) == 0 {
		if q.buf == nil {
			q.buf = bufpool.Get(0)
		}
		return
	}
	q.reserve(len(b))
	*q.buf = append(*q.buf, b...)
}

// reserve makes room for n more bytes in the main lane, compacting taken
// bytes away before growing (never those being written: invariant 8).
// It compacts only when the taken bytes are at least a quarter of those it
// would move: a queue of megabytes that the peer drains a little at a time
// is not moved for each frame appended (each byte is moved at most four
// times per byte taken); it grows instead, to twice its size at most.
func (q *sendQueue) reserve(n int) {
	if q.buf == nil {
		q.buf = bufpool.Get(n)
		return
	}
	b := *q.buf
	if len(b)+n <= cap(b) {
		return
	}
	if q.busy == 0 && q.head > 0 && 4*q.head >= len(b)-q.head {
		m := copy(b, b[q.head:])
		for i := q.first; i < len(q.recs); i++ {
			q.recs[i].end -= q.head
		}
		q.recs = q.recs[:copy(q.recs, q.recs[q.first:])]
		q.first = 0
		q.start -= q.head
		q.head = 0
		b = b[:m]
		*q.buf = b
		if m+n <= cap(b) {
			return
		}
	}
	nb := bufpool.Get(len(b) + n)
	*nb = append(*nb, b...)
	if q.busy == 0 {
		bufpool.Put(q.buf)
	}
	// While a transport writes from the old buffer it stays with it (and
	// goes to the garbage collector, not the pool, afterwards).
	q.buf = nb
}

// appendFrame appends hdr and payload (masked with key when masked) to *b,
// whose capacity the caller made sufficient.
func appendFrame(b *[]byte, hdr, payload []byte, masked bool, key [4]byte) []byte {
	out := append(*b, hdr...)
	if !masked {
		return append(out, payload...)
	}
	start := len(out)
	out = out[:start+len(payload)]
	frame.MaskCopy(out[start:], payload, key, 0)
	return out
}
