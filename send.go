package rally

import (
	"fmt"

	"github.com/rallyws/rally/frame"
)

// SendStatus says what became of a non-blocking send.
type SendStatus int

const (
	// Sent: the frame was handed to the kernel, or joins a corked batch
	// that leaves when the cork ends.
	Sent SendStatus = iota + 1
	// Queued: the frame was accepted but waits in the send queue because
	// the peer is not reading fast enough (backpressure). It leaves in
	// order; BufferedAmount counts it; OnDrain fires once the queue empties.
	Queued
	// Dropped: the frame was not accepted (the connection is closing or
	// closed, the queue is past its limit, or the arguments were invalid).
	Dropped
)

// String returns "sent", "queued" or "dropped".
func (s SendStatus) String() string {
	switch s {
	case Sent:
		return "sent"
	case Queued:
		return "queued"
	case Dropped:
		return "dropped"
	}
	return fmt.Sprintf("SendStatus(%d)", int(s))
}

// Send sends p as one message of type typ without ever blocking: not on a
// slow peer, not on a lock held across I/O. It returns at once with what
// became of the message (see SendStatus); the error is non-nil when it was
// dropped for an invalid argument (nothing is queued then) or because the
// connection is closed or failed. A message dropped by the buffer limit
// has a nil error. p is not kept or changed after Send returns: what the
// kernel did not take is copied. Safe for concurrent use, and ordered with
// Write, Ping and Close.
func (c *Conn) Send(typ MessageType, p []byte) (SendStatus, error) {
	return c.send(typ, p, nil)
}

// SendDone is Send with a completion: unless the message is Dropped, done
// is called exactly once, with nil when the whole frame has reached the
// kernel, or with the reason it never will (the connection failed or was
// closed first). A Dropped message is reported by Send's result alone:
// done is not called. done may run on the caller's goroutine before
// SendDone returns, or on another; it must not block for long, and may
// call Write, Send or Close. A panic in it is recovered and closes the
// connection with 1011.
func (c *Conn) SendDone(typ MessageType, p []byte, done func(err error)) (SendStatus, error) {
	return c.send(typ, p, done)
}

func (c *Conn) send(typ MessageType, p []byte, done func(error)) (SendStatus, error) {
	if err := c.checkMessage(typ, p); err != nil {
		return Dropped, err
	}
	return c.sendFrame(frame.Opcode(typ), p, nil, done, CompressAuto)
}

// SendCompress is Send with a per-message choice of compression (see
// Compress); it matters only where permessage-deflate was negotiated.
func (c *Conn) SendCompress(typ MessageType, p []byte, mode Compress) (SendStatus, error) {
	if err := c.checkMessage(typ, p); err != nil {
		return Dropped, err
	}
	return c.sendFrame(frame.Opcode(typ), p, nil, nil, mode)
}

// sendFrame is the non-blocking send of one data frame: payload p, or, for
// a server connection, a frame prebuilt by a PreparedMessage.
func (c *Conn) sendFrame(op frame.Opcode, p []byte, prepared []byte, done func(error), mode Compress) (SendStatus, error) {
	size := len(prepared)
	if prepared == nil {
		size = frameSize(len(p), !c.rd.p.server)
	}
	if w := c.waiting.Load(); w > 0 && c.overLimit(int(w)+size+recordSize) {
		// The peer takes nothing and the frame does not fit: dropped
		// without taking the lock (see noteWaitingLocked).
		return Dropped, nil
	}
	g := currentG()
	c.wr.mu.Lock()
	q := &c.wr.q
	if err := c.closedLocked(); err != nil {
		c.unlockWrite()
		return Dropped, err
	}
	// The limit is on bytes waiting for the peer (backpressure) or for a
	// streamed message to end; bytes merely gathered by a cork do not
	// count against it.
	// (On a transport that cannot try a write, everything waiting counts.)
	backlog := q.blocked || q.streaming || !c.t.canTry()
	if waiting := q.cost(); waiting > 0 && backlog && c.overLimit(waiting+size+recordSize) {
		// The next send of this size drops without the lock, even where
		// the transport took nothing since the value was last published
		// (a stream blocked in a write).
		c.noteWaitingLocked()
		code := c.limitExceededLocked()
		c.unlockWrite()
		if code != 0 {
			c.closeWithCode(code, "send buffer limit exceeded")
		}
		return Dropped, nil
	}
	if b := c.opts.MemoryBudget; b != nil && backlog && (prepared == nil || size < refMin || !shareOf(prepared).held()) {
		// It would wait in the queue: there must be room for it, unless
		// it is a shared frame some queue already refers to, which is
		// charged once and so costs nothing more (see frameShare).
		if !b.charge(MemorySendQueues, int64(size)) {
			code := c.limitExceededLocked()
			c.unlockWrite()
			if code != 0 {
				c.closeWithCode(code, "send buffer limit exceeded")
			}
			return Dropped, nil
		}
		b.release(MemorySendQueues, int64(size)) // charged as the queue grows
	}
	var f outFrame
	if prepared != nil {
		f = outFrame{payload: prepared, shared: true, share: shareOf(prepared), done: done}
	} else {
		f = c.frameLocked(op, true, p, mode, false)
		f.done = done
	}
	f.join = done == nil
	if q.streaming {
		// A Writer streams a message: this one waits for its end.
		q.hold(f.hdr, f.payload, f.masked, f.key, f.keep, f.done)
		c.putZbuf(&f)
		c.wr.drainArmed = true
		c.unlockWrite()
		return Queued, nil
	}
	// A cork stops gathering once it holds corkMax bytes: past that one
	// write per batch gains nothing, and holding more only grows the queue
	// (a receiver joined by many publishers' overlapping batches would
	// otherwise wait for all of them to end). A frame of largeSend bytes or
	// more into a cork that holds nothing is written at once, from the
	// caller's bytes, rather than copied into the queue.
	corked := c.corkedLocked(g) && q.queued() < corkMax && (size < largeSend || q.queued() > 0)
	seq, err := c.enqueueLocked(&f, !corked, false)
	status := Sent
	switch {
	case err != nil:
		status = Dropped
	case q.doneSeq >= seq:
	case corked && !q.blocked && c.t.canTry():
		// Gathered by the sender's own cork: it leaves when the cork ends.
	default:
		status = Queued
		c.wr.drainArmed = true
	}
	c.unlockWrite()
	return status, err
}

// frameSize is the size on the wire of a frame carrying n payload bytes.
func frameSize(n int, masked bool) int {
	h := frame.Header{Length: int64(n), Masked: masked}
	return h.Size() + n
}

func (c *Conn) overLimit(n int) bool {
	limit := c.opts.BufferLimit
	if limit == 0 {
		limit = DefaultBufferLimit
	}
	return limit > 0 && n > limit
}

// limitExceededLocked applies the buffer-limit policy and returns the close
// code to send, or 0 to just drop.
func (c *Conn) limitExceededLocked() uint16 {
	if c.opts.BufferLimitAction != CloseConnection {
		return 0
	}
	if c.opts.BufferLimitCloseCode != 0 {
		return c.opts.BufferLimitCloseCode
	}
	return frame.ClosePolicyViolation
}

// closeWithCode starts a close handshake without waiting for it.
func (c *Conn) closeWithCode(code uint16, reason string) {
	var buf [2 + frame.MaxCloseReason]byte
	payload, err := frame.AppendClosePayload(buf[:0], code, []byte(closeReason(reason)))
	if err == nil {
		c.sendClose(payload)
	}
}

// checkMessage validates a message's arguments at the call (nothing
// invalid reaches the queue): its type, and its text when the connection
// validates on send.
func (c *Conn) checkMessage(typ MessageType, p []byte) error {
	if !typ.valid() {
		return errWriteType
	}
	if typ == Text && c.opts.ValidateUTF8OnSend {
		var v frame.UTF8
		if i := v.Feed(p); i >= 0 {
			return &InvalidUTF8Error{Offset: i}
		}
		if !v.Complete() {
			return &InvalidUTF8Error{Offset: len(p)}
		}
	}
	return nil
}
