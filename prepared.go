package rally

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rallyws/rally/deflate"
	"github.com/rallyws/rally/frame"
)

// PreparedMessage is a message framed once and sent to many connections
// (a broadcast, a pub/sub delivery): server connections send its bytes as
// they are, without framing or copying them again. It is immutable and safe
// for concurrent use.
//
// Who owns the bytes: NewPreparedMessage copies the payload it is given,
// so the caller may reuse its slice at once. The frame belongs to the
// message, and a server connection whose send queue has to keep it (under
// backpressure, or gathered by a cork until the batch ends) refers to it
// instead of copying it, when it is 512 bytes or more: the frame stays in
// memory, through the garbage collector, until the last connection has
// written it or given up on it (the connections keep the frame, never the
// *PreparedMessage). So the frame exists once however many
// connections wait to send it, and a message may be sent again, to any
// connection, at any time. Each connection still counts the whole frame as
// its own in BufferedAmount and BufferLimit (what waits for its peer); a
// MemoryBudget charges the frame once, however many connections refer to
// it (what the process holds), from the first reference taken until the
// last is let go. A client connection masks the payload into its own
// queue.
type PreparedMessage struct {
	typ     MessageType
	frame   []byte // header and payload as a server sends them
	payload []byte // a slice of frame
	// more is made on first use (made tells when): a message that no
	// receiver compresses or validates costs one allocation, its frame.
	// Nothing takes pm's address into a lock or a pointer atomic, so that
	// a caller that keeps no pm (a pub/sub publish) has it on its stack.
	made atomic.Bool
	more *preparedMore
}

// preparedMore is what a prepared message makes on first use.
type preparedMore struct {
	mu       sync.Mutex
	variants []preparedDeflate // compressed frames

	checkOnce sync.Once
	invalid   error // the payload's UTF-8 check
}

// makingMore serialises the making of prepared messages' more: taken
// once per message at most, by the first receiver that needs it.
var makingMore sync.Mutex

// extra returns pm.more, made by the first receiver that needs it.
func (pm *PreparedMessage) extra() *preparedMore {
	if !pm.made.Load() {
		makingMore.Lock()
		if !pm.made.Load() {
			pm.more = new(preparedMore)
			pm.made.Store(true)
		}
		makingMore.Unlock()
	}
	return pm.more
}

// NewPreparedMessage frames a copy of p as a message of type typ.
func NewPreparedMessage(typ MessageType, p []byte) (*PreparedMessage, error) {
	// Small enough to be inlined: the message lives where its caller
	// keeps it, on the caller's stack if it keeps it nowhere else.
	pm := &PreparedMessage{typ: typ}
	if !pm.prepare(p) {
		return nil, errWriteType
	}
	return pm, nil
}

// prepare frames a copy of p as pm's frame; false if pm's type is not
// that of a message.
func (pm *PreparedMessage) prepare(p []byte) bool {
	if !pm.typ.valid() {
		return false
	}
	h := frame.Header{Fin: true, Opcode: frame.Opcode(pm.typ), Length: int64(len(p))}
	b := newSharedFrame(h.Size() + len(p))
	n := frame.Put(b, h)
	copy(b[n:], p)
	pm.frame, pm.payload = b, b[n:]
	return true
}

// Type returns the message's type.
func (pm *PreparedMessage) Type() MessageType { return pm.typ }

// Payload returns the message's payload. It must not be modified:
// connections may be sending it.
func (pm *PreparedMessage) Payload() []byte { return pm.payload }

// SendPrepared is Send for a prepared message. Unlike Send, nothing is
// copied on a server connection when the kernel does not take the frame
// at once: the queue refers to the prepared frame (see PreparedMessage).
// A message NewPreparedMessage did not make is refused at the call with
// ErrInvalidPreparedMessage (Dropped); nothing is queued.
func (c *Conn) SendPrepared(pm *PreparedMessage) (SendStatus, error) {
	return c.sendPrepared(pm, nil)
}

// SendPreparedDone is SendDone for a prepared message: unless the message
// is Dropped, done is called exactly once, as SendDone says. A paced
// sender (a replay that sends the next batch once the last one left)
// shares the frame as SendPrepared does.
func (c *Conn) SendPreparedDone(pm *PreparedMessage, done func(err error)) (SendStatus, error) {
	return c.sendPrepared(pm, done)
}

func (c *Conn) sendPrepared(pm *PreparedMessage, done func(error)) (SendStatus, error) {
	if err := c.checkPrepared(pm); err != nil {
		return Dropped, err
	}
	if f := c.preparedFrame(pm); f != nil {
		return c.sendFrame(frame.Opcode(pm.typ), nil, f, done, CompressAuto)
	}
	return c.sendFrame(frame.Opcode(pm.typ), pm.payload, nil, done, CompressAuto)
}

// WritePrepared is Write for a prepared message; one NewPreparedMessage
// did not make is refused with ErrInvalidPreparedMessage.
func (c *Conn) WritePrepared(ctx context.Context, pm *PreparedMessage) error {
	if err := c.checkPrepared(pm); err != nil {
		return err
	}
	if f := c.preparedFrame(pm); f != nil {
		return c.write(ctx, 0, true, nil, f, CompressAuto, lanePrepared)
	}
	return c.Write(ctx, pm.typ, pm.payload)
}

// ErrInvalidPreparedMessage is returned by the sends of a prepared message
// (SendPrepared, WritePrepared) given one that NewPreparedMessage did not
// make: nil, or the zero PreparedMessage, which has no frame to send.
var ErrInvalidPreparedMessage = errors.New("rally: prepared message not made by NewPreparedMessage")

// checkPrepared is checkMessage for a prepared message: one that
// NewPreparedMessage made, whose text is checked once, the first time a
// connection that validates on send asks.
func (c *Conn) checkPrepared(pm *PreparedMessage) error {
	if pm == nil || pm.frame == nil {
		return ErrInvalidPreparedMessage
	}
	if pm.typ != Text || !c.opts.ValidateUTF8OnSend {
		return nil
	}
	m := pm.extra()
	m.checkOnce.Do(func() { m.invalid = c.checkMessage(Text, pm.payload) })
	return m.invalid
}

// preparedFrame is the frame of pm this server connection sends: shared
// and compressed once when the connection compresses without context,
// else the plain one. It returns nil when the connection frames the
// payload itself: a client (it masks), or a connection that keeps
// compression context (it compresses in its own order: see frameLocked).
func (c *Conn) preparedFrame(pm *PreparedMessage) []byte {
	if !c.rd.p.server {
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

// preparedDeflate is a prepared message's compressed frame for one level
// and window, made once and shared by every receiver that keeps no send
// context with that window.
type preparedDeflate struct {
	level, bits int
	frame       []byte
}

func (pm *PreparedMessage) deflated(level, bits int) []byte {
	m := pm.extra()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.variants {
		if v.level == level && v.bits == bits {
			return v.frame
		}
	}
	body := deflate.CompressOnce(nil, pm.payload, level, bits)
	h := frame.Header{Fin: true, Rsv: frame.Rsv1, Opcode: frame.Opcode(pm.typ), Length: int64(len(body))}
	b := newSharedFrame(h.Size() + len(body))
	n := frame.Put(b, h)
	copy(b[n:], body)
	m.variants = append(m.variants, preparedDeflate{level: level, bits: bits, frame: b})
	return b
}
