package rally

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// readBufferSize is the size of the buffer a connection borrows while bytes
// arrive. An idle connection holds none.
const readBufferSize = 32 << 10

// Read reads the next whole message and returns its type and payload. The
// payload is the caller's: one allocation, grown as the payload arrives,
// never sized from what a header claims.
//
// Ping, pong and close frames are handled while reading. When the
// connection ends, Read returns a *CloseError once (the peer's close code,
// or the rule it broke, or 1006), and ErrClosed after that.
//
// If ctx ends first, Read returns ctx.Err() and the connection stays usable:
// a message that was arriving is kept, and the next Read goes on with it.
// Read is not for concurrent use: a second reader waits for the first.
// On a connection a Server serves (with or without EventLoop) Read and
// the other read methods return an error at once: the Server reads it.
func (c *Conn) Read(ctx context.Context) (MessageType, []byte, error) {
	return c.readMessage(ctx, nil, true)
}

// ReadAppend is Read into the caller's buffer: it appends the next message
// to dst and returns the extended slice. With a dst of enough capacity it
// allocates nothing.
func (c *Conn) ReadAppend(ctx context.Context, dst []byte) (MessageType, []byte, error) {
	return c.readMessage(ctx, dst, false)
}

func (c *Conn) readMessage(ctx context.Context, dst []byte, own bool) (MessageType, []byte, error) {
	if err := c.lockRead(ctx); err != nil {
		return 0, dst, err
	}
	defer c.unlockRead()
	defer c.lingerIfEnded()
	if c.rd.end != nil {
		return 0, dst, c.deliverEnd()
	}
	if c.dl.watch(c, ctx, readDeadline) {
		defer c.dl.unwatch(readDeadline)
	}
	if err := c.skipReader(ctx); err != nil {
		return 0, dst, err
	}
	typ, p, err := c.nextMessage(ctx)
	if err != nil {
		return 0, dst, err
	}
	if own {
		dst = make([]byte, len(p))
		copy(dst, p)
	} else {
		dst = append(dst, p...)
	}
	if c.rd.msgHanded {
		c.releaseMessage()
	}
	return typ, dst, nil
}

// Reader returns the type of the next message and a reader for its
// payload, which fills the caller's buffers as the payload arrives and
// returns io.EOF at the message's end. The reader is valid until the next
// call of Read, ReadAppend or Reader, which first discard what it left
// unread. ctx bounds every read from the returned reader.
func (c *Conn) Reader(ctx context.Context) (MessageType, io.Reader, error) {
	if err := c.lockRead(ctx); err != nil {
		return 0, nil, err
	}
	defer c.unlockRead()
	defer c.lingerIfEnded()
	if c.rd.end != nil {
		return 0, nil, c.deliverEnd()
	}
	if c.dl.watch(c, ctx, readDeadline) {
		defer c.dl.unwatch(readDeadline)
	}
	if err := c.skipReader(ctx); err != nil {
		return 0, nil, err
	}
	if m := &c.rd.msg; m.buf != nil && !c.rd.msgHanded {
		// A message was half gathered by a Read whose context ended: hand
		// out what arrived, then the rest.
		r := c.reader()
		r.ctx, r.active, r.fin = ctx, true, false
		r.held = m.buf
		r.chunk = *m.buf
		m.buf = nil
		c.opts.MemoryBudget.release(MemoryCategory(c.rd.msgCat), m.charged)
		m.charged = 0
		return MessageType(c.rd.msgTyp), r, nil
	}
	ev, err := c.nextEvent(ctx)
	if err != nil {
		return 0, nil, err
	}
	r := c.reader()
	r.ctx, r.active, r.chunk, r.fin = ctx, true, ev.payload, ev.fin
	return MessageType(ev.op), r, nil
}

func (c *Conn) reader() *messageReader {
	x := c.extras()
	if x.reader == nil {
		x.reader = &messageReader{c: c}
	}
	return x.reader
}

// messageReader streams one message. Its chunk aliases the connection's
// read buffer (or held, a gathered prefix) and is used up before the next
// event is parsed.
type messageReader struct {
	c      *Conn
	ctx    context.Context
	active bool
	chunk  []byte
	fin    bool
	held   *[]byte
}

// Read fills p with the next bytes of the message.
func (r *messageReader) Read(p []byte) (int, error) {
	c := r.c
	if err := c.lockRead(r.ctx); err != nil {
		return 0, err
	}
	defer c.unlockRead()
	defer c.lingerIfEnded()
	if !r.active {
		return 0, io.EOF
	}
	if c.dl.watch(c, r.ctx, readDeadline) {
		defer c.dl.unwatch(readDeadline)
	}
	for len(r.chunk) == 0 {
		if r.fin {
			r.finish()
			return 0, io.EOF
		}
		if r.held != nil {
			bufpool.Put(r.held)
			r.held = nil
		}
		ev, err := c.nextEvent(r.ctx)
		if err != nil {
			if c.rd.end != nil {
				r.finish()
			}
			return 0, err
		}
		r.chunk, r.fin = ev.payload, ev.fin
	}
	n := copy(p, r.chunk)
	r.chunk = r.chunk[n:]
	if len(r.chunk) == 0 && r.fin {
		r.finish()
		return n, io.EOF
	}
	return n, nil
}

func (r *messageReader) finish() {
	r.active = false
	r.chunk = nil
	r.ctx = nil
	if r.held != nil {
		bufpool.Put(r.held)
		r.held = nil
	}
}

// skipReader discards what a previous Reader left of its message.
func (c *Conn) skipReader(ctx context.Context) error {
	if c.rd.msgHanded {
		c.releaseMessage()
	}
	var r *messageReader
	if x := c.x.Load(); x != nil {
		r = x.reader
	}
	for r != nil && r.active {
		if r.fin {
			r.finish()
			return nil
		}
		if r.held != nil {
			bufpool.Put(r.held)
			r.held = nil
		}
		ev, err := c.nextEvent(ctx)
		if err != nil {
			r.finish()
			return err
		}
		r.chunk, r.fin = ev.payload, ev.fin
	}
	return nil
}

// errServedRead is a read method called on a connection a Server reads.
var errServedRead = errors.New("rally: read: this connection is read by its Server (on a goroutine or an event loop): its messages reach Server.Message")

// driven reports whether the connection's reads are driven by its Server
// (a goroutine of the Server's, or an event loop), which reads without
// the read lock: the read methods refuse, and whoever drives the reads
// sees the peer's close.
func (c *Conn) driven() bool { return c.rd.sem == nil }

// drive hands the read side to a Server, which reads without the read
// lock from now on (see driven). Called before anyone else has c.
func (c *Conn) drive() { c.rd.sem = nil }

// lockRead takes the read side for the calling goroutine. A connection a
// Server reads refuses at once, whoever drives its reads.
func (c *Conn) lockRead(ctx context.Context) error {
	if c.driven() {
		return errServedRead
	}
	select {
	case c.rd.sem <- struct{}{}:
	default:
		select {
		case c.rd.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.rd.g.Store(currentG())
	return nil
}

func (c *Conn) unlockRead() {
	c.rd.g.Store(0)
	<-c.rd.sem
}

// lingerIfEnded starts winding TCP down once a read method has returned the
// end of the read side.
func (c *Conn) lingerIfEnded() {
	if c.rd.linger {
		c.lingerAsync()
	}
}

// deliverEnd reports the end of the read side: the *CloseError once, then
// ErrClosed.
func (c *Conn) deliverEnd() error {
	if c.rd.ended {
		return ErrClosed
	}
	c.rd.ended = true
	return c.rd.end
}

// nextEvent returns the next chunk of a data message, acting on control
// frames on the way. The caller holds the read lock. On error the read side
// has ended (rd.end is set and its error returned) unless ctx ended, which
// leaves the connection as it was.
func (c *Conn) nextEvent(ctx context.Context) (event, error) {
	for {
		if z := c.z; z != nil && z.inflating {
			if c.isDone() {
				// The connection was cut while a message inflated (shed by
				// the memory budget, timed out, closed): no more of it is
				// inflated. A few KiB of input can inflate to a GiB, and
				// an event loop would not see the cut before the end of
				// its turn.
				return event{}, c.endRead(c.ioEnd(net.ErrClosed), false)
			}
			// Whoever drives the reads may want them back (an event loop
			// shares its turn): it comes back to the connection later.
			n := z.piece
			z.piece = 0
			if c.t.yieldInflating(n) {
				return event{}, errLoopDry
			}
			// Pieces of a compressed message come before more input: they
			// are inflated from the read buffer in place.
			ev, ok, err := c.nextPiece()
			if err != nil {
				return event{}, err
			}
			if ok {
				return ev, nil
			}
		}
		if len(c.rd.in) == 0 {
			if c.rd.batch {
				// A Server's batch is done: what its callbacks sent leaves now.
				c.rd.batch = false
				c.corkEnd()
			}
			c.idleCompression()
			if err := c.fill(); err != nil {
				if err == errLoopDry {
					// An event loop used up what arrived: it comes back
					// when more does.
					return event{}, err
				}
				if ctx != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
					return event{}, ctx.Err()
				}
				return event{}, c.endRead(c.ioEnd(err), false)
			}
			if c.rd.corks {
				// What the batch's callbacks send leaves at its end.
				c.corkBegin()
				c.rd.batch = true
			}
			continue
		}
		ev, n, err := c.rd.p.next(c.rd.in, c.opts.readLimits())
		c.rd.in = c.rd.in[n:]
		if err != nil {
			return event{}, c.violated(err)
		}
		switch ev.kind {
		case evData:
			if ev.compressed {
				c.feedCompressed(ev)
				continue
			}
			return ev, nil
		case evControl:
			if err := c.control(ev); err != nil {
				return event{}, err
			}
		}
	}
}

// fill reads more bytes. It gives the read buffer back first, so a
// connection waiting for data on a socket holds none.
func (c *Conn) fill() error {
	c.rd.in = nil
	// Whole large frames per read, where the transport can (readsize.go).
	buf, n, err := c.t.read(c.rd.buf, c.rd.p.readSize())
	c.rd.buf = buf
	if err != nil {
		return err
	}
	c.rd.in = (*buf)[:n]
	if b, ok := c.t.(backlogWriter); ok && b.backlogged() {
		// The read made the transport write (TLS: an alert, a KeyUpdate
		// reply).
		c.wr.mu.Lock()
		if !c.wr.flushing {
			b.flushBacklog()
		}
		c.wr.mu.Unlock()
	}
	if c.opts.PingInterval > 0 || c.opts.IdleTimeout > 0 {
		c.rd.last.Store(time.Now().UnixNano())
	}
	return nil
}

// releaseReadBuffer gives back the read buffer once nothing is left in it.
func (c *Conn) releaseReadBuffer() {
	if len(c.rd.in) == 0 && c.rd.buf != nil {
		bufpool.Put(c.rd.buf)
		c.rd.buf = nil
		c.rd.in = nil
	}
}

// control acts on a ping, pong or close frame.
func (c *Conn) control(ev event) error {
	switch ev.op {
	case frame.OpPing:
		if !c.allowControl() {
			return c.controlTooFast()
		}
		if c.opts.OnPing != nil && c.callHook(c.opts.OnPing, ev.payload) {
			// The hook panicked: a 1011 close is on its way; keep reading
			// for the peer's answer.
			return nil
		}
		c.sendPong(ev.payload)
	case frame.OpPong:
		if !c.allowControl() {
			return c.controlTooFast()
		}
		if c.opts.OnPong != nil {
			c.callHook(c.opts.OnPong, ev.payload)
		}
	case frame.OpClose:
		code, reason, err := frame.ParseClosePayload(ev.payload)
		if err != nil {
			return c.violated(err)
		}
		// Echo the peer's close as npm ws does: its code and reason, or an
		// empty body for an empty one (RFC 6455 5.5.1).
		if code == frame.CloseNoStatus {
			c.sendClose(nil)
		} else {
			c.sendClose(ev.payload)
		}
		return c.endRead(&CloseError{Code: code, Reason: string(reason)}, true)
	}
	return nil
}

// violated fails the connection for a protocol violation: a close frame
// with the rule's code goes out, and the read side ends with it.
func (c *Conn) violated(err error) error {
	var pe *frame.ProtocolError
	if !errors.As(err, &pe) {
		pe = &frame.ProtocolError{Code: frame.CloseProtocolError, Rule: err.Error()}
	}
	reason := closeReason(pe.Rule)
	if pe.Code == frame.CloseTooBig && c.opts.ReadLimitReason != "" {
		reason = closeReason(c.opts.ReadLimitReason)
	}
	c.closeWithCode(pe.Code, reason)
	return c.endRead(&CloseError{Code: pe.Code, Reason: reason, Err: pe}, true)
}

// ioEnd turns a read error into how the connection ended.
func (c *Conn) ioEnd(err error) *CloseError {
	if c.isDone() {
		return c.cl.final.Load()
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return &CloseError{Code: frame.CloseAbnormal, Err: err}
}

// endRead records the end of the read side and returns it (delivering it
// once). linger says the TCP connection still has to be wound down (a close
// frame was exchanged or sent); otherwise the connection is finished now.
func (c *Conn) endRead(ce *CloseError, linger bool) error {
	c.rd.end = ce
	c.rd.linger = linger
	if c.z != nil {
		c.z.decomp.Abort() // a message cut short gives its decoder back
		c.z.inflating = false
	}
	if linger {
		c.cl.readEnd.Store(ce)
	}
	if !linger {
		c.finish(ce)
		c.releaseReadBuffer()
	}
	return c.deliverEnd()
}
