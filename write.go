package rally

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// The send path. When nothing is queued, a send writes from the caller's
// goroutine with a non-blocking system call and returns; whatever the kernel
// did not take is copied into the connection's queue, and a flusher
// goroutine drains the queue as the socket becomes writable. So a send never
// waits for a slow peer; a blocking Write then waits, if it must, for its
// own frame to leave. Frames leave in the order their sends were accepted.
//
// Where rally cannot reach the socket (TLS, an in-memory pipe), every send
// is queued and the flusher writes with the connection's blocking Write.

// qframe marks where a queued frame ends in the queue.
type qframe struct {
	end  int
	seq  uint64
	pong bool
	done func(error) // the sender's completion, if it asked for one
}

// doneCall is a completion to run once wmu is released.
type doneCall struct {
	f   func(error)
	err error
}

// writerBufferSize is how much a streaming Writer gathers before it sends a
// fragment.
const writerBufferSize = 32 << 10

var (
	errWriteType  = errors.New("rally: message type must be Text or Binary")
	errPingLength = errors.New("rally: ping payload longer than 125 bytes")
)

// Write sends p as one message of type typ. It returns once the whole frame
// has been handed to the kernel, or with the reason it never will be. Safe
// for concurrent use; messages leave in the order Write calls were
// accepted. p is not kept or changed after Write returns. Text is not
// re-encoded or validated: the bytes go out as they are.
//
// If ctx ends while the frame waits behind others, Write returns ctx.Err()
// and the frame is taken back, provided none of its bytes went out;
// otherwise the connection is failed (a half-written frame cannot be
// recalled) and the error says so.
func (c *Conn) Write(ctx context.Context, typ MessageType, p []byte) error {
	if !typ.valid() {
		return errWriteType
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, false, CompressAuto)
}

// WriteCompress is Write with a per-message choice of compression (see
// Compress); it matters only where permessage-deflate was negotiated.
func (c *Conn) WriteCompress(ctx context.Context, typ MessageType, p []byte, mode Compress) error {
	if !typ.valid() {
		return errWriteType
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, false, mode)
}

// writeFrame is Write of a frame prebuilt for a server connection.
func (c *Conn) writeFrame(ctx context.Context, prepared []byte) error {
	return c.write(ctx, 0, true, nil, prepared, false, CompressAuto)
}

// write is the blocking send of one frame: it waits for the data-message
// slot if a Writer streams (unless it is that Writer's fragment), flushes a
// cork first, sends, and waits until the frame has left.
func (c *Conn) write(ctx context.Context, op frame.Opcode, fin bool, p, prepared []byte, streaming bool, mode Compress) error {
	c.wmu.Lock()
	if c.writerOpen && !streaming {
		c.unlockWrite()
		if err := c.takeWriteSlot(ctx); err != nil {
			return err
		}
		defer c.releaseWriteSlot()
		c.wmu.Lock()
	}
	if c.werr != nil || c.closeSent {
		err := c.werr
		if err == nil {
			err = ErrClosed
		}
		c.unlockWrite()
		return err
	}
	if c.corkedLocked() && !c.flushing && c.bufferedLocked() > 0 {
		// A blocking write inside a cork: what was gathered goes first.
		c.kickLocked()
	}
	c.corkBypass = true
	c.inlineWrite = c.rc == nil && !c.flushing
	var seq uint64
	var err error
	if prepared != nil {
		seq, err = c.pushLocked(prepared, nil, false, [4]byte{}, nil)
	} else {
		seq, err = c.frameDoneLocked(op, fin, p, nil, mode)
	}
	c.inlineWrite = false
	c.corkBypass = false
	if err == nil && c.doneSeq < seq && c.rc == nil && !c.flushing {
		return c.writeInline(ctx, seq)
	}
	done := err == nil && c.doneSeq >= seq
	c.unlockWrite()
	if err != nil || done {
		return err
	}
	return c.waitFlushed(ctx, seq, streaming)
}

// Ping sends a ping with payload (at most 125 bytes) and returns once it has
// been handed to the kernel. It does not wait for the pong: pongs are
// reported to ConnOptions.OnPong (or Server.Pong) by whoever reads. A ping
// may go out between two fragments of a message being streamed.
func (c *Conn) Ping(ctx context.Context, payload []byte) error {
	if len(payload) > frame.MaxControlPayload {
		return errPingLength
	}
	c.wmu.Lock()
	seq, err := c.sendLocked(frame.OpPing, true, payload)
	done := err == nil && c.doneSeq >= seq
	c.unlockWrite()
	if err != nil || done {
		return err
	}
	return c.waitFlushed(ctx, seq, false)
}

// BufferedAmount returns the number of bytes (payload and framing) accepted
// for sending that the kernel has not taken yet.
func (c *Conn) BufferedAmount() int {
	c.wmu.Lock()
	defer c.unlockWrite()
	if c.wq == nil {
		return 0
	}
	return len(*c.wq) - c.wpos
}

func (c *Conn) takeWriteSlot(ctx context.Context) error {
	select {
	case c.writeSlot() <- struct{}{}:
		return nil
	case <-c.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Conn) releaseWriteSlot() { <-c.writeSlot() }

// writeSlot is held by a streaming Writer; other data messages wait for it.
func (c *Conn) writeSlot() chan struct{} {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wslot == nil {
		c.wslot = make(chan struct{}, 1)
	}
	return c.wslot
}

func (c *Conn) newMask() [4]byte {
	v := rand.Uint32()
	return [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}

// sendLocked frames p and writes it at once or queues it. The caller holds
// wmu. It returns the frame's sequence number; the frame has fully left
// when doneSeq >= seq.
func (c *Conn) sendLocked(op frame.Opcode, fin bool, p []byte) (uint64, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	if c.closeSent {
		return 0, ErrClosed
	}
	return c.frameLocked(op, fin, p)
}

func (c *Conn) frameLocked(op frame.Opcode, fin bool, p []byte) (uint64, error) {
	return c.frameDoneLocked(op, fin, p, nil, CompressAuto)
}

// pushLocked writes the frame made of hdr and payload (masked with key when
// masked) at once, or queues what the kernel did not take. done, if not
// nil, is told when the frame has left or why it never will. The caller
// holds wmu.
func (c *Conn) pushLocked(hdr, payload []byte, masked bool, key [4]byte, done func(error)) (uint64, error) {
	c.seq++
	seq := c.seq
	uncorked := !c.corkedLocked() || c.corkBypass
	idle := !c.flushing && uncorked && (c.wq == nil || c.wpos == len(*c.wq))
	if idle && c.rc != nil && !masked {
		// Fast path: header and payload in one system call, no copy.
		n, err := c.writeNow(hdr, payload)
		if err != nil {
			c.failWriteLocked(err)
			if done != nil {
				c.dones = append(c.dones, doneCall{done, c.werr})
			}
			return 0, c.werr
		}
		if n == len(hdr)+len(payload) {
			c.doneSeq = seq
			if done != nil {
				c.dones = append(c.dones, doneCall{done, nil})
			}
			return seq, nil
		}
		// The kernel took part of it: keep the rest, let the flusher finish.
		if n < len(hdr) {
			c.appendQueue(hdr[n:])
			c.appendQueue(payload)
		} else {
			c.appendQueue(payload[n-len(hdr):])
		}
		c.wf = append(c.wf, qframe{end: len(*c.wq), seq: seq, done: done})
		c.wfStart = -n // the frame began before the queue did
		c.startFlusher()
		return seq, nil
	}
	c.appendQueue(hdr)
	if masked {
		c.reserveQueue(len(payload)) // may compact: read the length after it
		start := len(*c.wq)
		*c.wq = (*c.wq)[:start+len(payload)]
		frame.MaskCopy((*c.wq)[start:], payload, key, 0)
	} else {
		c.appendQueue(payload)
	}
	c.wf = append(c.wf, qframe{end: len(*c.wq), seq: seq, done: done})
	if !c.flushing && uncorked {
		c.kickLocked()
		if c.werr != nil {
			return 0, c.werr
		}
	}
	return seq, nil
}

// kickLocked writes what the kernel takes of the queue now and leaves the
// rest to a flusher.
func (c *Conn) kickLocked() {
	if c.inlineWrite {
		// A blocking write on a transport rally cannot reach (TLS) writes
		// from its own goroutine: see writeInline.
		return
	}
	if c.rc != nil {
		if err := c.flushNowLocked(); err != nil {
			return
		}
		if c.wq == nil {
			return
		}
	}
	c.startFlusher()
}

// writeInline is the blocking write on a transport without a reachable
// socket (TLS, pipes): with nothing queued before it, the caller's goroutine
// writes the queue itself with the connection's blocking Write, instead of
// handing it to a flusher goroutine and waiting. It acts as the flusher
// meanwhile, so later sends queue behind it. If ctx ends during the write,
// the write deadline cuts it: the frame may be half written, so the
// connection fails. Called with wmu held; releases it.
func (c *Conn) writeInline(ctx context.Context, seq uint64) error {
	c.flushing = true
	watched := c.watchWrite(ctx)
	var werr error
	for c.doneSeq < seq && c.wq != nil && c.wpos < len(*c.wq) {
		b := (*c.wq)[c.wpos:]
		c.wlocked = len(*c.wq)
		c.wmu.Unlock()
		var n int
		n, werr = c.nc.Write(b)
		c.wmu.Lock()
		c.wlocked = 0
		c.advanceLocked(n)
		if werr != nil {
			break
		}
	}
	if werr != nil {
		c.flushing = false
		c.failWriteLocked(werr)
		err := c.werr
		c.unlockWrite()
		if watched {
			c.unwatchWrite()
		}
		c.endAbnormal(werr)
		if ctx.Err() != nil {
			return fmt.Errorf("rally: write abandoned mid-frame, connection closed: %w", ctx.Err())
		}
		return err
	}
	if c.wq != nil && c.wpos < len(*c.wq) {
		go c.flushLoop() // others queued behind: the flusher takes over
	} else {
		c.flushing = false
		c.releaseQueueLocked()
	}
	c.unlockWrite()
	if watched {
		c.unwatchWrite()
	}
	return nil
}

// watchWrite makes a blocked write return when ctx ends, by moving the
// write deadline into the past; unwatchWrite undoes it.
func (c *Conn) watchWrite(ctx context.Context) bool {
	if ctx == nil || ctx.Done() == nil {
		return false
	}
	c.dmu.Lock()
	c.wdactive = true
	c.dmu.Unlock()
	c.stopWriteWatch = context.AfterFunc(ctx, func() {
		c.dmu.Lock()
		if c.wdactive {
			c.nc.SetWriteDeadline(time.Unix(1, 0))
			c.wdinterrupted = true
		}
		c.dmu.Unlock()
	})
	return true
}

func (c *Conn) unwatchWrite() {
	c.stopWriteWatch()
	c.dmu.Lock()
	c.wdactive = false
	if c.wdinterrupted {
		c.wdinterrupted = false
		c.nc.SetWriteDeadline(time.Time{})
	}
	c.dmu.Unlock()
}

// writeNow makes one non-blocking write of a then b. The caller holds wmu
// and no flusher runs, so nothing else holds the socket's write side.
func (c *Conn) writeNow(a, b []byte) (int, error) {
	c.wa, c.wb = a, b
	err := c.rc.Write(c.writeFn)
	c.wa, c.wb = nil, nil
	if err != nil {
		return 0, err
	}
	if c.wioErr == errAgain {
		return 0, nil
	}
	return c.wn, c.wioErr
}

func (c *Conn) rawWrite(fd uintptr) bool {
	c.wn, c.wioErr = writeFd(fd, &c.iov, c.wa, c.wb)
	return true
}

// flushNowLocked writes what the kernel takes of the queue without waiting.
func (c *Conn) flushNowLocked() error {
	for c.wq != nil && c.wpos < len(*c.wq) {
		n, err := c.writeNow((*c.wq)[c.wpos:], nil)
		if err != nil {
			c.failWriteLocked(err)
			return err
		}
		if n == 0 {
			return nil
		}
		c.advanceLocked(n)
	}
	return nil
}

// rawFlush runs inside the socket's RawConn.Write: it writes until the
// socket is full (false: wait for writability and call again) or the queue
// is empty or the write failed (true).
func (c *Conn) rawFlush(fd uintptr) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wioErr = nil
	for c.wq != nil && c.wpos < len(*c.wq) {
		n, err := writeFd(fd, &c.iov, (*c.wq)[c.wpos:], nil)
		if err == errAgain {
			return false
		}
		if err != nil {
			c.wioErr = err
			return true
		}
		c.advanceLocked(n)
	}
	return true
}

func (c *Conn) startFlusher() {
	if c.flushFn == nil && c.rc != nil {
		c.flushFn = c.rawFlush
	}
	c.flushing = true
	go c.flushLoop()
}

// flushLoop drains the queue, then exits. It is the only writer of the
// socket while c.flushing is set.
func (c *Conn) flushLoop() {
	for {
		var err error
		if c.rc != nil {
			err = c.rc.Write(c.flushFn)
			if err == nil {
				c.wmu.Lock()
				err = c.wioErr
				c.unlockWrite()
			}
		} else {
			c.wmu.Lock()
			var b []byte
			if c.wq != nil {
				b = (*c.wq)[c.wpos:]
				c.wlocked = len(*c.wq)
			}
			c.unlockWrite()
			var n int
			if len(b) > 0 {
				n, err = c.nc.Write(b)
			}
			c.wmu.Lock()
			c.wlocked = 0
			c.advanceLocked(n)
			c.unlockWrite()
		}
		c.wmu.Lock()
		if err != nil {
			c.flushing = false
			c.failWriteLocked(err)
			c.unlockWrite()
			c.endAbnormal(err)
			return
		}
		if c.wq == nil || c.werr != nil {
			c.flushing = false
			c.releaseQueueLocked()
			if c.wq == nil && c.drainArmed && c.werr == nil {
				c.drainArmed = false
				c.drainDue = true
			}
			c.unlockWrite()
			return
		}
		c.unlockWrite()
	}
}

// advanceLocked records that n more bytes of the queue left.
func (c *Conn) advanceLocked(n int) {
	if n == 0 {
		return
	}
	c.wpos += n
	for c.wfh < len(c.wf) && c.wf[c.wfh].end <= c.wpos {
		if s := c.wf[c.wfh].seq; s > c.doneSeq {
			c.doneSeq = s
		}
		if d := c.wf[c.wfh].done; d != nil {
			c.dones = append(c.dones, doneCall{d, nil})
			c.wf[c.wfh].done = nil
		}
		c.wfStart = c.wf[c.wfh].end
		c.wfh++
	}
	if c.wpos == len(*c.wq) && c.wlocked == 0 {
		c.releaseQueueLocked()
	}
	c.wakeLocked()
}

func (c *Conn) wakeLocked() {
	if c.progress != nil {
		close(c.progress)
		c.progress = nil
	}
}

// releaseQueueLocked gives an empty queue's buffer back, so an idle
// connection holds none.
func (c *Conn) releaseQueueLocked() {
	if c.wlocked != 0 {
		return
	}
	bufpool.Put(c.wq)
	c.wq = nil
	c.wpos = 0
	c.wf = c.wf[:0]
	c.wfh = 0
	c.wfStart = 0
}

func (c *Conn) appendQueue(b []byte) {
	c.reserveQueue(len(b))
	*c.wq = append(*c.wq, b...)
}

// reserveQueue makes room for n more bytes, compacting written bytes away
// before growing.
func (c *Conn) reserveQueue(n int) {
	if c.wq == nil {
		c.wq = bufpool.Get(n)
		return
	}
	q := *c.wq
	if len(q)+n <= cap(q) {
		return
	}
	if c.wlocked == 0 && c.wpos > 0 {
		// Drop what was written; shift the records.
		m := copy(q, q[c.wpos:])
		for i := c.wfh; i < len(c.wf); i++ {
			c.wf[i].end -= c.wpos
		}
		c.wf = c.wf[:copy(c.wf, c.wf[c.wfh:])]
		c.wfh = 0
		c.wfStart -= c.wpos
		c.wpos = 0
		*c.wq = q[:m]
		if m+n <= cap(q) {
			return
		}
		q = q[:m]
	}
	nb := bufpool.Get(len(q) + n)
	*nb = append(*nb, q...)
	if c.wlocked == 0 {
		bufpool.Put(c.wq)
	}
	c.wq = nb
}

// failWriteLocked marks the write side dead: every send from now on, and
// every waiter, gets err.
func (c *Conn) failWriteLocked(err error) {
	first := c.werr == nil
	if first {
		c.werr = fmt.Errorf("rally: write failed: %w", err)
	}
	c.abortQueuedLocked(c.werr)
	if !c.flushing {
		c.releaseQueueLocked()
		if first {
			// No flusher will end the connection for this failure (a write
			// from the caller's goroutine failed): end it, outside the lock
			// this caller holds, so that Close and readers do not wait on a
			// connection that can no longer send.
			go c.endAbnormal(err)
		}
	}
	c.wakeLocked()
}

// abortQueuedLocked tells every queued send that asked for a completion
// that its frame will never leave.
func (c *Conn) abortQueuedLocked(err error) {
	for i := c.wfh; i < len(c.wf); i++ {
		if d := c.wf[i].done; d != nil {
			c.dones = append(c.dones, doneCall{d, err})
			c.wf[i].done = nil
		}
	}
	for i := range c.held {
		if d := c.held[i].done; d != nil {
			c.dones = append(c.dones, doneCall{d, err})
		}
	}
	c.held = c.held[:0]
}

// unlockWrite releases wmu, then runs the completions collected under it
// and the drain notification, if one is due. Every path that can finish
// frames unlocks through it.
func (c *Conn) unlockWrite() {
	if len(c.dones) == 0 && !c.drainDue {
		c.wmu.Unlock()
		return
	}
	dones := c.dones
	c.dones = c.spareDones[:0]
	c.spareDones = nil
	drain := c.drainDue
	c.drainDue = false
	c.wmu.Unlock()
	for i, d := range dones {
		d.f(d.err)
		dones[i] = doneCall{}
	}
	if dones != nil {
		// Keep the slice for the next completions: no allocation per send.
		c.wmu.Lock()
		if c.spareDones == nil {
			c.spareDones = dones[:0]
		}
		c.wmu.Unlock()
	}
	if drain {
		c.drained()
	}
}

// waitFlushed blocks until frame seq has left, the connection failed, or
// ctx ended. streaming says the frame is a fragment of a Writer's message:
// taking it back would corrupt the message, so the connection is failed.
func (c *Conn) waitFlushed(ctx context.Context, seq uint64, streaming bool) error {
	for {
		c.wmu.Lock()
		if settled, err := c.settledLocked(seq); settled {
			c.unlockWrite()
			return err
		}
		ch := c.progress
		if ch == nil {
			ch = make(chan struct{})
			c.progress = ch
		}
		c.unlockWrite()
		select {
		case <-ch:
		case <-ctx.Done():
			return c.abandon(ctx, seq, streaming)
		}
	}
}

// settledLocked reports whether frame seq's fate is known: it has left
// (nil), or it never will (the write side's error).
func (c *Conn) settledLocked(seq uint64) (bool, error) {
	if c.doneSeq >= seq {
		return true, nil
	}
	if c.werr != nil {
		return true, c.werr
	}
	return false, nil
}

// abandon takes frame seq back after its caller's context ended, if none
// of its bytes went out; otherwise it fails the connection.
func (c *Conn) abandon(ctx context.Context, seq uint64, streaming bool) error {
	c.wmu.Lock()
	if settled, err := c.settledLocked(seq); settled {
		c.unlockWrite()
		return err
	}
	if !streaming {
		start := c.wfStart
		for i := c.wfh; i < len(c.wf); i++ {
			if c.wf[i].seq == seq {
				if start >= c.wpos && start >= c.wlocked {
					c.removeFrameLocked(i, start)
					c.unlockWrite()
					return ctx.Err()
				}
				break
			}
			start = c.wf[i].end
		}
	}
	c.unlockWrite()
	c.endAbnormal(fmt.Errorf("rally: write abandoned mid-frame: %w", ctx.Err()))
	return fmt.Errorf("rally: write abandoned mid-frame, connection closed: %w", ctx.Err())
}

// removeFrameLocked deletes queued record i, whose bytes start at start and
// have not begun to leave.
func (c *Conn) removeFrameLocked(i, start int) {
	q := *c.wq
	end := c.wf[i].end
	size := end - start
	copy(q[start:], q[end:])
	*c.wq = q[:len(q)-size]
	for j := i + 1; j < len(c.wf); j++ {
		c.wf[j].end -= size
	}
	c.wf = append(c.wf[:i], c.wf[i+1:]...)
}

// sendPong answers a ping without waiting. A pong that has not started to
// leave is replaced by the newer one (RFC 6455 5.5.3), so a flood of pings
// against a slow reader cannot grow the queue.
func (c *Conn) sendPong(payload []byte) {
	c.wmu.Lock()
	defer c.unlockWrite()
	if c.werr != nil || c.closeSent {
		return
	}
	if c.wq != nil && c.wfh < len(c.wf) {
		// Drop an unsent pong.
		start := c.wfStart
		for i := c.wfh; i < len(c.wf); i++ {
			if c.wf[i].pong && start >= c.wpos && start >= c.wlocked {
				c.removeFrameLocked(i, start)
				break
			}
			start = c.wf[i].end
		}
	}
	if c.wq == nil || c.wpos == len(*c.wq) || c.wfh >= len(c.wf) {
		if _, err := c.frameLocked(frame.OpPong, true, payload); err == nil {
			c.markLastPongLocked()
		}
		return
	}
	// Queue non-empty: put the pong at the first frame boundary not yet
	// being written, ahead of the data that waits.
	h := frame.Header{Fin: true, Opcode: frame.OpPong, Length: int64(len(payload))}
	if !c.server {
		h.Masked = true
		h.Mask = c.newMask()
	}
	var pb [frame.MaxHeaderSize + frame.MaxControlPayload]byte
	n := frame.Put(pb[:], h)
	n += copy(pb[n:], payload)
	if h.Masked {
		frame.Mask(h.Mask, 0, pb[n-len(payload):n])
	}
	c.reserveQueue(n) // may compact: offsets are read after it
	bound := max(c.wpos, c.wlocked)
	at, start := len(c.wf), len(*c.wq)
	s := c.wfStart
	for i := c.wfh; i < len(c.wf); i++ {
		if s >= bound {
			at, start = i, s
			break
		}
		s = c.wf[i].end
	}
	q := (*c.wq)[:len(*c.wq)+n]
	copy(q[start+n:], q[start:len(q)-n])
	copy(q[start:], pb[:n])
	*c.wq = q
	for j := at; j < len(c.wf); j++ {
		c.wf[j].end += n
	}
	c.seq++
	c.wf = append(c.wf, qframe{})
	copy(c.wf[at+1:], c.wf[at:])
	c.wf[at] = qframe{end: start + n, seq: c.seq, pong: true}
}

func (c *Conn) markLastPongLocked() {
	if n := len(c.wf); n > c.wfh {
		c.wf[n-1].pong = true
	}
}

// Writer returns a writer for one message of type typ, sent as fragments
// as its buffer fills and ended by Close. Until Close, other data messages
// wait (control frames may still go out between fragments). Each fragment is
// handed to the kernel before Write returns; if ctx ends while one waits,
// the connection is failed, since a message cannot be taken back halfway.
// The returned writer is valid until Close and must be used by one
// goroutine.
func (c *Conn) Writer(ctx context.Context, typ MessageType) (io.WriteCloser, error) {
	if !typ.valid() {
		return nil, errWriteType
	}
	if err := c.takeWriteSlot(ctx); err != nil {
		return nil, err
	}
	c.wmu.Lock()
	if c.werr != nil || c.closeSent {
		err := c.werr
		if err == nil {
			err = ErrClosed
		}
		c.unlockWrite()
		c.releaseWriteSlot()
		return nil, err
	}
	c.writerOpen = true
	c.unlockWrite()
	if c.mw == nil {
		c.mw = &messageWriter{c: c}
	}
	c.mw.ctx = ctx
	c.mw.op = frame.Opcode(typ)
	c.mw.open = true
	c.mw.err = nil
	return c.mw, nil
}

type messageWriter struct {
	c    *Conn
	ctx  context.Context
	op   frame.Opcode // the opcode of the next fragment
	buf  *[]byte
	open bool
	err  error
}

var errWriterClosed = errors.New("rally: write to a closed message writer")

// Write gathers p into the message, sending a fragment whenever the buffer
// fills. Large writes on an empty buffer go out directly, without a copy.
func (w *messageWriter) Write(p []byte) (int, error) {
	if !w.open {
		return 0, errWriterClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		if (w.buf == nil || len(*w.buf) == 0) && len(p) >= writerBufferSize {
			if err := w.fragment(p, false); err != nil {
				return n - len(p), err
			}
			return n, nil
		}
		if w.buf == nil {
			w.buf = bufpool.Get(writerBufferSize)
		}
		k := min(len(p), writerBufferSize-len(*w.buf))
		*w.buf = append(*w.buf, p[:k]...)
		p = p[k:]
		if len(*w.buf) == writerBufferSize {
			if err := w.fragment(*w.buf, false); err != nil {
				return n - len(p), err
			}
			*w.buf = (*w.buf)[:0]
		}
	}
	return n, nil
}

func (w *messageWriter) fragment(p []byte, fin bool) error {
	err := w.c.write(w.ctx, w.op, fin, p, nil, true, CompressAuto)
	w.op = frame.OpContinuation
	if err != nil {
		w.err = err
	}
	return err
}

// Close sends the last fragment and lets other messages go again.
func (w *messageWriter) Close() error {
	if !w.open {
		return errWriterClosed
	}
	err := w.err
	if err == nil {
		var last []byte
		if w.buf != nil {
			last = *w.buf
		}
		err = w.fragment(last, true)
	}
	bufpool.Put(w.buf)
	w.buf = nil
	w.open = false
	w.ctx = nil
	c := w.c
	c.wmu.Lock()
	c.writerOpen = false
	if c.werr == nil {
		c.releaseHeldLocked()
	}
	c.unlockWrite()
	c.releaseWriteSlot()
	return err
}
