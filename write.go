package rally

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// The send path. Every send frames its message under the write lock and
// hands it to the send queue (queue.go), which keeps the order and the
// completions. When nothing waits before it and no cork of the sending
// goroutine holds it, the frame is offered to the transport at once, from
// the caller's goroutine, without blocking; whatever the transport does
// not take stays queued and a flushing goroutine (or a blocking Write, on
// its own goroutine) writes it as the transport becomes writable. So a
// send never waits for a slow peer; a blocking Write then waits, if it
// must, for its own frame to leave.

var (
	errWriteType  = errors.New("rally: message type must be Text or Binary")
	errPingLength = errors.New("rally: ping payload longer than 125 bytes")
)

// outFrame is one frame to send: a header and a payload (masked with key
// on the way into the queue when masked).
type outFrame struct {
	hdr, payload []byte
	masked       bool
	key          [4]byte
	keep         bool // never withdrawn (sendQueue invariant 7)
	done         func(error)
	zbuf         *[]byte // the compressed payload's buffer, given back after queuing
}

// Write sends p as one message of type typ. It returns once the whole frame
// has been handed to the kernel, or with the reason it never will be. Safe
// for concurrent use; messages leave in the order Write calls were
// accepted. p is not kept or changed after Write returns. Text is not
// re-encoded or validated: the bytes go out as they are.
//
// If ctx ends while the frame waits behind others, Write returns ctx.Err()
// and the frame is taken back, provided none of its bytes went out and it
// can be taken back; otherwise the connection is failed and the error says
// so. A message compressed with context takeover can never be taken back
// (the peer's inflater must see every message the compressor saw), so
// cancelling such a Write fails the connection.
func (c *Conn) Write(ctx context.Context, typ MessageType, p []byte) error {
	if !typ.valid() {
		return errWriteType
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, CompressAuto, laneMessage)
}

// WriteCompress is Write with a per-message choice of compression (see
// Compress); it matters only where permessage-deflate was negotiated.
func (c *Conn) WriteCompress(ctx context.Context, typ MessageType, p []byte, mode Compress) error {
	if !typ.valid() {
		return errWriteType
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, mode, laneMessage)
}

// Ping sends a ping with payload (at most 125 bytes) and returns once it has
// been handed to the kernel. It does not wait for the pong: pongs are
// reported to ConnOptions.OnPong (or Server.Pong) by whoever reads. A ping
// may go out between two fragments of a message being streamed.
func (c *Conn) Ping(ctx context.Context, payload []byte) error {
	if len(payload) > frame.MaxControlPayload {
		return errPingLength
	}
	return c.write(ctx, frame.OpPing, true, payload, nil, CompressNever, laneControl)
}

// BufferedAmount returns the number of bytes (payload and framing)
// accepted for sending that the kernel has not taken yet: frames waiting
// under backpressure, gathered by a cork, or held while a Writer streams.
func (c *Conn) BufferedAmount() int {
	c.wr.mu.Lock()
	defer c.unlockWrite()
	return c.wr.q.size()
}

// lane says where a blocking write's frame goes.
type lane uint8

const (
	laneMessage  lane = iota // a whole data message: waits while a Writer streams
	laneFragment             // a fragment of the streaming Writer's message
	laneControl              // a ping: may go between two fragments
	lanePrepared             // a prebuilt server frame (PreparedMessage)
)

// write is the blocking send of one frame: it waits for the data-message
// slot if a Writer streams (unless it is that Writer's fragment or a
// control frame), sends past its own goroutine's cork (flushing what the
// cork gathered first), and waits until the frame has left.
func (c *Conn) write(ctx context.Context, op frame.Opcode, fin bool, p, prepared []byte, mode Compress, ln lane) error {
	c.wr.mu.Lock()
	if c.wr.q.streaming && (ln == laneMessage || ln == lanePrepared) {
		c.unlockWrite()
		if err := c.takeWriteSlot(ctx); err != nil {
			return err
		}
		defer c.releaseWriteSlot()
		c.wr.mu.Lock()
	}
	if err := c.closedLocked(ln == laneFragment); err != nil {
		c.unlockWrite()
		return err
	}
	if !c.wr.flushing && c.wr.q.queued() > 0 {
		// A blocking write inside a cork: what was gathered goes first.
		c.kickLocked(true)
		if err := c.wr.err; err != nil {
			c.unlockWrite()
			return err
		}
	}
	var f outFrame
	if ln == lanePrepared {
		f = outFrame{hdr: prepared}
	} else {
		f = c.frameLocked(op, fin, p, mode, ln == laneFragment)
	}
	seq, err := c.enqueueLocked(&f, true, true)
	if err != nil {
		c.unlockWrite()
		return err
	}
	if c.wr.q.doneSeq >= seq {
		c.unlockWrite()
		return nil
	}
	if !c.wr.flushing {
		// Nobody writes the queue: this goroutine does, until its frame
		// has left.
		return c.flushInline(ctx, seq)
	}
	c.unlockWrite()
	return c.waitFlushed(ctx, seq)
}

// closedLocked returns why nothing more may be sent, or nil. A fragment of
// a message being streamed may still go after Close was called: its close
// frame waits for the message's end.
func (c *Conn) closedLocked(fragment bool) error {
	if c.wr.err != nil {
		return c.wr.err
	}
	if c.wr.q.closed && !(fragment && c.wr.q.streaming) {
		return ErrClosed
	}
	return nil
}

// frameLocked frames p as one frame with opcode op. A whole data message
// is compressed here, when permessage-deflate is on, under the write lock
// and so in send order (with context takeover, order is part of the
// compressed stream). The header is built in the connection's array: the
// frame must be queued or written before the lock is released.
func (c *Conn) frameLocked(op frame.Opcode, fin bool, p []byte, mode Compress, fragment bool) outFrame {
	h := frame.Header{Fin: fin, Opcode: op}
	var f outFrame
	f.keep = fragment
	if fin && !fragment && (op == frame.OpText || op == frame.OpBinary) && c.z.wantsCompression(len(p), mode) {
		f.zbuf = c.compressLocked(p)
		p = *f.zbuf
		h.Rsv = frame.Rsv1
		f.keep = c.z.takeover
	}
	h.Length = int64(len(p))
	if !c.server {
		h.Masked = true
		h.Mask = newMask()
	}
	n := frame.Put(c.wr.hdr[:], h)
	f.hdr, f.payload, f.masked, f.key = c.wr.hdr[:n], p, h.Masked, h.Mask
	return f
}

func newMask() [4]byte {
	v := rand.Uint32()
	return [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}

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
			c.wr.taken += uint64(n)
			if f.done != nil {
				q.dones = append(q.dones, doneCall{f.done, nil})
			}
			return q.seq, nil
		}
		// The transport took part of it, or nothing: keep the rest.
		var seq uint64
		if n < len(f.hdr) {
			seq = q.pushTaken(n, f.hdr[n:], f.payload, false, f.keep, f.done)
		} else {
			seq = q.pushTaken(n, nil, f.payload[n-len(f.hdr):], false, f.keep, f.done)
		}
		c.wr.taken += uint64(n)
		q.blocked = true
		if !inline {
			c.startFlusher()
		}
		return seq, nil
	}
	seq := q.push(f.hdr, f.payload, f.masked, f.key, f.keep, f.done)
	if direct && !c.wr.flushing {
		c.kickLocked(inline)
		if c.wr.err != nil {
			return 0, c.wr.err
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
	q := &c.wr.q
	for q.queued() > 0 {
		n, err := c.t.tryWrite(q.pending(), nil)
		if err != nil {
			c.failWriteLocked(err)
			return
		}
		if n == 0 {
			q.blocked = true
			if !inline {
				c.startFlusher()
			}
			return
		}
		c.advanceLocked(n)
	}
}

// startFlusher starts the goroutine that writes the queue while the
// transport is not taking it at once. It exists only while the queue is
// non-empty.
func (c *Conn) startFlusher() {
	c.wr.flushing = true
	c.armStallLocked()
	go c.flushLoop()
}

// flushLoop writes the queue until it is empty, then exits. It is the only
// writer of the transport while wr.flushing is set. It writes the queue's
// pending bytes outside the write lock (the queue keeps them still:
// sendQueue invariant 8), so a send is never held up by a slow peer, and
// it runs completions with the flushing role given up, so that a
// completion may Write or Close.
func (c *Conn) flushLoop() {
	c.wr.mu.Lock()
	for {
		if !c.writeOnceLocked() {
			return
		}
		if c.wr.err != nil || c.wr.q.queued() == 0 {
			c.wr.flushing = false
			c.unlockWrite()
			return
		}
		if len(c.wr.q.dones) > 0 {
			c.wr.flushing = false
			c.unlockWrite()
			c.wr.mu.Lock()
			if c.wr.flushing || c.wr.err != nil || c.wr.q.queued() == 0 {
				// Another goroutine writes now, or nothing is left.
				c.unlockWrite()
				return
			}
			c.wr.flushing = true
		}
	}
}

// writeOnceLocked makes one blocking write of the queue's pending bytes,
// with the write lock released during it. It reports false, with the lock
// released and the connection ended, if the write failed.
func (c *Conn) writeOnceLocked() bool {
	q := &c.wr.q
	p := q.pending()
	q.busy = q.head + len(p)
	c.wr.mu.Unlock()
	n, err := c.t.write(p)
	c.wr.mu.Lock()
	q.busy = 0
	if c.wr.err != nil {
		// The queue failed meanwhile (CloseNow): what was written is moot.
		q.releaseIfEmpty()
		return true
	}
	if err != nil {
		c.wr.flushing = false
		c.failWriteLocked(err)
		c.unlockWrite()
		c.endAbnormal(err)
		return false
	}
	c.advanceLocked(n)
	return true
}

// flushInline is a blocking write's wait when no goroutine writes the
// queue: the caller's goroutine writes it, with the write lock released
// during each write, until its frame seq has left; then it hands what
// remains to a flushing goroutine. If ctx ends meanwhile, the write
// deadline cuts the wait. Called with the write lock held; releases it.
func (c *Conn) flushInline(ctx context.Context, seq uint64) error {
	c.wr.flushing = true
	c.armStallLocked()
	c.wr.mu.Unlock()
	watched := c.watchWrite(ctx)
	c.wr.mu.Lock()
	var werr error
	q := &c.wr.q
	for c.wr.err == nil && q.doneSeq < seq && q.queued() > 0 {
		p := q.pending()
		q.busy = q.head + len(p)
		c.wr.mu.Unlock()
		var n int
		n, werr = c.t.write(p)
		c.wr.mu.Lock()
		q.busy = 0
		if c.wr.err != nil {
			q.releaseIfEmpty()
			break
		}
		if werr != nil {
			break
		}
		c.advanceLocked(n)
	}
	cut := werr != nil && ctx.Err() != nil && errors.Is(werr, os.ErrDeadlineExceeded)
	if werr != nil && !(cut && c.t.resumable()) {
		// The stream is broken (or the transport failed): fail it.
		c.wr.flushing = false
		c.failWriteLocked(werr)
		err := c.wr.err
		c.unlockWrite()
		if watched {
			c.unwatchWrite()
		}
		c.endAbnormal(werr)
		if cut {
			return fmt.Errorf("rally: write abandoned mid-frame, connection closed: %w", ctx.Err())
		}
		return err
	}
	// Hand over what is left (frames queued behind this one, or this one,
	// if ctx cut the wait) to a flushing goroutine, once the deadline that
	// cut the wait is cleared.
	c.wr.flushing = false
	c.unlockWrite()
	if watched {
		c.unwatchWrite()
	}
	c.wr.mu.Lock()
	var err error
	if cut {
		var fail bool
		if fail, err = c.abandonLocked(ctx, seq); fail {
			c.unlockWrite()
			c.endAbnormal(fmt.Errorf("rally: write abandoned mid-frame: %w", ctx.Err()))
			return err
		}
	} else {
		_, err = c.settledLocked(seq)
	}
	if c.wr.err == nil && !c.wr.flushing && c.wr.q.queued() > 0 {
		c.startFlusher()
	}
	c.unlockWrite()
	return err
}

// watchWrite makes a blocked write return when ctx ends, by moving the
// write deadline into the past; unwatchWrite undoes it.
func (c *Conn) watchWrite(ctx context.Context) bool {
	return c.dl.watch(ctx, &c.dl.w)
}

func (c *Conn) unwatchWrite() { c.dl.unwatch(&c.dl.w) }

// advanceLocked records that the transport took n more bytes of the queue.
func (c *Conn) advanceLocked(n int) {
	if n == 0 {
		return
	}
	c.wr.q.advance(n)
	c.wr.taken += uint64(n)
	c.wakeLocked()
}

func (c *Conn) wakeLocked() {
	if c.wr.progress != nil {
		close(c.wr.progress)
		c.wr.progress = nil
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
	drain := c.wr.drainArmed && q.empty() && c.wr.err == nil && !c.wr.flushing
	if drain {
		c.wr.drainArmed = false
	}
	if len(q.dones) == 0 {
		c.wr.mu.Unlock()
		if drain {
			c.drained()
		}
		return
	}
	dones := q.dones
	q.dones = c.wr.spare[:0]
	c.wr.spare = nil
	c.wr.mu.Unlock()
	c.runDones(dones)
	// Keep the slice for the next completions: no allocation per send.
	c.wr.mu.Lock()
	if c.wr.spare == nil {
		c.wr.spare = dones[:0]
	}
	c.wr.mu.Unlock()
	if drain {
		c.drained()
	}
}

// waitFlushed blocks until frame seq has left, the connection failed, or
// ctx ended.
func (c *Conn) waitFlushed(ctx context.Context, seq uint64) error {
	for {
		c.wr.mu.Lock()
		if settled, err := c.settledLocked(seq); settled {
			c.unlockWrite()
			return err
		}
		if !c.wr.flushing {
			// The flushing goroutine gave up its role to run completions
			// and nobody took it: take it.
			return c.flushInline(ctx, seq)
		}
		ch := c.wr.progress
		if ch == nil {
			ch = make(chan struct{})
			c.wr.progress = ch
		}
		c.unlockWrite()
		select {
		case <-ch:
		case <-ctx.Done():
			return c.abandon(ctx, seq)
		}
	}
}

// settledLocked reports whether frame seq's fate is known: it has left
// (nil), or it never will (the write side's error).
func (c *Conn) settledLocked(seq uint64) (bool, error) {
	if c.wr.q.doneSeq >= seq {
		return true, nil
	}
	if c.wr.err != nil {
		return true, c.wr.err
	}
	return false, nil
}

// abandon takes frame seq back after its caller's context ended, if none
// of its bytes went out and it may be taken back; otherwise it fails the
// connection.
func (c *Conn) abandon(ctx context.Context, seq uint64) error {
	c.wr.mu.Lock()
	fail, err := c.abandonLocked(ctx, seq)
	c.unlockWrite()
	if fail {
		c.endAbnormal(fmt.Errorf("rally: write abandoned mid-frame: %w", ctx.Err()))
	}
	return err
}

// abandonLocked settles frame seq for a caller whose context ended: nil if
// it left meanwhile, the write side's error if it failed, ctx.Err() if it
// was taken back; otherwise the frame cannot be taken back and fail says
// the caller must fail the connection.
func (c *Conn) abandonLocked(ctx context.Context, seq uint64) (fail bool, err error) {
	if settled, err := c.settledLocked(seq); settled {
		return false, err
	}
	if done, ok := c.wr.q.withdraw(seq); ok {
		if done != nil {
			c.wr.q.dones = append(c.wr.q.dones, doneCall{done, ctx.Err()})
		}
		return false, ctx.Err()
	}
	return true, fmt.Errorf("rally: write abandoned mid-frame, connection closed: %w", ctx.Err())
}

// sendPong answers a ping without waiting. It goes between frames, ahead
// of data that waits; an unsent pong is replaced by the newer one only
// under backpressure (RFC 6455 5.5.3), so a flood of pings against a slow
// reader cannot grow the queue, while pings that arrive together are each
// answered.
func (c *Conn) sendPong(payload []byte) {
	var b [frame.MaxHeaderSize + frame.MaxControlPayload]byte
	h := frame.Header{Fin: true, Opcode: frame.OpPong, Length: int64(len(payload))}
	if !c.server {
		h.Masked = true
		h.Mask = newMask()
	}
	n := frame.Put(b[:], h)
	n += copy(b[n:], payload)
	if h.Masked {
		frame.Mask(h.Mask, 0, b[n-len(payload):n])
	}
	f := b[:n]
	g := currentG()
	c.wr.mu.Lock()
	defer c.unlockWrite()
	q := &c.wr.q
	if c.wr.err != nil || q.closed {
		return
	}
	direct := !c.corkedLocked(g)
	if direct && !c.wr.flushing && q.queued() == 0 {
		k, err := c.t.tryWrite(f, nil)
		if err != nil {
			c.failWriteLocked(err)
			return
		}
		c.wr.taken += uint64(k)
		if k == len(f) {
			return
		}
		q.pushTaken(k, f[k:], nil, true, true, nil)
		q.blocked = true
		c.startFlusher()
		return
	}
	q.pushPong(f)
	if direct && !c.wr.flushing {
		c.kickLocked(false)
	}
}

// armStallLocked starts the write-stall timer, if the option is set and
// it is not running: see ConnOptions.WriteStallTimeout.
func (c *Conn) armStallLocked() {
	d := c.opts.WriteStallTimeout
	if d <= 0 {
		return
	}
	c.wr.stallAt = c.wr.taken
	if c.wr.stall == nil {
		c.wr.stall = time.AfterFunc(d, c.checkStall)
		return
	}
	c.wr.stall.Reset(d)
}

// checkStall ends the connection when bytes have waited a whole period
// without the transport taking any.
func (c *Conn) checkStall() {
	c.wr.mu.Lock()
	if c.wr.err != nil || c.wr.q.queued() == 0 {
		c.wr.mu.Unlock()
		return
	}
	if c.wr.taken != c.wr.stallAt {
		c.wr.stallAt = c.wr.taken
		c.wr.stall.Reset(c.opts.WriteStallTimeout)
		c.wr.mu.Unlock()
		return
	}
	c.wr.mu.Unlock()
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: fmt.Errorf("rally: write stalled: the peer took no byte for %v", c.opts.WriteStallTimeout)})
}
