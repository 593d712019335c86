package rally

import (
	"context"
	"fmt"
	"sync"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
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
// connection is closed (ErrClosed). A message dropped by the buffer limit
// has a nil error. p is not kept or changed after Send returns: what the
// kernel did not take is copied. Safe for concurrent use, and ordered with
// Write, Ping and Close.
func (c *Conn) Send(typ MessageType, p []byte) (SendStatus, error) {
	return c.send(typ, p, nil)
}

// SendDone is Send with a completion: unless the message is Dropped, done
// is called exactly once, with nil when the whole frame has reached the
// kernel, or with the reason it never will (the connection failed or was
// closed first). done may run on the caller's goroutine before SendDone
// returns, or on another; it must not block.
func (c *Conn) SendDone(typ MessageType, p []byte, done func(err error)) (SendStatus, error) {
	return c.send(typ, p, done)
}

func (c *Conn) send(typ MessageType, p []byte, done func(error)) (SendStatus, error) {
	if !typ.valid() {
		return Dropped, errWriteType
	}
	return c.sendFrame(frame.Opcode(typ), p, nil, done, CompressAuto)
}

// SendCompress is Send with a per-message choice of compression (see
// Compress); it matters only where permessage-deflate was negotiated.
func (c *Conn) SendCompress(typ MessageType, p []byte, mode Compress) (SendStatus, error) {
	if !typ.valid() {
		return Dropped, errWriteType
	}
	return c.sendFrame(frame.Opcode(typ), p, nil, nil, mode)
}

// sendFrame is the non-blocking send of one data frame: payload p, or, for
// a server connection, a frame prebuilt by a PreparedMessage.
func (c *Conn) sendFrame(op frame.Opcode, p []byte, prepared []byte, done func(error), mode Compress) (SendStatus, error) {
	c.wmu.Lock()
	if c.werr != nil || c.closeSent {
		c.unlockWrite()
		return Dropped, ErrClosed
	}
	size := len(prepared)
	if prepared == nil {
		size = frameSize(len(p), !c.server)
	}
	if waiting := c.bufferedLocked(); waiting > 0 && c.overLimit(waiting+size) {
		code := c.limitExceededLocked()
		c.unlockWrite()
		if code != 0 {
			c.closeWithCode(code, "send buffer limit exceeded")
		}
		return Dropped, nil
	}
	if c.writerOpen {
		c.holdLocked(op, p, prepared, done)
		c.drainArmed = true
		c.unlockWrite()
		return Queued, nil
	}
	var seq uint64
	var err error
	if prepared != nil {
		seq, err = c.pushLocked(prepared, nil, false, [4]byte{}, done)
	} else {
		seq, err = c.frameDoneLocked(op, true, p, done, mode)
	}
	status := Sent
	switch {
	case err != nil:
		status = Dropped
	case c.doneSeq < seq && !c.corkedLocked():
		status = Queued
		c.drainArmed = true
	case c.flushing:
		status = Queued
		c.drainArmed = true
	}
	c.unlockWrite()
	return status, err
}

// frameSize is the size on the wire of a frame carrying n payload bytes.
func frameSize(n int, masked bool) int {
	h := frame.Header{Length: int64(n), Masked: masked}
	return h.Size() + n
}

func (c *Conn) bufferedLocked() int {
	if c.wq == nil {
		return 0
	}
	return len(*c.wq) - c.wpos
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
	payload, err := frame.AppendClosePayload(buf[:0], code, []byte(reason))
	if err == nil {
		c.sendClose(payload)
	}
}

// frameDoneLocked is frameLocked with a completion.
// A whole data message is compressed here, when permessage-deflate is on,
// under wmu and so in send order (with context takeover, order is part of
// the compressed stream).
func (c *Conn) frameDoneLocked(op frame.Opcode, fin bool, p []byte, done func(error), mode Compress) (uint64, error) {
	h := frame.Header{Fin: fin, Opcode: op}
	var zbuf *[]byte
	if fin && (op == frame.OpText || op == frame.OpBinary) && c.z.wantsCompression(len(p), mode) {
		zbuf = c.compressLocked(p)
		p = *zbuf
		h.Rsv = frame.Rsv1
	}
	h.Length = int64(len(p))
	if !c.server {
		h.Masked = true
		h.Mask = c.newMask()
	}
	hn := frame.Put(c.hdr[:], h)
	seq, err := c.pushLocked(c.hdr[:hn], p, h.Masked, h.Mask, done)
	if zbuf != nil {
		bufpool.Put(zbuf) // pushLocked wrote or copied it
	}
	return seq, err
}

// heldFrame is a whole frame accepted while a Writer streams; it joins the
// queue when the Writer closes.
type heldFrame struct {
	bytes []byte
	done  func(error)
}

func (c *Conn) holdLocked(op frame.Opcode, p, prepared []byte, done func(error)) {
	b := prepared
	if b == nil {
		h := frame.Header{Fin: true, Opcode: op, Length: int64(len(p))}
		if !c.server {
			h.Masked = true
			h.Mask = c.newMask()
		}
		b = make([]byte, h.Size()+len(p))
		n := frame.Put(b, h)
		copy(b[n:], p)
		if h.Masked {
			frame.Mask(h.Mask, 0, b[n:])
		}
	} else {
		b = append([]byte(nil), prepared...)
	}
	c.held = append(c.held, heldFrame{bytes: b, done: done})
}

// releaseHeldLocked queues the frames held while a Writer streamed.
func (c *Conn) releaseHeldLocked() {
	for i, h := range c.held {
		c.pushLocked(h.bytes, nil, false, [4]byte{}, h.done)
		c.held[i] = heldFrame{}
	}
	c.held = c.held[:0]
}

// Cork runs f with this connection's sends gathered: frames sent during f
// leave together, in one system call where the kernel takes them, when f
// returns. A blocking Write inside f flushes what was gathered first, so it
// cannot wait on itself. Corks nest. A Server corks automatically around
// the callbacks of each batch of frames it reads.
func (c *Conn) Cork(f func()) {
	c.corkBegin()
	defer c.corkEnd()
	f()
}

func (c *Conn) corkBegin() {
	c.wmu.Lock()
	c.corked++
	c.wmu.Unlock()
}

// corkedLocked reports whether sends are gathered now: by the
// connection's own cork (Cork, a Server's batch) or by the cork of another
// connection it joined (JoinCork).
func (c *Conn) corkedLocked() bool { return c.corked > 0 || c.nOwners > 0 }

func (c *Conn) corkEnd() {
	c.wmu.Lock()
	c.corked--
	var peers []*Conn
	if c.corked == 0 {
		// The peers joined this connection's own cork: they go now, even if
		// this connection itself joined another's (two publishers feeding
		// each other must not hold each other forever).
		peers = c.corkPeers
		c.corkPeers = c.spareCorkPeers[:0]
		c.spareCorkPeers = nil
		c.uncorkedLocked()
	}
	c.unlockWrite()
	if peers == nil {
		return
	}
	for i, p := range peers {
		p.leaveCork(c)
		peers[i] = nil
	}
	c.wmu.Lock()
	if c.spareCorkPeers == nil {
		c.spareCorkPeers = peers[:0] // no allocation per batch
	}
	c.wmu.Unlock()
}

// uncorkedLocked writes what was gathered once no cork holds it any more.
func (c *Conn) uncorkedLocked() {
	if !c.corkedLocked() && !c.flushing && c.werr == nil && c.bufferedLocked() > 0 {
		c.kickLocked()
		if c.flushing {
			c.drainArmed = true
		}
	}
}

// JoinCork corks c until origin's current cork ends, if origin is corked
// right now (as it is inside its Server callbacks), and reports whether it
// did. A batch of messages that origin's callbacks send to many connections
// (a pub/sub publish) then reaches each of them in one write instead of one
// write per message. c stays writable: a blocking Write on c flushes first.
func (c *Conn) JoinCork(origin *Conn) bool {
	if origin == nil || origin == c {
		return false
	}
	origin.wmu.Lock()
	corked := origin.corked > 0
	origin.wmu.Unlock()
	if !corked {
		return false
	}
	c.wmu.Lock()
	if c.werr != nil {
		c.unlockWrite()
		return false
	}
	for _, o := range c.corkOwners[:c.nOwners] {
		if o == origin {
			// Joined already: it flushes when this batch ends.
			c.unlockWrite()
			return true
		}
	}
	if c.nOwners == len(c.corkOwners) {
		// Held by enough batches already: it flushes when they end.
		c.unlockWrite()
		return true
	}
	// Joining several origins' batches at once (publishers whose batches
	// overlap) makes a receiver take one write for all of them.
	c.corkOwners[c.nOwners] = origin
	c.nOwners++
	c.unlockWrite()
	origin.wmu.Lock()
	if origin.corked == 0 {
		origin.wmu.Unlock()
		c.leaveCork(origin)
		return false
	}
	origin.corkPeers = append(origin.corkPeers, c)
	origin.wmu.Unlock()
	return true
}

// leaveCork ends the cork JoinCork took for origin.
func (c *Conn) leaveCork(origin *Conn) {
	c.wmu.Lock()
	for i, o := range c.corkOwners[:c.nOwners] {
		if o == origin {
			c.nOwners--
			c.corkOwners[i] = c.corkOwners[c.nOwners]
			c.corkOwners[c.nOwners] = nil
			break
		}
	}
	c.uncorkedLocked()
	c.unlockWrite()
}

// OnClose registers f to be called once the connection has ended, with how
// it ended. If it has already ended, f runs at once. f runs on whichever
// goroutine ended the connection and must not block; it is how packages
// built on rally (pubsub) learn that a connection is gone.
func (c *Conn) OnClose(f func(*CloseError)) {
	c.wmu.Lock()
	select {
	case <-c.done:
		c.wmu.Unlock()
		f(c.final)
		return
	default:
	}
	c.onClose = append(c.onClose, f)
	c.wmu.Unlock()
}

// PreparedMessage is a message framed once and sent to many connections
// (a broadcast, a pub/sub delivery): server connections send its bytes as
// they are, without framing or copying them again. It is immutable and safe
// for concurrent use.
type PreparedMessage struct {
	typ     MessageType
	frame   []byte // header and payload as a server sends them
	payload []byte // a slice of frame

	mu       sync.Mutex
	variants []preparedDeflate // compressed frames, made on first use
}

// NewPreparedMessage frames a copy of p as a message of type typ.
func NewPreparedMessage(typ MessageType, p []byte) (*PreparedMessage, error) {
	if !typ.valid() {
		return nil, errWriteType
	}
	h := frame.Header{Fin: true, Opcode: frame.Opcode(typ), Length: int64(len(p))}
	b := make([]byte, h.Size()+len(p))
	n := frame.Put(b, h)
	copy(b[n:], p)
	return &PreparedMessage{typ: typ, frame: b, payload: b[n:]}, nil
}

// Type returns the message's type.
func (pm *PreparedMessage) Type() MessageType { return pm.typ }

// Payload returns the message's payload. It must not be modified.
func (pm *PreparedMessage) Payload() []byte { return pm.payload }

// SendPrepared is Send for a prepared message.
func (c *Conn) SendPrepared(pm *PreparedMessage) (SendStatus, error) {
	if f := c.preparedFrame(pm); f != nil {
		return c.sendFrame(frame.Opcode(pm.typ), nil, f, nil, CompressAuto)
	}
	return c.sendFrame(frame.Opcode(pm.typ), pm.payload, nil, nil, CompressAuto)
}

// WritePrepared is Write for a prepared message.
func (c *Conn) WritePrepared(ctx context.Context, pm *PreparedMessage) error {
	if f := c.preparedFrame(pm); f != nil {
		return c.writeFrame(ctx, f)
	}
	return c.Write(ctx, pm.typ, pm.payload)
}

// preparedFrame is the frame of pm this server connection sends: shared
// and compressed once when the connection compresses without context,
// else the plain one (a connection that keeps context compresses the
// payload itself, in its own order: see frameLocked).
func (c *Conn) preparedFrame(pm *PreparedMessage) []byte {
	if !c.server {
		return nil
	}
	z := c.z
	if z == nil || z.comp == nil || !z.wantsCompression(len(pm.payload), CompressAuto) {
		return pm.frame
	}
	if z.takeover {
		return nil
	}
	return pm.deflated(z.level, z.bits)
}
