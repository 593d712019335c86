package rally

import (
	"context"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// Message assembly, one home for Read, ReadAppend and a Server's Message
// callback (Reader streams chunks instead, see read.go).

// message is a data message being gathered across reads (or, once whole,
// handed out until the next event).
type message struct {
	buf     *[]byte
	typ     MessageType
	handed  bool  // buf holds a whole message handed out by nextMessage
	charged int64 // bytes of buf's capacity charged to the memory budget
}

// nextMessage returns the next whole data message. Its bytes are valid
// until the next read call: they alias the read buffer (a message whole
// inside one read, no copy) or the gathering buffer. If ctx ends while a
// message is being gathered, what arrived is kept and the next call goes
// on with it. The caller holds the read lock.
func (c *Conn) nextMessage(ctx context.Context) (MessageType, []byte, error) {
	m := &c.rd.msg
	if m.handed {
		c.releaseMessage()
	}
	for {
		ev, err := c.nextEvent(ctx)
		if err != nil {
			return 0, nil, err
		}
		if ev.first && ev.fin && m.buf == nil {
			return MessageType(ev.op), ev.payload, nil
		}
		if ev.first {
			// Room for the rest of the frame, up to twice what arrived
			// (what the first growth would take), so it is copied once.
			n := len(ev.payload) + int(min(c.rd.p.remaining, int64(len(ev.payload))))
			if err := c.chargeMessage(0, n); err != nil {
				return 0, nil, err
			}
			m.buf = bufpool.Get(n)
			m.typ = MessageType(ev.op)
		}
		if need := len(*m.buf) + len(ev.payload); need > cap(*m.buf) {
			if err := c.chargeMessage(cap(*m.buf), max(2*cap(*m.buf), need)); err != nil {
				return 0, nil, err
			}
		}
		m.append(ev.payload)
		if ev.fin {
			m.handed = true
			return m.typ, *m.buf, nil
		}
	}
}

// append adds a chunk, growing the borrowed buffer as payload arrives
// (never from what a header claims).
func (m *message) append(p []byte) {
	b := *m.buf
	if len(b)+len(p) > cap(b) {
		nb := bufpool.Get(max(2*cap(b), len(b)+len(p)))
		*nb = append(*nb, b...)
		bufpool.Put(m.buf)
		m.buf = nb
	}
	*m.buf = append(*m.buf, p...)
}

// chargeMessage charges the memory budget for growing the gathering
// buffer from capacity old to what a buffer of n bytes costs; past the
// budget the message fails with 1013 (try again later), before any memory
// is taken.
func (c *Conn) chargeMessage(old, n int) error {
	b := c.opts.MemoryBudget
	if b == nil {
		return nil
	}
	d := int64(bufpool.Cap(n) - old)
	if !b.charge(MemoryAssembly, d) {
		return c.violated(violation(frame.CloseTryAgainLater, "server memory is exhausted"))
	}
	c.rd.msg.charged += d
	return nil
}

// releaseMessage gives the gathering buffer back, and its charge.
func (c *Conn) releaseMessage() {
	m := &c.rd.msg
	c.opts.MemoryBudget.release(MemoryAssembly, m.charged)
	m.charged = 0
	m.release()
}

// release gives the gathering buffer back.
func (m *message) release() {
	bufpool.Put(m.buf)
	m.buf = nil
	m.handed = false
}
