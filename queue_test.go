package rally

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The send queue's invariants (see sendQueue), checked after every step of
// random operation sequences. Each frame's bytes start with its own id, so
// the bytes the transport took and those still waiting can be cut back
// into frames and compared with what was pushed.

type qmodel struct {
	q       sendQueue
	frames  map[uint32]*qframe // by id
	nextID  uint32
	taken   []byte   // what the transport took, in order
	busy    []byte   // a copy of [head, busy) while a write is in progress
	busyBuf []byte   // the queue's own bytes being written
	pushed  []uint32 // ordered frames, in push order (held ones when they join)
	pongs   []uint32 // pongs, in push order
	heldIDs []uint32 // held, not yet joined
	failed  bool
}

type qframe struct {
	id       uint32
	size     int
	pong     bool
	keep     bool
	seq      uint64
	calls    int
	err      error
	gone     bool   // withdrawn or replaced: never on the wire
	shared   []byte // the bytes pushed as shared: the queue must leave them as they were
	heldOnly bool   // pushed to the held lane and dropped by a failure
	join     bool   // pushed with join: no completion, never withdrawn (invariant 10)
}

func newQModel() *qmodel { return &qmodel{frames: map[uint32]*qframe{}} }

func (m *qmodel) frameBytes(f *qframe) []byte {
	b := make([]byte, f.size)
	binary.BigEndian.PutUint32(b, f.id)
	for i := 4; i < len(b); i++ {
		b[i] = byte(f.id) ^ byte(i)
	}
	return b
}

func (m *qmodel) newFrame(t *rapid.T, pong bool) *qframe {
	m.nextID++
	f := &qframe{id: m.nextID, size: rapid.IntRange(4, 300).Draw(t, "size"), pong: pong}
	m.frames[f.id] = f
	return f
}

func (m *qmodel) done(f *qframe) func(error) {
	return func(err error) { f.calls++; f.err = err }
}

func (m *qmodel) runDones() {
	if m.q.dones == nil {
		return
	}
	for _, d := range m.q.dones.calls {
		d.f(d.err)
	}
	m.q.dones.calls = m.q.dones.calls[:0]
}

func (m *qmodel) endStream(t *rapid.T) {
	last := m.q.endStream()
	m.pushed = append(m.pushed, m.heldIDs...)
	if len(m.heldIDs) > 0 && last != m.q.seq {
		t.Fatalf("endStream returned %d, want the last sequence number %d", last, m.q.seq)
	}
	// Held frames get their sequence numbers as they join.
	for i, id := range m.heldIDs {
		m.frames[id].seq = last - uint64(len(m.heldIDs)-1-i)
	}
	m.heldIDs = nil
}

// TestSendQueueKeepsItsInvariants runs 2,000 random sequences (20,000
// under -long); a failure prints the shortest sequence rapid found and
// how to replay it.
func TestSendQueueKeepsItsInvariants(t *testing.T) {
	rounds := 20
	if raceEnabled || testing.Short() {
		rounds = 5
	}
	if *long {
		rounds = 200
	}
	for range rounds {
		rapid.Check(t, queueProperty)
		if t.Failed() {
			return
		}
	}
}

func queueProperty(t *rapid.T) {
	{
		m := newQModel()
		q := &m.q
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				if q.closed || m.failed {
					t.Skip("closed")
				}
				f := m.newFrame(t, false)
				if rapid.IntRange(0, 4).Draw(t, "large") == 0 {
					// Large enough for a chunk of its own when buf is full.
					f.size = rapid.IntRange(chunkMin, 3*chunkMin).Draw(t, "large size")
				}
				f.keep = rapid.Bool().Draw(t, "keep")
				b := m.frameBytes(f)
				cut := rapid.IntRange(0, min(len(b), 300)).Draw(t, "cut")
				if q.streaming && rapid.Bool().Draw(t, "held") {
					q.hold(b[:cut], b[cut:], false, [4]byte{}, f.keep, m.done(f))
					m.heldIDs = append(m.heldIDs, f.id)
					return
				}
				f.seq = q.push(b[:cut], b[cut:], false, [4]byte{}, f.keep, false, nil, m.done(f), false)
				m.pushed = append(m.pushed, f.id)
			},
			"pushJoin": func(t *rapid.T) {
				// A non-blocking send without a completion: it may join
				// the record before it (invariant 10), several in a row
				// to make joined records of many frames.
				if q.closed || m.failed || q.streaming {
					t.Skip("closed or streaming")
				}
				for range rapid.IntRange(1, 6).Draw(t, "frames") {
					f := m.newFrame(t, false)
					f.join = true
					shared := rapid.Bool().Draw(t, "shared")
					if shared {
						f.size = rapid.IntRange(4, 3*refMin).Draw(t, "shared size")
					}
					b := m.frameBytes(f)
					if shared {
						f.shared = b
					}
					cut := rapid.IntRange(0, min(len(b), 14)).Draw(t, "header")
					f.seq = q.push(b[:cut], b[cut:], false, [4]byte{}, false, shared, nil, nil, true)
					m.pushed = append(m.pushed, f.id)
				}
			},
			"pushShared": func(t *rapid.T) {
				// A prepared message's frame: the queue may refer to it
				// rather than copy it; it must never write to it.
				if q.closed || m.failed || q.streaming {
					t.Skip("closed or streaming")
				}
				f := m.newFrame(t, false)
				f.size = rapid.IntRange(4, 3*refMin).Draw(t, "shared size")
				b := m.frameBytes(f)
				f.shared = b
				cut := rapid.IntRange(0, min(len(b), 14)).Draw(t, "header")
				f.seq = q.push(b[:cut], b[cut:], false, [4]byte{}, false, true, nil, m.done(f), false)
				m.pushed = append(m.pushed, f.id)
			},
			"pushTaken": func(t *rapid.T) {
				// A direct write the transport took part of: only into an
				// empty main lane.
				if q.closed || m.failed || q.streaming || q.queued() > 0 || m.busy != nil {
					t.Skip("not empty")
				}
				f := m.newFrame(t, false)
				f.size = rapid.IntRange(4, 3*refMin).Draw(t, "taken size")
				b := m.frameBytes(f)
				shared := rapid.Bool().Draw(t, "shared")
				if shared {
					f.shared = b
				}
				taken := rapid.IntRange(0, len(b)-1).Draw(t, "taken")
				m.taken = append(m.taken, b[:taken]...)
				cut := rapid.IntRange(taken, len(b)).Draw(t, "cut")
				f.seq = q.pushTaken(taken, b[taken:cut], b[cut:], shared, false, false, m.done(f))
				m.pushed = append(m.pushed, f.id)
			},
			"pong": func(t *rapid.T) {
				if q.closed || m.failed {
					t.Skip("closed")
				}
				f := m.newFrame(t, true)
				if q.blocked {
					// The newest unsent pong may be replaced: find which
					// the queue drops by looking for it afterwards.
					before := m.waitingPongs()
					q.pushPong(m.frameBytes(f))
					after := m.waitingPongs()
					for _, id := range before {
						if !slices.Contains(after, id) {
							m.frames[id].gone = true
						}
					}
				} else {
					n := len(m.waitingPongs())
					q.pushPong(m.frameBytes(f))
					if got := len(m.waitingPongs()); got != n+1 {
						t.Fatalf("a pong pushed while not blocked replaced another: %d waiting pongs, want %d", got, n+1)
					}
				}
				m.pongs = append(m.pongs, f.id)
			},
			"stream": func(t *rapid.T) {
				if m.failed {
					t.Skip("failed")
				}
				if !q.streaming {
					q.streaming = true
					return
				}
				m.endStream(t)
			},
			"close": func(t *rapid.T) {
				q.closed = true
			},
			"take": func(t *rapid.T) {
				if m.busy != nil || q.queued() == 0 {
					t.Skip("nothing to take")
				}
				before := q.queued()
				n := rapid.IntRange(0, before).Draw(t, "n")
				m.taken = append(m.taken, m.pending()[:n]...)
				q.advance(n)
				if n < before {
					q.blocked = true // the transport refused the rest
				}
				m.runDones()
			},
			"refuse": func(t *rapid.T) {
				if q.queued() == 0 {
					t.Skip("empty")
				}
				q.blocked = true
			},
			"beginWrite": func(t *rapid.T) {
				if m.busy != nil || q.queued() == 0 {
					t.Skip("busy or empty")
				}
				// A stream's write: the first contiguous slice.
				p := q.segment()
				q.busy = q.head + len(p)
				m.busy = append([]byte(nil), p...)
				m.busyBuf = p
			},
			"endWrite": func(t *rapid.T) {
				if m.busy == nil {
					t.Skip("not busy")
				}
				if !bytes.Equal(m.busyBuf, m.busy) {
					t.Fatal("bytes being written were moved or overwritten")
				}
				n := rapid.IntRange(0, len(m.busy)).Draw(t, "n")
				q.busy = 0
				m.busy, m.busyBuf = nil, nil
				if m.failed {
					q.releaseIfEmpty()
					return
				}
				m.taken = append(m.taken, m.pending()[:n]...)
				q.advance(n)
				m.runDones()
			},
			"withdraw": func(t *rapid.T) {
				if len(m.pushed) == 0 {
					t.Skip("nothing pushed")
				}
				id := rapid.SampledFrom(m.pushed).Draw(t, "id")
				f := m.frames[id]
				if f.join {
					t.Skip("a joined frame is never withdrawn")
				}
				startedBefore := m.started(f)
				done, ok := q.withdraw(f.seq)
				if ok {
					if f.keep || startedBefore {
						t.Fatalf("withdrew frame %d (keep %v, started %v)", id, f.keep, startedBefore)
					}
					f.gone = true
					if done != nil {
						done(errors.New("withdrawn"))
					}
				}
			},
			"fail": func(t *rapid.T) {
				q.fail(errors.New("failed"))
				m.failed = true
				for _, id := range m.heldIDs {
					m.frames[id].heldOnly = true
				}
				m.heldIDs = nil
				m.runDones()
			},
			"": func(t *rapid.T) { m.check(t) },
		})
		// At the end, the transport takes everything left.
		if m.busy == nil && !m.failed {
			if q.streaming {
				m.endStream(t)
			}
			if n := q.queued(); n > 0 {
				m.taken = append(m.taken, m.pending()...)
				q.advance(n)
				m.runDones()
			}
			m.check(t)
			for _, f := range m.frames {
				if !f.pong && !f.gone && !f.join && f.calls != 1 {
					t.Fatalf("frame %d completed %d times, want once", f.id, f.calls)
				}
			}
			if q.queueLane != nil || q.footprint() != 0 {
				t.Fatalf("an empty queue keeps its lane, its buffer or references (footprint %d)", q.footprint())
			}
		}
	}
}

// waitingPongs lists the pongs not wholly taken yet.
func (m *qmodel) waitingPongs() []uint32 {
	var ids []uint32
	off := 0
	for _, id := range m.cut(m.stream()) {
		f := m.frames[id]
		if f.pong && off+f.size > len(m.taken) {
			ids = append(ids, id)
		}
		off += f.size
	}
	return ids
}

// stream is what the transport took followed by what waits.
func (m *qmodel) stream() []byte {
	return append(append([]byte(nil), m.taken...), m.pending()...)
}

// pending is what the queue would write next, gathered as a socket
// transport gathers it (in slices of at most a few, to exercise the cut).
func (m *qmodel) pending() []byte {
	var out []byte
	bufs := m.q.gather(make([][]byte, 0, iovMax))
	for _, b := range bufs {
		if len(b) == 0 {
			panic("gather returned an empty slice")
		}
		out = append(out, b...)
	}
	if len(out) != m.q.queued() {
		panic(fmt.Sprintf("gathered %d bytes, %d queued", len(out), m.q.queued()))
	}
	// A gather cut short returns a prefix of the full one.
	short := m.q.gather(make([][]byte, 0, 2))
	var pre []byte
	for _, b := range short {
		pre = append(pre, b...)
	}
	if !bytes.HasPrefix(out, pre) {
		panic("a gather cut short is not a prefix of the whole")
	}
	return out
}

// started reports whether some of f's bytes were taken or are being written.
func (m *qmodel) started(f *qframe) bool {
	off := 0
	for _, id := range m.cut(m.stream()) {
		if id == f.id {
			return off < len(m.taken)+len(m.busy)
		}
		off += m.frames[id].size
	}
	return false
}

// cut splits a stream into frames by their ids.
func (m *qmodel) cut(b []byte) []uint32 {
	var ids []uint32
	for len(b) >= 4 {
		id := binary.BigEndian.Uint32(b)
		f := m.frames[id]
		if f == nil {
			panic(fmt.Sprintf("unknown frame id %d", id))
		}
		ids = append(ids, id)
		b = b[min(f.size, len(b)):]
	}
	return ids
}

func (m *qmodel) check(t *rapid.T) {
	q := &m.q
	stream := m.stream()
	ids := m.cut(stream)
	// Whole frames, each exactly its own bytes.
	off := 0
	for _, id := range ids {
		f := m.frames[id]
		want := m.frameBytes(f)
		end := min(off+f.size, len(stream))
		if !bytes.Equal(stream[off:end], want[:end-off]) {
			t.Fatalf("frame %d is not whole on the wire: a frame went inside another", id)
		}
		if f.gone && off+f.size > len(m.taken) && !m.failed {
			t.Fatalf("frame %d was withdrawn or replaced but waits to leave", id)
		}
		off += f.size
	}
	// Ordered frames keep their order; pongs keep theirs.
	var ordered, pongs []uint32
	for _, id := range ids {
		if m.frames[id].pong {
			pongs = append(pongs, id)
		} else {
			ordered = append(ordered, id)
		}
	}
	// Ordered frames go in the order they joined the main lane (held ones
	// when their stream ended).
	rank := make([]int, len(ordered))
	for i, id := range ordered {
		rank[i] = slices.Index(m.pushed, id)
	}
	if !slices.IsSorted(rank) || !slices.IsSorted(pongs) {
		t.Fatalf("frames out of order on the wire: %v (ordered frames joined in the order %v)", ids, m.pushed)
	}
	// Completions: once, nil exactly when the frame was taken whole.
	off = 0
	for _, id := range ids {
		f := m.frames[id]
		whole := off+f.size <= len(m.taken)
		if f.join {
			// No completion; doneSeq past it means it left (invariant
			// 10), and once the queue is empty every frame has left.
			if f.calls != 0 {
				t.Fatalf("joined frame %d was completed", id)
			}
			if f.seq <= q.doneSeq && !whole {
				t.Fatalf("joined frame %d (seq %d): doneSeq %d says it left, but it has not", id, f.seq, q.doneSeq)
			}
			if whole && !m.failed && q.queued() == 0 && f.seq > q.doneSeq {
				t.Fatalf("joined frame %d (seq %d) left with the queue empty, but doneSeq is %d", id, f.seq, q.doneSeq)
			}
		} else if !f.pong && !f.gone {
			if f.calls > 1 {
				t.Fatalf("frame %d completed %d times", id, f.calls)
			}
			if whole && (f.calls != 1 || f.err != nil) {
				t.Fatalf("frame %d left whole but its completion was called %d times with %v ", id, f.calls, f.err)
			}
			if !whole && f.calls == 1 && f.err == nil {
				t.Fatalf("frame %d completed before it left", id)
			}
			if (f.seq <= q.doneSeq) != whole && f.seq != 0 {
				t.Fatalf("frame %d (seq %d): left %v, but doneSeq is %d", id, f.seq, whole, q.doneSeq)
			}
		}
		off += f.size
	}
	// Nothing held is on the wire, and the sizes add up.
	held := 0
	for _, id := range m.heldIDs {
		if slices.Contains(ids, id) {
			t.Fatalf("held frame %d is on the wire during the stream", id)
		}
		held += m.frames[id].size
	}
	if q.size() != q.queued()+held {
		t.Fatalf("size %d, want %d queued + %d held", q.size(), q.queued(), held)
	}
	// References (invariant 9): shared bytes are never written to, and a
	// frame's bytes are charged while it waits (all of them, if referred
	// to).
	refs := 0
	for _, f := range m.frames {
		if f.shared == nil {
			continue
		}
		if !bytes.Equal(f.shared, m.frameBytes(f)) {
			t.Fatalf("the queue wrote into shared frame %d", f.id)
		}
	}
	var lane queueLane // an empty one when the queue has given its lane back
	if q.queueLane != nil {
		lane = *q.queueLane
	}
	for i := lane.first; i < len(lane.recs); i++ {
		refs += lane.recs[i].charge()
		if c := lane.recs[i].chunk; c != nil && (len(lane.recs[i].ref) < chunkMin || &(*c)[0] != &lane.recs[i].ref[0]) {
			t.Fatalf("record %d refers to a chunk of %d bytes that is not its own or below chunkMin", i, len(lane.recs[i].ref))
		}
		if len(lane.recs[i].ref) > 0 && len(lane.recs[i].ref) < refMin {
			t.Fatalf("record %d refers to %d bytes, less than refMin", i, len(lane.recs[i].ref))
		}
	}
	if refs != lane.refs {
		t.Fatalf("refs %d, records refer to %d", lane.refs, refs)
	}
	owned := 0
	if lane.buf != nil {
		owned = cap(*lane.buf)
	}
	_, heldCap := q.heldBytes()
	owned += heldCap
	if lane.first < len(lane.recs) {
		owned += cap(lane.recs) * recordSize
	}
	if q.footprint() != int64(owned+refs) {
		t.Fatalf("footprint %d, want %d owned + %d referred to", q.footprint(), owned, refs)
	}
	if q.queued() > owned+refs {
		t.Fatalf("%d bytes queued, more than the %d owned and %d referred to", q.queued(), owned, refs)
	}
	if len(m.busy) > 0 && !bytes.Equal(m.busyBuf, m.busy) {
		t.Fatal("bytes being written were moved or overwritten")
	}
}

// A receiver of a chat on an event loop is handed a fan-out turn after
// turn: a record per shared frame (256 of them for 32 publishers of 8
// messages), all written, then the lane given back. The record arrays
// that grew past keepRecords for it are kept for the next turn
// (recordArrays) instead of grown again each time.
func TestAQueueGatheringAFanOutTurnAfterTurnAllocatesNoRecords(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var q sendQueue
	payload := make([]byte, 1024)
	hdr := []byte{0x81, 126, 4, 0}
	turn := func() {
		for range 256 {
			q.push(hdr, payload, false, [4]byte{}, false, true, nil, nil, true)
		}
		q.advance(q.queued())
		if q.queueLane != nil {
			t.Fatal("the lane was not given back once every frame left")
		}
	}
	turn()
	// sync.Pool may miss once in a while (a collection, the goroutine
	// moving to another P): well under one allocation per turn, where
	// growing the array each time made three.
	if n := testing.AllocsPerRun(100, turn); n >= 0.5 {
		t.Fatalf("%.2f allocations per turn of 256 records, want none", n)
	}
}

// copiedAtLeast counts what the queue copied (a small frame into its
// buffer, a large one into a chunk of its own), not the shared frames it
// refers to: an event loop writes a connection before the end of its
// turn by it (loopWriteCopies).
func TestAQueueCountsTheBytesItCopiedNotTheSharedFramesItRefersTo(t *testing.T) {
	hdr := []byte{0x82, 126, 0x40, 0}
	shared := make([]byte, 16<<10)
	var q sendQueue
	for range 4 {
		q.push(hdr, shared, false, [4]byte{}, false, true, nil, nil, true)
	}
	if q.copiedAtLeast(1 << 10) {
		t.Fatalf("4 shared frames of 16 KiB referred to: copied at least 1 KiB, want only their headers")
	}
	copied := make([]byte, 8<<10)
	q.push(hdr, copied, false, [4]byte{}, false, false, nil, nil, true) // into the buffer
	q.push(hdr, copied, false, [4]byte{}, false, false, nil, nil, true) // into a chunk (the buffer is full)
	if q.recs[len(q.recs)-1].chunk == nil {
		t.Fatal("the second frame of 8 KiB was not copied into a chunk")
	}
	if !q.copiedAtLeast(16 << 10) {
		t.Fatal("two frames of 8 KiB copied: want at least 16 KiB")
	}
	if q.copiedAtLeast(17 << 10) {
		t.Fatal("two frames of 8 KiB and 6 headers copied: want less than 17 KiB")
	}
	q.advance(q.queued())
	if q.copiedAtLeast(1) {
		t.Fatal("everything left: want nothing copied")
	}
}
