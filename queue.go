package rally

import (
	"sync"
	"unsafe"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// sendQueue holds what a connection accepted for sending and the transport
// has not taken yet: whole frames, in the order they go on the wire, with a
// record per frame. A frame's bytes are its owned bytes, copied into the
// queue's buffer, followed by the bytes it refers to (see invariant 9). It
// does no I/O and takes no lock; the connection guards it with its write
// lock and runs the completions it collects once that lock is released.
//
// Offsets (head, busy, start and each record's end) count the bytes
// of the main lane as they go on the wire, owned and referred to alike;
// ostart and oend place a record's owned bytes in buf.
//
// Invariants (asserted by queue_test.go after every operation):
//
//  1. Wire order. The records recs[first:] hold the main lane's bytes from
//     head to the last record's end, in order, each ending at its end
//     offset; their owned bytes lie back to back in buf in the same order.
//     Bytes before head have been taken by the transport.
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
//     ends. They count in size (BufferedAmount, drain) and cost (the
//     limit) like the rest. A close frame accepted while a message is streamed does not
//     wait for it: the held frames fail (failHeld) and the close frame goes
//     after the fragments already queued. The held lane owns all its bytes.
//  7. A record marked keep (a fragment of a streamed message, a frame
//     compressed with context takeover, which the peer's inflater must see)
//     is never withdrawn.
//  8. Bytes in [head, busy) are being written by a transport outside the
//     lock: they are neither moved nor overwritten. The ahead bytes after
//     head are held by the transport (encrypted, not yet all in the
//     kernel): they count as started.
//  9. References. A record's ref is bytes the queue does not own: a
//     PreparedMessage's frame, immutable and shared by every receiver (the
//     reference keeps it alive; nobody reuses it). The queue never writes
//     to them, and drops the reference when the record completes, is
//     withdrawn or fails. A record's chunk is the one exception: a pooled
//     buffer the queue owns and copied a large payload into (chunkMin),
//     referred to like the rest and given back to the pool when the
//     reference is dropped, unless bytes are being written then (they may
//     be its own; the garbage collector takes it). Only payloads of refMin bytes or more are
//     referred to: a smaller one is cheaper to copy than to gather. A
//     referred frame counts in size (BufferedAmount, drain) and cost (the
//     limit) like an owned one. In the memory budget's charge a chunk counts in
//     footprint, the queue's own; a shared frame is charged once, however
//     many queues refer to it, through its reference count (see
//     frameShare): the queue of a connection with a budget takes a
//     reference when it refers to the frame and lets go of it when it
//     drops the reference, and the frame is outside its footprint.
//  10. Joined frames. A frame pushed with join (a non-blocking send
//     without a completion: nobody waits for it, withdraws it or is told
//     when it left) whose bytes are all owned joins the last record when
//     that one was pushed the same way and has not begun to leave: the
//     record grows by the frame's bytes and takes its sequence number.
//     Such a record completes when its last frame has left, so doneSeq
//     reaching a joined frame's number still means it left (the converse
//     holds for the last frame of the record only). A pong still goes to
//     the first boundary not started, which a joined record's start is.
//     A queue that waits for its peer then costs a frame's bytes, not a
//     record (88 bytes) per frame: behind a reader that stopped, a publish
//     of a few compressed bytes copies those bytes and nothing more.
type sendQueue struct {
	// The main lane's bytes and records, while it holds some (see
	// queueLane); nil while it is empty, which is what every method sees
	// as head, busy, ahead, first, start, refs and shared at 0 and no
	// buffer nor records.
	*queueLane

	held *heldLane // invariant 6; made by the first hold

	seq, doneSeq uint64
	blocked      bool // invariant 4
	streaming    bool
	closed       bool
	budget       uint32 // the id of the connection's memory budget, which shared frames are charged to; 0: none

	dones *doneList // made by the first completion
}

// doneList is a queue's completions: those collected to run once the
// write lock is released (calls), and the slice kept for the next batch
// while they run (spare). It is made by the first completion and kept: a
// connection whose sends ask for completions goes on asking, and keeping
// both slices between batches is what spares each send an allocation.
type doneList struct {
	calls []doneCall
	spare []doneCall
}

// addDone collects a completion (invariant 2).
func (q *sendQueue) addDone(f func(error), err error) {
	if q.dones == nil {
		q.dones = new(doneList)
	}
	q.dones.calls = append(q.dones.calls, doneCall{f, err})
}

// pendingDones is the number of completions collected and not yet run.
func (q *sendQueue) pendingDones() int {
	if q.dones == nil {
		return 0
	}
	return len(q.dones.calls)
}

// queueLane is the main lane's state: borrowed from lanes by the first
// frame queued and given back once the lane is empty and nothing is being
// written from it (releaseIfEmpty), so that a connection whose frames all
// left (an idle one) holds none. The pool keeps a lane's records' array
// (keepRecords at most): a connection that queues a batch at a time takes
// a lane and gives it back without allocating, as its buffer is borrowed
// from bufpool.
type queueLane struct {
	buf   *[]byte // owned bytes; borrowed while the queue holds some
	head  int
	busy  int
	ahead int // bytes after head the transport holds though the kernel has not taken them
	recs  []record
	first int
	// start is where recs[first] begins: below head once the transport has
	// taken part of it.
	start int
	refs  int // bytes referred to by recs[first:] (invariant 9)
	// shared is the part of refs that frames charged once (by reference
	// count) hold: outside footprint.
	shared int
}

// lanes are the main lanes of the queues that hold frames now, and the
// spare ones.
var lanes = sync.Pool{New: func() any { return new(queueLane) }}

// lane returns the main lane, borrowing one if the queue has none.
func (q *sendQueue) lane() *queueLane {
	if q.queueLane == nil {
		q.queueLane = lanes.Get().(*queueLane)
	}
	return q.queueLane
}

// setAhead records the bytes after head that the transport holds though
// the kernel has not taken them (a lane is borrowed only if there are
// some).
func (q *sendQueue) setAhead(n int) {
	if q.queueLane == nil && n == 0 {
		return
	}
	q.lane().ahead = n
}

// refMin is the smallest payload the queue refers to rather than copies
// (invariant 9). Below it, one more iovec in the gathered write (and the
// walk over it) costs more than copying the bytes next to their header
// and the frames around them. Measured: 32 prepared frames pushed,
// gathered and written to a pipe with one writev, best of 5 (ns per
// batch, copied / referred to): 128 B 3,143 / 7,070; 256 B 4,155 / 6,283;
// 512 B 11,684 / 8,264; 1 KiB 20,886 / 9,224; 2 KiB 32,208 / 18,134.
const refMin = 512

// chunkMin is the smallest payload the queue copies into a chunk of its
// own (a pooled buffer it refers to, invariant 9) when buf has no room for
// it, instead of growing buf: growing copies what buf holds, so a cork
// gathering a few 16 KiB replies copied each byte about twice.
const chunkMin = 4 << 10

// heldLane is the frames sent while a message is streamed (invariant 6):
// their bytes, borrowed while there are some, and their records.
type heldLane struct {
	buf  *[]byte
	recs []record
}

// heldBytes is the held lane's bytes, and its buffer's capacity.
func (q *sendQueue) heldBytes() (n, capacity int) {
	if q.held == nil || q.held.buf == nil {
		return 0, 0
	}
	return len(*q.held.buf), cap(*q.held.buf)
}

// record is one frame in the queue. Its bytes are buf[ostart:oend]
// followed by ref; a record the transport started may have fewer of them
// than its length: what is left are always its last bytes.
type record struct {
	end          int // offset just past the frame's last byte (in the held lane: in held)
	ostart, oend int // its owned bytes in buf
	ref          []byte
	chunk        *[]byte     // ref's buffer when the queue owns it (see chunkMin), given back when the record goes
	share        *frameShare // ref's frame when the queue holds a reference to it (invariant 9)
	seq          uint64      // 0 for a pong
	pong         bool
	keep         bool
	join         bool        // frames pushed with join may join it (invariant 10)
	done         func(error) // the sender's completion, if it asked for one
}

// charge is what the record's ref counts in refs: a chunk's capacity, or
// the bytes referred to.
func (r *record) charge() int {
	if r.chunk != nil {
		return cap(*r.chunk)
	}
	return len(r.ref)
}

// dropRef lets go of the record's ref (invariant 9), giving a chunk back
// to the pool unless bytes are being written, which may be its own.
func (q *sendQueue) dropRef(r *record) {
	q.refs -= r.charge()
	if r.chunk != nil && q.busy == 0 {
		bufpool.Put(r.chunk)
	}
	if r.share != nil {
		q.shared -= len(r.ref)
		dropShare(r.share)
	}
	r.ref, r.chunk, r.share = nil, nil, nil
}

// referShared makes r refer to ref, the tail of a shared frame whose
// header is s (nil: a frame not made to be shared), taking a reference to
// it if the connection has a memory budget (invariant 9).
func (q *sendQueue) referShared(r *record, ref []byte, s *frameShare) {
	r.ref = ref
	q.refs += len(ref)
	if q.budget != 0 && s != nil {
		r.share = s
		q.shared += len(ref)
		takeShare(s, q.budget)
	}
}

// recordSize is the memory a record takes in the queue's array.
const recordSize = int(unsafe.Sizeof(record{}))

// keepRecords is the most records whose array an empty queue keeps for
// the next frames: a larger one (a slow peer's backlog) is given back,
// to recordArrays if it is one of their sizes.
const keepRecords = 64

// recordArrays keep the record arrays of keepRecords<<(i+1) records
// (128 to 1024: as many frames as one writev carries, iovMax), each in a
// lane that holds nothing else, for the queues that grow past
// keepRecords. A fan-out gathers a frame per publish for each receiver
// (a shared frame is a record of its own, invariant 9): a chat turn of
// 32 publishers and 8 messages each is 256 records per receiver, and the
// arrays that grew to hold them, 33 KB per receiver and turn, were the
// larger part of what the process allocated. Arrays of other sizes
// (larger ones, a slow peer's backlog) are left to the collector.
var recordArrays [4]sync.Pool

// recordArrayClass returns i for an array of keepRecords<<(i+1) records
// (see recordArrays), else -1.
func recordArrayClass(n int) int {
	for i := range recordArrays {
		if n == keepRecords<<(i+1) {
			return i
		}
	}
	return -1
}

// roomForRecord makes room for one more record. A full array of fewer
// than keepRecords grows by doubling; one of keepRecords or more is replaced by one of the next of recordArrays'
// sizes, taken from them when they have one; the full array goes back to
// them (or to lanes, if it is of keepRecords or fewer).
func (q *sendQueue) roomForRecord() {
	n := cap(q.recs)
	if len(q.recs) < n {
		return
	}
	if n < keepRecords {
		// Doubled up to keepRecords exactly (append would round to
		// the allocator's sizes, 68 records past 34), so that the lane
		// keeps its array.
		recs := make([]record, n, min(max(2*n, 4), keepRecords))
		copy(recs, q.recs)
		q.recs = recs
		return
	}
	i := 0
	for i < len(recordArrays) && keepRecords<<(i+1) <= n {
		i++
	}
	if i == len(recordArrays) {
		return // append grows it
	}
	b, _ := recordArrays[i].Get().(*queueLane)
	if b == nil {
		b = &queueLane{recs: make([]record, 0, keepRecords<<(i+1))}
	}
	recs := append(b.recs[:0], q.recs...)
	clear(q.recs)
	b.recs = q.recs[:0]
	q.recs = recs
	switch j := recordArrayClass(n); {
	case j >= 0:
		recordArrays[j].Put(b)
	case n <= keepRecords:
		lanes.Put(b)
	}
}

// present is how many of the record's bytes the queue still has.
func (r *record) present() int { return r.oend - r.ostart + len(r.ref) }

// doneCall is a completion to run once the write lock is released.
type doneCall struct {
	f   func(error)
	err error
}

// queued is the number of bytes in the main lane not yet taken.
func (q *sendQueue) queued() int {
	if q.queueLane == nil {
		return 0
	}
	return q.tail() - q.head
}

// copiedAtLeast reports whether the main lane's frames hold n bytes or
// more that the queue copied (its owned bytes and chunks), as opposed to
// shared frames it refers to. A frame the transport has begun counts
// whole.
func (q *sendQueue) copiedAtLeast(n int) bool {
	if q.queued() < n {
		return false
	}
	copied := 0
	for i := q.first; i < len(q.recs); i++ {
		r := &q.recs[i]
		copied += r.oend - r.ostart
		if r.chunk != nil {
			copied += len(r.ref)
		}
		if copied >= n {
			return true
		}
	}
	return false
}

// tail is the offset just past the main lane's last byte.
func (q *sendQueue) tail() int {
	if q.queueLane == nil {
		return 0
	}
	if q.first < len(q.recs) {
		return q.recs[len(q.recs)-1].end
	}
	return q.head
}

// size is every byte accepted and not yet taken: the main lane and the
// held lane.
func (q *sendQueue) size() int {
	held, _ := q.heldBytes()
	return q.queued() + held
}

// frames is how many frames wait in either lane.
func (q *sendQueue) frames() int {
	n := 0
	if q.queueLane != nil {
		n = len(q.recs) - q.first
	}
	if q.held != nil {
		n += len(q.held.recs)
	}
	return n
}

// cost is what the buffer limit counts: every byte accepted and not yet
// taken, and each waiting record (recordSize). Without the records a queue
// of small frames (compressed repeats, a few bytes each) that could not be
// joined (invariant 10: each with a completion, or shared) held several
// times its limit: 1 MiB of 30-byte frames is 35,000 records, 3 MiB.
func (q *sendQueue) cost() int { return q.size() + q.frames()*recordSize }

// footprint is the memory the queue holds on its own account: its
// buffers' capacity, its records' while it holds some (88 bytes a frame:
// a slow peer's queue of small shared frames is mostly records), and the
// bytes it refers to but shared frames charged once (invariant 9).
func (q *sendQueue) footprint() int64 {
	_, held := q.heldBytes()
	if q.queueLane == nil {
		return int64(held)
	}
	n := q.refs - q.shared
	if q.buf != nil {
		n += cap(*q.buf)
	}
	if q.first < len(q.recs) {
		n += cap(q.recs) * recordSize
	}
	n += held
	return int64(n)
}

// empty reports whether nothing waits in either lane.
func (q *sendQueue) empty() bool { return q.size() == 0 }

// olen is the length of the owned bytes.
func (q *sendQueue) olen() int {
	if q.queueLane == nil || q.buf == nil {
		return 0
	}
	return len(*q.buf)
}

// gather appends to bufs the main lane's bytes not yet taken, in order, as
// at most cap(bufs) slices (owned bytes of neighbouring records in one),
// and returns it. The slices are the queue's: valid until it changes.
func (q *sendQueue) gather(bufs [][]byte) [][]byte {
	if q.queueLane == nil {
		return bufs
	}
	pos := q.head
	owned := -1 // where the last slice starts in buf, if it is owned bytes
	for i := q.first; i < len(q.recs); i++ {
		r := &q.recs[i]
		n := r.oend - r.ostart
		skip := pos - (r.end - r.present())
		pos = r.end
		if skip < n {
			from := r.ostart + skip
			switch {
			case owned >= 0 && len(bufs) > 0 && owned+len(bufs[len(bufs)-1]) == from:
				bufs[len(bufs)-1] = (*q.buf)[owned:r.oend]
			case len(bufs) == cap(bufs):
				return bufs
			default:
				owned = from
				bufs = append(bufs, (*q.buf)[from:r.oend])
			}
		}
		if len(r.ref) > 0 {
			if len(bufs) == cap(bufs) {
				return bufs
			}
			owned = -1
			bufs = append(bufs, r.ref[max(skip-n, 0):])
		}
	}
	return bufs
}

// segment returns the first slice gather would: the main lane's next
// bytes, as far as they are contiguous (nil when nothing waits).
func (q *sendQueue) segment() []byte {
	var one [1][]byte
	if s := q.gather(one[:0]); len(s) > 0 {
		return s[0]
	}
	return nil
}

// push appends a frame made of hdr and payload at the tail of the main lane
// (payload masked with key when masked) and returns its sequence number.
// When shared, payload is immutable for as long as the queue holds it (a
// PreparedMessage's frame, whose header is share when it has one) and the
// queue may refer to it instead of copying it (invariant 9). With join
// (no completion, never withdrawn, not keep) a frame whose bytes are
// copied may join the last record (invariant 10). The caller checked
// closed.
func (q *sendQueue) push(hdr, payload []byte, masked bool, key [4]byte, keep, shared bool, share *frameShare, done func(error), join bool) uint64 {
	q.lane()
	q.seq++
	r := record{seq: q.seq, keep: keep, done: done}
	switch {
	case shared && !masked && len(payload) >= refMin:
		q.appendOwned(hdr, nil)
		q.referShared(&r, payload, share)
	case len(payload) >= chunkMin && q.buf != nil && len(*q.buf)+len(hdr)+len(payload) > cap(*q.buf):
		// A large payload that buf has no room for goes into a chunk of
		// its own rather than making buf grow (which would copy every
		// byte already in it).
		q.appendOwned(hdr, nil)
		r.chunk = bufpool.Get(len(payload))
		*r.chunk = appendFrame(r.chunk, nil, payload, masked, key)
		r.ref = *r.chunk
		q.refs += cap(*r.chunk)
	default:
		q.reserve(len(hdr) + len(payload))
		*q.buf = appendFrame(q.buf, hdr, payload, masked, key)
		if join && !keep && done == nil {
			if q.joinLast(len(hdr) + len(payload)) {
				return q.seq
			}
			r.join = true
		}
	}
	q.appendRecord(r, len(hdr)+len(payload))
	return q.seq
}

// joinLast makes the frame of size bytes just appended to buf part of the
// last record, if that one may be joined and has not begun to leave
// (invariant 10), and reports whether it did.
func (q *sendQueue) joinLast(size int) bool {
	n := len(q.recs)
	if n == q.first {
		return false
	}
	l := &q.recs[n-1]
	if !l.join || l.oend != q.olen()-size { // a joinable record owns all its bytes (push)
		return false
	}
	start := q.start
	if n-1 > q.first {
		start = q.recs[n-2].end
	}
	if !q.unstarted(start) {
		return false
	}
	l.oend += size
	l.end += size
	l.seq = q.seq
	return true
}

// appendOwned copies a then b at the tail of buf.
func (q *sendQueue) appendOwned(a, b []byte) {
	if len(a)+len(b) == 0 {
		return
	}
	q.reserve(len(a) + len(b))
	*q.buf = append(append(*q.buf, a...), b...)
}

// appendRecord records the frame of size bytes whose owned bytes were
// just appended to buf, following those of the record before it.
func (q *sendQueue) appendRecord(r record, size int) {
	r.oend = q.olen()
	r.ostart = r.oend - (size - len(r.ref))
	r.end = q.tail() + size
	q.roomForRecord()
	q.recs = append(q.recs, r)
}

// pushTaken records a frame whose first taken bytes the transport accepted
// before it was queued (a direct write that the kernel took part of, or
// none of): rest1 and rest2 are what is left of it (rest2 referred to when
// shared, as in push), and the record starts taken bytes before the queue
// does. Only for an empty main lane. It returns the frame's sequence
// number (0 for a pong).
func (q *sendQueue) pushTaken(taken int, rest1, rest2 []byte, shared, pong, keep bool, done func(error)) uint64 {
	return q.pushTakenShare(taken, rest1, rest2, shared, nil, pong, keep, done)
}

// pushTakenShare is pushTaken for a shared frame whose header is share.
func (q *sendQueue) pushTakenShare(taken int, rest1, rest2 []byte, shared bool, share *frameShare, pong, keep bool, done func(error)) uint64 {
	q.lane()
	r := record{pong: pong, keep: keep, done: done}
	if !pong {
		q.seq++
		r.seq = q.seq
	}
	if shared && len(rest2) >= refMin {
		q.appendOwned(rest1, nil)
		q.referShared(&r, rest2, share)
	} else {
		q.appendOwned(rest1, rest2)
	}
	q.appendRecord(r, len(rest1)+len(rest2))
	q.start = q.head - taken
	return r.seq
}

// setDone gives waiting ordered record seq its completion.
func (q *sendQueue) setDone(seq uint64, done func(error)) {
	if q.queueLane == nil {
		return
	}
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
		q.held = new(heldLane)
	}
	h := q.held
	if h.buf == nil {
		h.buf = bufpool.Get(n)
	} else if len(*h.buf)+n > cap(*h.buf) {
		nb := bufpool.Get(len(*h.buf) + n)
		*nb = append(*nb, *h.buf...)
		bufpool.Put(h.buf)
		h.buf = nb
	}
	*h.buf = appendFrame(h.buf, hdr, payload, masked, key)
	h.recs = append(h.recs, record{end: len(*h.buf), keep: keep, done: done})
}

// endStream ends a streamed message: the held lane joins the tail of the
// main lane, its records getting their sequence numbers now (invariant 3).
// It returns the sequence number of the last of them (0 if none).
func (q *sendQueue) endStream() uint64 {
	q.streaming = false
	if n, _ := q.heldBytes(); n == 0 {
		return 0
	}
	h := q.held
	q.lane()
	q.reserve(len(*h.buf)) // may compact: the base is read after it
	base := len(*q.buf)
	*q.buf = append(*q.buf, *h.buf...)
	prev, tail := 0, q.tail()
	for _, r := range h.recs {
		q.seq++
		tail += r.end - prev
		q.roomForRecord()
		q.recs = append(q.recs, record{end: tail, ostart: base + prev, oend: base + r.end, seq: q.seq, keep: r.keep, done: r.done})
		prev = r.end
	}
	q.dropHeld()
	return q.seq
}

// failHeld completes every held frame with err and drops them: a close
// frame is about to end the connection in the middle of the streamed
// message they wait for.
func (q *sendQueue) failHeld(err error) {
	q.failHeldRecs(err)
	q.dropHeld()
}

func (q *sendQueue) failHeldRecs(err error) {
	if q.held == nil {
		return
	}
	for i := range q.held.recs {
		if d := q.held.recs[i].done; d != nil {
			q.addDone(d, err)
		}
	}
}

// dropHeld empties the held lane (its records keep their capacity).
func (q *sendQueue) dropHeld() {
	h := q.held
	if h == nil {
		return
	}
	bufpool.Put(h.buf)
	h.buf = nil
	clear(h.recs)
	h.recs = h.recs[:0]
}

// pushPong puts a pong frame (already framed and masked) in the control
// lane: at the first record boundary not started, after replacing an
// unsent pong if the queue is blocked (invariants 3 and 4).
func (q *sendQueue) pushPong(f []byte) {
	if q.blocked && q.queueLane != nil {
		start := q.start
		for i := q.first; i < len(q.recs); i++ {
			if q.recs[i].pong && q.unstarted(start) {
				q.remove(i, start)
				break
			}
			start = q.recs[i].end
		}
	}
	// A lane again: the removal gives back a lane it empties.
	q.lane()
	q.reserve(len(f)) // may compact: buf offsets are read after it
	// The first boundary not started and behind every pong still waiting
	// (pongs keep the order of their pings).
	after := q.first
	for i := q.first; i < len(q.recs); i++ {
		if q.recs[i].pong {
			after = i + 1
		}
	}
	at, off := len(q.recs), q.tail()
	start := q.start
	for i := q.first; i < len(q.recs); i++ {
		if i >= after && q.unstarted(start) {
			at, off = i, start
			break
		}
		start = q.recs[i].end
	}
	pos := len(*q.buf)
	if at < len(q.recs) {
		pos = q.recs[at].ostart
	}
	b := (*q.buf)[:len(*q.buf)+len(f)]
	copy(b[pos+len(f):], b[pos:len(b)-len(f)])
	copy(b[pos:], f)
	*q.buf = b
	for j := at; j < len(q.recs); j++ {
		r := &q.recs[j]
		r.end += len(f)
		r.ostart += len(f)
		r.oend += len(f)
	}
	q.roomForRecord()
	q.recs = append(q.recs, record{})
	copy(q.recs[at+1:], q.recs[at:])
	q.recs[at] = record{end: off + len(f), ostart: pos, oend: pos + len(f), pong: true}
}

// unstarted reports whether a record starting at start has not begun to
// leave and is not being written.
func (q *sendQueue) unstarted(start int) bool {
	return start >= q.head+q.ahead && start >= q.busy
}

// advance records that the transport took n more bytes of the main lane,
// completing the records it finished (invariant 2).
func (q *sendQueue) advance(n int) {
	if n == 0 || q.queueLane == nil {
		return
	}
	q.head += n
	for q.first < len(q.recs) && q.recs[q.first].end <= q.head {
		r := &q.recs[q.first]
		if r.seq > q.doneSeq {
			q.doneSeq = r.seq
		}
		if r.done != nil {
			q.addDone(r.done, nil)
			r.done = nil
		}
		q.dropRef(r)
		q.start = r.end
		q.first++
	}
	if q.first == len(q.recs) {
		q.blocked = false
		q.releaseIfEmpty()
	}
}

// withdraw takes back ordered record seq if none of its bytes have left and
// it may be withdrawn (invariant 7). It reports whether it did; the
// caller completes it.
func (q *sendQueue) withdraw(seq uint64) (func(error), bool) {
	if q.queueLane == nil {
		return nil, false
	}
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
	r := q.recs[i]
	owned := r.oend - r.ostart
	size := r.end - start
	if owned > 0 {
		b := *q.buf
		copy(b[r.ostart:], b[r.oend:])
		*q.buf = b[:len(b)-owned]
	}
	for j := i + 1; j < len(q.recs); j++ {
		s := &q.recs[j]
		s.end -= size
		s.ostart -= owned
		s.oend -= owned
	}
	q.dropRef(&r)
	last := len(q.recs) - 1
	copy(q.recs[i:], q.recs[i+1:])
	q.recs[last] = record{}
	q.recs = q.recs[:last]
	q.releaseIfEmpty()
}

// fail completes every record still waiting, in both lanes, with err, and
// empties the queue (bytes being written stay until the writer is done).
func (q *sendQueue) fail(err error) {
	if q.queueLane == nil {
		q.failHeldRecs(err)
		q.dropHeld()
		q.blocked = false
		return
	}
	for i := q.first; i < len(q.recs); i++ {
		r := &q.recs[i]
		if r.done != nil {
			q.addDone(r.done, err)
			r.done = nil
		}
		q.dropRef(r)
	}
	q.failHeldRecs(err)
	q.dropHeld()
	q.head = q.tail()
	q.first = len(q.recs)
	q.blocked = false
	q.releaseIfEmpty()
}

// releaseIfEmpty gives an empty main lane back, with its buffer, so an
// idle connection holds neither.
func (q *sendQueue) releaseIfEmpty() {
	l := q.queueLane
	if l == nil || l.first != len(l.recs) || l.busy != 0 {
		return
	}
	bufpool.Put(l.buf)
	recs := l.recs
	clear(recs)
	q.queueLane = nil
	if i := recordArrayClass(cap(recs)); i >= 0 {
		*l = queueLane{recs: recs[:0]}
		recordArrays[i].Put(l)
		return
	}
	if cap(recs) > keepRecords {
		recs = nil
	}
	*l = queueLane{recs: recs[:0]}
	lanes.Put(l)
}

// ownedHead is where in buf the owned bytes not yet taken begin.
func (q *sendQueue) ownedHead() int {
	if q.first == len(q.recs) {
		return q.olen()
	}
	r := &q.recs[q.first]
	n := r.oend - r.ostart
	skip := q.head - (r.end - r.present())
	return r.ostart + min(skip, n)
}

// reserve makes room for n more owned bytes at the tail of buf, compacting
// taken bytes away before growing (never those being written: invariant
// 8). It compacts only when the taken bytes are at least a quarter of
// those it would move: a queue of megabytes that the peer drains a little
// at a time is not moved for each frame appended (each byte is moved at
// most four times per byte taken); it grows instead, to twice its size at
// most. Owned bytes are appended right after reserve, before anything
// else can call it.
func (q *sendQueue) reserve(n int) {
	if q.buf == nil {
		q.buf = bufpool.Get(n)
		return
	}
	b := *q.buf
	if len(b)+n <= cap(b) {
		return
	}
	if oh := q.ownedHead(); q.busy == 0 && oh > 0 && 4*oh >= len(b)-oh {
		m := copy(b, b[oh:])
		for i := q.first; i < len(q.recs); i++ {
			r := &q.recs[i]
			r.ostart = max(r.ostart-oh, 0) // the first record's taken bytes go
			r.oend -= oh
		}
		q.recs = q.recs[:copy(q.recs, q.recs[q.first:])]
		clear(q.recs[len(q.recs) : len(q.recs)+q.first])
		q.first = 0
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

// iovMax is the most slices one gathered write hands the kernel
// (IOV_MAX on Linux).
const iovMax = 1024

// gathers lends the slices a gathered write is built in: a connection
// holds none between writes.
var gathers = sync.Pool{New: func() any {
	s := make([][]byte, 0, iovMax)
	return &s
}}

// gatherLent returns the queue's waiting bytes as slices in a lent
// array; give it back with putGather once the write is made.
func (q *sendQueue) gatherLent() *[][]byte {
	g := gathers.Get().(*[][]byte)
	*g = q.gather((*g)[:0])
	return g
}

func putGather(g *[][]byte) {
	clear(*g)
	*g = (*g)[:0]
	gathers.Put(g)
}
