package rally

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/rallyws/rally/frame"
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
	// errWriteLimit is a Write that may not wait refused by the send
	// buffer limit (a Send would report Dropped).
	errWriteLimit = errors.New("rally: write: the send buffer limit was reached (the message was not sent)")
)

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
//
// The one exception is told by the call site: on an event loop's
// goroutine (a callback of a Server with EventLoop set, for any
// connection) Write does not wait for the kernel, since the loop's other
// connections would wait with it: it returns nil once the frame is
// accepted (it leaves in order, with the turn's other sends, after the
// turn), or the error that kept it out, including the send buffer limit,
// which a Send reports as Dropped; ctx is not consulted. Use SendDone to
// learn when such a frame has left. Everywhere else, a Server's
// goroutine-mode callbacks included, Write waits for the kernel, which
// paces a callback by its peer.
func (c *Conn) Write(ctx context.Context, typ MessageType, p []byte) error {
	if err := c.checkMessage(typ, p); err != nil {
		return err
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, CompressAuto, laneMessage)
}

// WriteCompress is Write with a per-message choice of compression (see
// Compress); it matters only where permessage-deflate was negotiated.
func (c *Conn) WriteCompress(ctx context.Context, typ MessageType, p []byte, mode Compress) error {
	if err := c.checkMessage(typ, p); err != nil {
		return err
	}
	return c.write(ctx, frame.Opcode(typ), true, p, nil, mode, laneMessage)
}

// Ping sends a ping with payload (at most 125 bytes) and returns once it has
// been handed to the kernel. It does not wait for the pong: pongs are
// reported to ConnOptions.OnPong (or Server.Pong) by whoever reads. A ping
// may go out between two fragments of a message being streamed. Where Write
// would not wait (on an event loop's goroutine, see Write), neither does
// Ping.
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

// BufferedCost is what ConnOptions.BufferLimit compares with: the bytes
// BufferedAmount counts plus the bookkeeping of what waits, about 100
// bytes a record (88 on 64-bit platforms). It is BufferedAmount's measure
// of memory. Frames sent with Send or SendPrepared (no completion) that
// wait behind one another share a record, so a slow peer's queue of them
// costs about their bytes; each frame of SendDone, Write or a Writer has
// its own, so a queue of 10-byte frames sent with completions (a
// compressed repeat, a tiny delta) costs about ten times its bytes.
func (c *Conn) BufferedCost() int {
	c.wr.mu.Lock()
	defer c.unlockWrite()
	return c.wr.q.cost()
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
	if !mayWait() {
		return c.writeAccepted(op, fin, p, prepared, mode, ln)
	}
	c.wr.mu.Lock()
	if c.wr.q.streaming && (ln == laneMessage || ln == lanePrepared) {
		c.unlockWrite()
		if err := c.takeWriteSlot(ctx); err != nil {
			return err
		}
		defer c.releaseWriteSlot()
		c.wr.mu.Lock()
	}
	if err := c.closedLocked(); err != nil {
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
		f = outFrame{payload: prepared, shared: true, share: shareOf(prepared)}
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

// writeAccepted is a blocking write called where it must not wait for
// the kernel (an event loop's goroutine, see mayWait): the frame is accepted in order, as a
// Send's would be, and gathered with the caller's cork or loop turn; it
// returns nil once the frame is accepted and the error that kept it out
// otherwise (the buffer limit included, which a Send reports as Dropped).
func (c *Conn) writeAccepted(op frame.Opcode, fin bool, p, prepared []byte, mode Compress, ln lane) error {
	if ln == laneMessage || ln == lanePrepared {
		st, err := c.sendFrame(op, p, prepared, nil, mode)
		if st == Dropped && err == nil {
			return errWriteLimit
		}
		return err
	}
	// A ping, or a fragment of the Writer this goroutine streams.
	g := currentG()
	c.wr.mu.Lock()
	if err := c.closedLocked(); err != nil {
		c.unlockWrite()
		return err
	}
	f := c.frameLocked(op, fin, p, mode, ln == laneFragment)
	_, err := c.enqueueLocked(&f, !c.corkedLocked(g), false)
	c.unlockWrite()
	return err
}

// closedLocked returns why nothing more may be sent, or nil.
func (c *Conn) closedLocked() error {
	if c.wr.err != nil {
		return c.wr.err
	}
	if c.wr.q.closed {
		return ErrClosed
	}
	return nil
}

// flushInline is a blocking write's wait when no goroutine writes the
// queue: the caller's goroutine writes it, with the write lock released
// during each write, until its frame seq has left; then it hands what
// remains to a flushing goroutine. If ctx ends meanwhile, the write
// deadline cuts the wait. Called with the write lock held; releases it.
func (c *Conn) flushInline(ctx context.Context, seq uint64) error {
	c.wr.flushing = true
	c.armStallLocked()
	if later, _ := c.t.flush(&c.wr.mu, c, false); later {
		// The transport's owner writes the queue (an event loop): wait
		// for it.
		c.unlockWrite()
		return c.waitFlushed(ctx, seq)
	}
	c.wr.mu.Unlock()
	watched := c.watchWrite(ctx)
	c.wr.mu.Lock()
	var werr error
	q := &c.wr.q
	for c.wr.err == nil && q.doneSeq < seq && q.queued() > 0 && werr == nil {
		werr = c.writeSomeLocked(seq)
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
	// cut the wait is cleared. The flushing role is kept until then, so
	// that no other goroutine writes under this one's deadline or takes
	// the write watch while this one clears it (completions wait for the
	// next unlockWrite).
	if watched {
		c.wr.mu.Unlock()
		c.unwatchWrite()
		c.wr.mu.Lock()
	}
	c.wr.flushing = false
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
	return c.dl.watch(c, ctx, writeDeadline)
}

func (c *Conn) unwatchWrite() { c.dl.unwatch(writeDeadline) }

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
		m := c.wr.moreLocked()
		ch := m.progress
		if ch == nil {
			ch = make(chan struct{})
			m.progress = ch
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
			c.wr.q.addDone(done, ctx.Err())
		}
		return false, ctx.Err()
	}
	return true, fmt.Errorf("rally: write abandoned mid-frame, connection closed: %w", ctx.Err())
}
