package rally

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// Moving queued bytes to the transport: the direct write from the
// sender's goroutine, the flushing goroutine that exists only while the
// queue is non-empty (or, for a connection an event loop owns, the loop
// writing when the socket is writable), the completions and drain that
// follow, and the write-stall timer. All of it runs under the write lock except the
// blocking writes themselves (sendQueue invariant 8).

// enqueueLocked hands frame f to the send queue's main lane and returns
// its sequence number (it has left once doneSeq reaches it). direct says
// the frame may be written at once: the caller's goroutine holds no cork
// of the connection, or the caller is a blocking write, which goes past
// its cork (and takes what the cork gathered with it). inline says the
// caller writes the queue itself if the transport does not take the frame
// at once (a blocking write); otherwise a flushing goroutine is started.
// On error nothing was queued and f's completion is not called: the
// caller reports the failure.
func (c *Conn) enqueueLocked(f *outFrame, direct, inline bool) (uint64, error) {
	q := &c.wr.q
	defer c.putZbuf(f)
	if direct && !c.wr.flushing && q.queued() == 0 && !f.masked {
		// Fast path: header and payload in one system call, no copy.
		n, err := c.t.tryWrite(f.hdr, f.payload)
		if err != nil {
			c.failWriteLocked(err)
			return 0, c.wr.err
		}
		total := len(f.hdr) + len(f.payload)
		if n == total {
			q.seq++
			q.doneSeq = q.seq
			c.wr.tookLocked(n)
			if f.done != nil {
				q.addDone(f.done, nil)
			}
			return q.seq, nil
		}
		// The transport took part of it, or nothing: keep the rest.
		var seq uint64
		if n < len(f.hdr) {
			seq = q.pushTakenShare(n, f.hdr[n:], f.payload, f.shared, f.share, false, f.keep, f.done)
		} else {
			seq = q.pushTakenShare(n, nil, f.payload[n-len(f.hdr):], f.shared, f.share, false, f.keep, f.done)
		}
		c.wr.tookLocked(n)
		q.setAhead(c.t.aheadOfKernel())
		q.blocked = c.t.canTry()
		if !inline {
			c.startFlusher()
		}
		return seq, nil
	}
	// The completion joins the record only once the write attempt did not
	// fail: a failure here is reported by the caller, once.
	seq := q.push(f.hdr, f.payload, f.masked, f.key, f.keep, f.shared, f.share, nil, f.join)
	if direct && !c.wr.flushing {
		c.kickLocked(inline)
		if c.wr.err != nil {
			return 0, c.wr.err
		}
	}
	if f.done != nil {
		if q.doneSeq >= seq {
			q.addDone(f.done, nil)
		} else {
			q.setDone(seq, f.done)
		}
	}
	return seq, nil
}

func (c *Conn) putZbuf(f *outFrame) {
	if f.zbuf != nil {
		bufpool.Put(f.zbuf) // queued (copied) or written by now
		f.zbuf = nil
	}
}

// kickLocked writes what the transport takes of the queue now, and leaves
// the rest to a flushing goroutine (or, when inline, to the caller).
func (c *Conn) kickLocked(inline bool) {
	if c.wr.flushing {
		return // the flusher writes: nothing else may (see writeSomeLocked)
	}
	q := &c.wr.q
	for q.queued() > 0 {
		g := q.gatherLent()
		n, err := c.t.tryWritev(*g)
		putGather(g)
		if err != nil {
			c.failWriteLocked(err)
			return
		}
		if n == 0 {
			c.advanceLocked(0)
			q.blocked = c.t.canTry()
			if !inline {
				c.startFlusher()
			}
			return
		}
		c.advanceLocked(n)
	}
}

// startFlusher has the queue written while the transport is not taking
// it at once: by the transport's owner, for a transport that writes it
// when it becomes writable (an event loop's socket, see transport.flush),
// else by a flushing goroutine that exists only while the queue is
// non-empty. wr.flushing says that one of them writes.
func (c *Conn) startFlusher() {
	c.wr.flushing = true
	c.armStallLocked()
	if later, _ := c.t.flush(&c.wr.mu, c, false); later {
		return
	}
	m := c.wr.moreLocked()
	if m.flushFn == nil {
		m.flushFn = c.flushLoop // made once: starting the goroutine allocates nothing more
	}
	go m.flushFn()
}

// flushLoop writes the queue until it is empty, then exits. It is the only
// writer of the transport while wr.flushing is set, and it runs
// completions with the flushing role given up, so that a completion may
// Write or Close.
func (c *Conn) flushLoop() {
	c.wr.mu.Lock()
	for {
		if c.wr.err != nil || c.wr.q.queued() == 0 {
			c.wr.flushing = false
			c.unlockWrite()
			return
		}
		if err := c.writeSomeLocked(0); err != nil {
			c.wr.flushing = false
			c.failWriteLocked(err)
			c.unlockWrite()
			c.endAbnormal(err)
			return
		}
		if c.wr.q.pendingDones() > 0 {
			c.wr.flushing = false
			c.unlockWrite()
			c.wr.mu.Lock()
			if c.wr.flushing {
				// Another goroutine writes now.
				c.unlockWrite()
				return
			}
			c.wr.flushing = true
		}
	}
}

// streamChunk bounds what a blocking transport (a stream) is handed at
// once: a pong can go in at the next frame boundary after it.
const streamChunk = 64 << 10

// writeSomeLocked moves queued bytes to the transport, waiting until it
// takes some (transport.flush): on a socket, until the queue is empty, or
// frame until has left (until > 0), or completions are due (until == 0);
// on a stream, one chunk. The flusher calls it with the write lock held
// and gets it back held; the lock is released while it waits. It returns
// the transport's error.
func (c *Conn) writeSomeLocked(until uint64) error {
	m := c.wr.moreLocked()
	m.until = until
	_, err := c.t.flush(&c.wr.mu, c, true)
	if err == nil {
		err = m.stepErr
	}
	m.stepErr = nil
	return err
}

// flushStep is one attempt of a non-blocking transport's flush, under the
// write lock (see transport.flush). It reports whether to stop; false
// waits for the transport to become writable.
func (c *Conn) flushStep() bool {
	q := &c.wr.q
	for {
		if c.wr.err != nil || q.queued() == 0 {
			return true
		}
		if c.wr.more.until > 0 && q.doneSeq >= c.wr.more.until {
			return true
		}
		g := q.gatherLent()
		n, err := c.t.tryWritev(*g)
		putGather(g)
		if err != nil {
			c.wr.more.stepErr = err
			return true
		}
		if n == 0 {
			q.blocked = c.t.canTry()
			return false
		}
		c.advanceLocked(n)
		if c.wr.more.until == 0 && q.pendingDones() > 0 {
			return true
		}
	}
}

// claimSegment is the next chunk of the queue for a blocking transport's
// write, kept still until wroteSegment (sendQueue invariant 8).
func (c *Conn) claimSegment() []byte {
	q := &c.wr.q
	p := q.segment()
	if len(p) == 0 {
		return nil
	}
	if len(p) > streamChunk {
		p = p[:streamChunk]
	}
	q.busy = q.head + len(p)
	return p
}

// wroteSegment records the blocking write of the claimed chunk.
func (c *Conn) wroteSegment(n int, err error) error {
	q := &c.wr.q
	if q.queueLane != nil {
		q.busy = 0
	}
	if c.wr.err != nil {
		// The queue failed meanwhile (CloseNow): what was written is moot.
		q.releaseIfEmpty()
		return nil
	}
	if err != nil {
		return err
	}
	c.advanceLocked(n)
	return nil
}

// advanceLocked records that the transport took n more bytes of the queue.
func (c *Conn) advanceLocked(n int) {
	c.wr.q.setAhead(c.t.aheadOfKernel())
	if n == 0 {
		return
	}
	c.wr.q.advance(n)
	c.wr.q.setAhead(c.t.aheadOfKernel())
	c.wr.tookLocked(n)
	c.noteWaitingLocked()
	c.wakeLocked()
}

// noteWaitingLocked publishes what the queue costs (cost: its bytes and
// records, as the buffer limit counts them) while the peer
// takes nothing (the kernel refused bytes, a message is streamed, or the
// transport cannot try a write), when the buffer-limit policy drops what
// does not fit; 0 otherwise. A send reads it without the write lock and
// drops a frame that would not fit at once: a receiver that does not read
// costs its publishers one load, no lock and no write attempt, however
// many publish to it (see sendFrame and JoinCork). The value may be stale
// by a frame the transport took meanwhile, as the same check under the
// lock may be by the next write.
func (c *Conn) noteWaitingLocked() {
	q := &c.wr.q
	w := 0
	if c.wr.err == nil && !q.closed && c.opts.BufferLimitAction != CloseConnection && (q.blocked || q.streaming || !c.t.canTry()) {
		w = min(q.cost(), math.MaxInt32)
	}
	if int32(w) != c.waiting.Load() {
		c.waiting.Store(int32(w))
	}
}

func (c *Conn) wakeLocked() {
	if m := c.wr.more; m != nil && m.progress != nil {
		close(m.progress)
		m.progress = nil
	}
}

// failWriteLocked marks the write side dead: every send from now on, every
// queued frame's completion and every waiter gets err.
func (c *Conn) failWriteLocked(err error) {
	first := c.wr.err == nil
	if first {
		c.wr.err = &writeError{err}
	}
	c.wr.q.fail(c.wr.err)
	if first && !c.wr.flushing {
		// No flushing goroutine will end the connection for this failure
		// (a write from the caller's goroutine failed): end it, outside
		// the lock this caller holds, so that Close and readers do not wait
		// on a connection that can no longer send.
		go c.endAbnormal(err)
	}
	c.wakeLocked()
}

// writeError is why the write side died: the transport's error. It is
// also ErrClosed (errors.Is), since nothing can be sent any more.
type writeError struct{ err error }

func (e *writeError) Error() string        { return "rally: write failed: " + e.err.Error() }
func (e *writeError) Unwrap() error        { return e.err }
func (e *writeError) Is(target error) bool { return target == ErrClosed }

// unlockWrite releases the write lock, then runs the completions collected
// under it and the drain notification, if one came due. Every path that
// can finish frames unlocks through it.
func (c *Conn) unlockWrite() {
	q := &c.wr.q
	if b := c.opts.MemoryBudget; b != nil {
		c.chargeQueueLocked(b)
	}
	c.noteWaitingLocked()
	drain := c.wr.drainArmed && q.empty() && c.wr.err == nil && !c.wr.flushing
	if drain {
		c.wr.drainArmed = false
	}
	if q.pendingDones() == 0 {
		c.wr.mu.Unlock()
		if drain {
			c.drained()
		}
		return
	}
	d := q.dones
	dones := d.calls
	d.calls = d.spare[:0]
	d.spare = nil
	c.wr.mu.Unlock()
	c.runDones(dones)
	// Keep the slice for the next completions: no allocation per send.
	c.wr.mu.Lock()
	if d.spare == nil {
		d.spare = dones[:0]
	}
	c.wr.mu.Unlock()
	if drain {
		c.drained()
	}
}

// armStallLocked starts the write-stall timer, if the option is set and
// it is not running: see ConnOptions.WriteStallTimeout.
func (c *Conn) armStallLocked() {
	d := c.opts.WriteStallTimeout
	if d <= 0 {
		return
	}
	m := c.wr.moreLocked()
	m.stallAt = m.taken
	if m.stall == nil {
		m.stall = time.AfterFunc(d, c.checkStall)
		return
	}
	m.stall.Reset(d)
}

// checkStall ends the connection when bytes have waited a whole period
// without the transport taking any.
func (c *Conn) checkStall() {
	c.wr.mu.Lock()
	if c.wr.err != nil || c.wr.q.queued() == 0 {
		c.wr.mu.Unlock()
		return
	}
	if m := c.wr.moreLocked(); m.taken != m.stallAt {
		m.stallAt = m.taken
		m.stall.Reset(c.opts.WriteStallTimeout)
		c.wr.mu.Unlock()
		return
	}
	c.wr.mu.Unlock()
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: fmt.Errorf("%w (%v)", ErrWriteStalled, c.opts.WriteStallTimeout)})
}

// chargeQueueLocked brings the send queue's charge on the memory budget in
// line with the memory it holds on its own (its buffers' capacity, not
// only the bytes in them; shared frames are charged once, by reference:
// see frameShare), and files the connection under what its queue keeps
// in memory, shared frames included, so that the largest queues are shed
// first: a slow peer's queue that alone refers to old shared frames keeps
// them alive.
func (c *Conn) chargeQueueLocked(b *MemoryBudget) {
	q := &c.wr.q
	now := q.footprint()
	if old := c.wr.charged.Load(); now != old {
		if now > old {
			b.forceCharge(MemorySendQueues, now-old)
		} else {
			b.release(MemorySendQueues, old-now)
		}
		c.wr.charged.Store(now)
	}
	kept := now
	if q.queueLane != nil {
		kept += int64(q.shared)
	}
	var filed int64
	if c.wr.more != nil {
		filed = c.wr.more.filed
	}
	// The budget files queues by bucket of size: a queue that stays in its
	// bucket (most stay below the smallest tracked, minTrackedQueue) is not
	// refiled, and one that was never tracked needs no writeMore for it.
	if queueBucket(kept) != queueBucket(filed) {
		c.wr.moreLocked().filed = kept
		b.track(c, filed, kept)
	}
}

// queuedBytes is what the connection's send queue holds, as charged to
// the memory budget.
func (c *Conn) queuedBytes() int64 { return c.wr.charged.Load() }

// shedQueue cuts the connection: the memory budget ran out and its send
// queue is among the largest. It is called from any goroutine, with
// another connection's locks possibly held, so the cut happens on a
// goroutine of its own; the connection's end is set here, so that from
// now on a CloseNow (rally serve's own memory watch) knows it is being
// cut and leaves it. It reports false if something else had already
// ended the connection (the queue is then on its way out, not shed).
func (c *Conn) shedQueue() bool {
	ce := &CloseError{Code: frame.CloseAbnormal, Err: errShed}
	if !c.cl.final.CompareAndSwap(nil, ce) {
		return false
	}
	go c.end(ce)
	return true
}

var errShed = errors.New("rally: send queue shed: the memory budget ran out and this connection's queue was among the largest")
