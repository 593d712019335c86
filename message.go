package rally

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// Message assembly, one home for Read, ReadAppend and a Server's Message
// callback (Reader streams chunks instead, see read.go).

// message is a data message being gathered across reads (or, once whole,
// handed out until the next event). Its type, whether it was handed out
// and its memory category are readSide's msgTyp, msgHanded and msgCat:
// bytes there pack with the read side's flags, in every Conn.
type message struct {
	buf     *[]byte
	charged int64 // bytes of buf's capacity charged to the memory budget

	// filed is charged as the budget files it for shedding (see
	// MemoryBudget.trackMessage); atomic, as shedding reads it.
	filed atomic.Int64
	// pace bounds how long a message being gathered may take to arrive,
	// when the connection has a memory budget (made with the first one).
	pace *messagePace
}

// nextMessage returns the next whole data message. Its bytes are valid
// until the next read call: they alias the read buffer (a message whole
// inside one read, no copy) or the gathering buffer. If ctx ends while a
// message is being gathered, what arrived is kept and the next call goes
// on with it. The caller holds the read lock.
func (c *Conn) nextMessage(ctx context.Context) (MessageType, []byte, error) {
	m := &c.rd.msg
	if c.rd.msgHanded {
		c.releaseMessage()
	}
	if m.buf != nil {
		m.pace.resume() // a Read whose context ended left it half gathered
	}
	for {
		ev, err := c.nextEvent(ctx)
		if err != nil {
			// Gathering is suspended (a context ended) or over: what the
			// application does not read is not the peer's slowness. An
			// event loop that used up what arrived (errLoopDry) is waiting
			// for the peer: the bound goes on.
			if err != errLoopDry {
				m.pace.stop()
			}
			if c.rd.end != nil && m.buf != nil {
				// The connection ended within the message: nothing will
				// come of it, so its memory and its charge go back now.
				c.releaseMessage()
			}
			return 0, nil, err
		}
		if ev.first && ev.fin && m.buf == nil {
			return MessageType(ev.op), ev.payload, nil
		}
		if ev.first {
			// Room for the rest of the frame, up to twice what arrived
			// (what the first growth would take), so it is copied once.
			n := len(ev.payload) + int(min(c.rd.p.remaining, int64(len(ev.payload))))
			c.rd.msgCat = uint8(c.gatherCategory())
			if err := c.chargeMessage(0, n); err != nil {
				return 0, nil, err
			}
			m.buf = bufpool.Get(n)
			c.rd.msgTyp = ev.op
			c.startPace()
		}
		if need := len(*m.buf) + len(ev.payload); need > cap(*m.buf) {
			if err := c.chargeMessage(cap(*m.buf), max(2*cap(*m.buf), need)); err != nil {
				return 0, nil, err
			}
		}
		m.append(ev.payload)
		m.pace.arrived(len(ev.payload))
		if ev.fin {
			m.pace.stop()
			c.rd.msgHanded = true
			return MessageType(c.rd.msgTyp), *m.buf, nil
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
// budget (or its share for messages) the message fails with 1013 (try
// again later), before any memory is taken. The connection is filed with
// the budget under its message's size, so that the largest messages are
// shed first when messages need room.
func (c *Conn) chargeMessage(old, n int) error {
	b := c.opts.MemoryBudget
	if b == nil {
		return nil
	}
	d := int64(bufpool.Cap(n) - old)
	if !b.charge(MemoryCategory(c.rd.msgCat), d) {
		c.rd.msg.pace.stop()
		return c.violated(violation(frame.CloseTryAgainLater, "server memory is exhausted"))
	}
	m := &c.rd.msg
	m.charged += d
	b.trackMessage(c, m.filed.Swap(m.charged), m.charged)
	return nil
}

// releaseMessage gives the gathering buffer back, and its charge.
func (c *Conn) releaseMessage() {
	m := &c.rd.msg
	if b := c.opts.MemoryBudget; b != nil {
		b.release(MemoryCategory(c.rd.msgCat), m.charged)
		b.trackMessage(c, m.filed.Swap(0), 0)
		m.pace.stop()
	}
	m.charged = 0
	bufpool.Put(m.buf)
	m.buf = nil
	c.rd.msgHanded = false
}

// shedMessage fails the message being gathered with 1013: the memory
// budget's share for messages ran out (or its pressure is elevated) and
// this message is among the largest. It is called from any goroutine. It
// reports false, and does nothing, if the message ended since it was
// filed or the connection is already ending (closed, cut, or its end
// announced with a close frame): nothing is shed twice.
func (c *Conn) shedMessage() bool {
	if c.rd.msg.filed.Load() == 0 {
		return false // the message ended since it was filed
	}
	return c.failGathering(frame.CloseTryAgainLater, "server memory is exhausted", errMessageShed)
}

var (
	errMessageShed = errors.New("rally: message shed: the memory budget's room for messages ran out and this message was among the largest")
	errMessageSlow = errors.New("rally: message too slow: it arrived slower than the memory budget's MinMessageRate")
)

// failGathering ends the connection while a message is being gathered:
// it sends a close frame with code, and once that is written (within
// CloseTimeout) closes the connection, without waiting for the peer's
// close: the reading goroutine then gives the message's memory back. It
// never blocks its caller. The end is announced at once, as a violation
// is (a CloseNow then lets the connection wind down), unless the
// connection was already ending: then it does nothing and returns false.
func (c *Conn) failGathering(code uint16, reason string, err error) bool {
	ce := &CloseError{Code: code, Reason: reason, Err: err}
	if c.cl.final.Load() != nil || !c.cl.readEnd.CompareAndSwap(nil, ce) {
		return false
	}
	go func() {
		c.closeWithCode(code, reason)
		c.wr.mu.Lock()
		seq := c.wr.closeSeqLocked()
		c.unlockWrite()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.CloseTimeout)
		c.waitFlushed(ctx, seq)
		cancel()
		c.finish(ce)
	}()
	return true
}

// messagePace bounds how long a message being gathered may take to
// arrive (MemoryBudgetOptions.MessageTimeout and MinMessageRate): a timer
// checks, every period from the message's first frame, that at least need
// more bytes of it arrived since the last check. A nil *messagePace
// bounds nothing.
type messagePace struct {
	c      *Conn
	period time.Duration
	need   int64
	timer  *time.Timer
	bytes  atomic.Int64 // bytes of the message so far (the reading goroutine adds)

	mu     sync.Mutex // serialises the timer's checks with starts and stops
	active bool
	due    time.Time // when the next check is due
	seen   int64     // bytes at the last check
}

// startPace starts bounding a message whose gathering began, if the
// connection has a memory budget with a message timeout.
func (c *Conn) startPace() {
	b := c.opts.MemoryBudget
	if b == nil || b.opts.MessageTimeout <= 0 {
		return
	}
	m := &c.rd.msg
	if m.pace == nil {
		p := &messagePace{c: c, period: b.opts.MessageTimeout}
		p.need = int64(b.opts.MinMessageRate) * int64(p.period) / int64(time.Second)
		p.timer = time.AfterFunc(time.Hour, p.check)
		p.timer.Stop()
		m.pace = p
	}
	m.pace.bytes.Store(0)
	m.pace.resume()
}

// arrived counts n more bytes of the message.
func (p *messagePace) arrived(n int) {
	if p != nil {
		p.bytes.Add(int64(n))
	}
}

// resume (re)starts the bound: the next period begins now.
func (p *messagePace) resume() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.active = true
	p.due = time.Now().Add(p.period)
	p.seen = p.bytes.Load()
	p.mu.Unlock()
	p.timer.Reset(p.period)
}

// stop ends the bound (the message ended, or gathering is suspended).
func (p *messagePace) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.active = false
	p.mu.Unlock()
	p.timer.Stop()
}

// check runs on the timer: a message that brought less than need bytes
// over the period is failed with 1008.
func (p *messagePace) check() {
	p.mu.Lock()
	if !p.active {
		p.mu.Unlock()
		return
	}
	if wait := time.Until(p.due); wait > 0 {
		// A timer armed for an earlier period fired late.
		p.mu.Unlock()
		p.timer.Reset(wait)
		return
	}
	n := p.bytes.Load()
	if n-p.seen < p.need {
		p.active = false
		p.mu.Unlock()
		p.c.failGathering(frame.ClosePolicyViolation, "message too slow", errMessageSlow)
		return
	}
	p.seen = n
	p.due = time.Now().Add(p.period)
	p.mu.Unlock()
	p.timer.Reset(p.period)
}
