package rally

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// readBufferSize is the size of the buffer a connection borrows while bytes
// arrive. An idle connection holds none.
const readBufferSize = 32 << 10

// smallReadBufferSize is what a quiet connection without a reachable socket
// (TLS) waits with.
const smallReadBufferSize = 2 << 10

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
	if c.rend != nil {
		return 0, dst, c.deliverEnd()
	}
	stop := c.watch(ctx)
	defer stop()
	if err := c.skipReader(ctx); err != nil {
		return 0, dst, err
	}
	for {
		ev, err := c.nextEvent(ctx)
		if err != nil {
			return 0, dst, err
		}
		if ev.first && ev.fin && c.partial == nil {
			if own {
				return MessageType(ev.op), append([]byte(nil), ev.payload...), nil
			}
			return MessageType(ev.op), append(dst, ev.payload...), nil
		}
		if ev.first {
			c.partial = bufpool.Get(len(ev.payload))
			c.partialType = MessageType(ev.op)
		}
		c.appendPartial(ev.payload)
		if ev.fin {
			typ, p := c.partialType, *c.partial
			if own {
				dst = make([]byte, len(p))
				copy(dst, p)
			} else {
				dst = append(dst, p...)
			}
			bufpool.Put(c.partial)
			c.partial = nil
			return typ, dst, nil
		}
	}
}

// appendPartial adds a chunk to the message being gathered, growing its
// borrowed buffer as payload arrives.
func (c *Conn) appendPartial(p []byte) {
	b := *c.partial
	if len(b)+len(p) > cap(b) {
		nb := bufpool.Get(max(2*cap(b), len(b)+len(p)))
		*nb = append(*nb, b...)
		bufpool.Put(c.partial)
		c.partial = nb
	}
	*c.partial = append(*c.partial, p...)
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
	if c.rend != nil {
		return 0, nil, c.deliverEnd()
	}
	stop := c.watch(ctx)
	defer stop()
	if err := c.skipReader(ctx); err != nil {
		return 0, nil, err
	}
	if c.partial != nil {
		// A message was half gathered by a Read whose context ended: hand
		// out what arrived, then the rest.
		r := c.reader()
		r.ctx, r.active, r.fin = ctx, true, false
		r.held = c.partial
		r.chunk = *c.partial
		c.partial = nil
		return c.partialType, r, nil
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
	if c.msgr == nil {
		c.msgr = &messageReader{c: c}
	}
	return c.msgr
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
	stop := c.watch(r.ctx)
	defer stop()
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
			if c.rend != nil {
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
	r := c.msgr
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

func (c *Conn) lockRead(ctx context.Context) error {
	select {
	case c.rsem <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.rsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Conn) unlockRead() { <-c.rsem }

// lingerIfEnded starts winding TCP down once a read method has returned the
// end of the read side.
func (c *Conn) lingerIfEnded() {
	if c.lingering {
		c.lingerAsync()
	}
}

// deliverEnd reports the end of the read side: the *CloseError once, then
// ErrClosed.
func (c *Conn) deliverEnd() error {
	if c.rdone {
		return ErrClosed
	}
	c.rdone = true
	return c.rend
}

// nextEvent returns the next chunk of a data message, acting on control
// frames on the way. The caller holds the read lock. On error the read side
// has ended (c.rend is set and its error returned) unless ctx ended, which
// leaves the connection as it was.
func (c *Conn) nextEvent(ctx context.Context) (event, error) {
	if c.infl != nil {
		// The last inflated message was handed out by the previous call.
		bufpool.Put(c.infl)
		c.infl = nil
	}
	for {
		if len(c.in) == 0 {
			if c.batchCorked {
				// A Server's batch is done: what its callbacks sent leaves now.
				c.batchCorked = false
				c.corkEnd()
			}
			c.idleCompression()
			if err := c.fill(); err != nil {
				if ctx != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
					return event{}, ctx.Err()
				}
				return event{}, c.endRead(c.ioEnd(err), false)
			}
			if c.serving {
				c.corkBegin()
				c.batchCorked = true
			}
			continue
		}
		ev, n, err := c.p.next(c.in)
		c.in = c.in[n:]
		if err != nil {
			return event{}, c.violated(err)
		}
		switch ev.kind {
		case evData:
			if ev.compressed {
				if ev, err = c.gatherCompressed(ev); err != nil {
					return event{}, err
				}
				if ev.kind == evNone {
					continue
				}
			}
			return ev, nil
		case evControl:
			if err := c.control(ev); err != nil {
				return event{}, err
			}
		}
	}
}

// gatherCompressed collects the chunks of a compressed message and, at its
// last, returns the whole message inflated (kind evNone until then). The
// wire bytes were checked against the read limit on each header; the
// inflated size is checked while inflating.
func (c *Conn) gatherCompressed(ev event) (event, error) {
	if ev.first {
		c.zmsg = bufpool.Get(len(ev.payload))
	}
	b := *c.zmsg
	if len(b)+len(ev.payload) > cap(b) {
		nb := bufpool.Get(max(2*cap(b), len(b)+len(ev.payload)))
		*nb = append(*nb, b...)
		bufpool.Put(c.zmsg)
		c.zmsg = nb
	}
	*c.zmsg = append(*c.zmsg, ev.payload...)
	if !ev.fin {
		return event{}, nil
	}
	out, err := c.inflate(ev.op, *c.zmsg)
	bufpool.Put(c.zmsg)
	c.zmsg = nil
	if err != nil {
		return event{}, c.violated(err)
	}
	return event{kind: evData, op: ev.op, payload: out, first: true, fin: true}, nil
}

// fill reads more bytes. It gives the read buffer back first, so a
// connection waiting for data holds none.
func (c *Conn) fill() error {
	c.in = nil
	if c.rc != nil {
		if c.rbuf != nil {
			bufpool.Put(c.rbuf)
			c.rbuf = nil
		}
		c.rn, c.rerr = 0, nil
		err := c.rc.Read(c.readFn)
		if err == nil {
			err = c.rerr
		}
		if err != nil {
			return err
		}
		if c.rn == 0 {
			return io.EOF
		}
		c.in = (*c.rbuf)[:c.rn]
		c.touch()
		return nil
	}
	// Where rally cannot wait for readability without a buffer (TLS,
	// pipes), a connection that has been quiet waits with a small one and
	// takes the large one only while data keeps coming.
	size := smallReadBufferSize
	if c.busyRead {
		size = readBufferSize
	}
	if c.rbuf != nil && cap(*c.rbuf) != size {
		bufpool.Put(c.rbuf)
		c.rbuf = nil
	}
	if c.rbuf == nil {
		c.rbuf = bufpool.Get(size)
	}
	for {
		n, err := c.nc.Read((*c.rbuf)[:cap(*c.rbuf)])
		if n > 0 {
			c.busyRead = n == cap(*c.rbuf)
			c.in = (*c.rbuf)[:n]
			c.touch()
			return nil
		}
		if err != nil {
			bufpool.Put(c.rbuf)
			c.rbuf = nil
			return err
		}
	}
}

// rawRead runs inside RawConn.Read: it borrows a buffer only once the
// socket has data, and gives it back before waiting.
func (c *Conn) rawRead(fd uintptr) bool {
	if c.rbuf == nil {
		c.rbuf = bufpool.Get(readBufferSize)
	}
	n, err := readFd(fd, (*c.rbuf)[:cap(*c.rbuf)])
	if err == errAgain {
		bufpool.Put(c.rbuf)
		c.rbuf = nil
		return false
	}
	c.rn, c.rerr = n, err
	return true
}

func (c *Conn) touch() {
	if c.keepalive != nil {
		c.lastRead.Store(time.Now().UnixNano())
	}
}

// releaseReadBuffer gives back the read buffer once nothing is left in it.
func (c *Conn) releaseReadBuffer() {
	if len(c.in) == 0 && c.rbuf != nil {
		bufpool.Put(c.rbuf)
		c.rbuf = nil
		c.in = nil
	}
}

// control acts on a ping, pong or close frame.
func (c *Conn) control(ev event) error {
	switch ev.op {
	case frame.OpPing:
		if c.opts.OnPing != nil && c.callHook(c.opts.OnPing, ev.payload) {
			// The hook panicked: a 1011 close is on its way; keep reading
			// for the peer's answer.
			return nil
		}
		c.sendPong(ev.payload)
	case frame.OpPong:
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

// callHook runs a ping or pong hook; a panic in it is recovered and fails
// the connection with 1011. It reports whether that happened.
func (c *Conn) callHook(f func(*Conn, []byte), p []byte) (panicked bool) {
	if c.serving {
		c.cbmu.Lock()
		defer c.cbmu.Unlock()
	}
	defer func() {
		if v := recover(); v != nil {
			c.callbackPanicked(v)
			panicked = true
		}
	}()
	f(c, p)
	return false
}

// violated fails the connection for a protocol violation: a close frame
// with the rule's code goes out, and the read side ends with it.
func (c *Conn) violated(err error) error {
	var pe *frame.ProtocolError
	if !errors.As(err, &pe) {
		pe = &frame.ProtocolError{Code: frame.CloseProtocolError, Rule: err.Error()}
	}
	reason := closeReason(pe.Rule)
	c.closeWithCode(pe.Code, reason)
	return c.endRead(&CloseError{Code: pe.Code, Reason: reason, Err: pe}, true)
}

// ioEnd turns a read error into how the connection ended.
func (c *Conn) ioEnd(err error) *CloseError {
	select {
	case <-c.done:
		return c.final
	default:
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
	c.rend = ce
	c.lingering = linger
	if !linger {
		c.finish(ce)
		c.releaseReadBuffer()
	}
	return c.deliverEnd()
}

// watch makes a blocked read return when ctx ends, by moving the read
// deadline into the past. The returned func undoes it. A context that can
// never end costs nothing.
func (c *Conn) watch(ctx context.Context) func() bool {
	if ctx == nil || ctx.Done() == nil {
		return noStop
	}
	c.dmu.Lock()
	c.dactive = true
	c.dmu.Unlock()
	if c.interruptFn == nil {
		c.interruptFn = c.interruptRead
		c.unwatchFn = c.unwatch
	}
	stop := context.AfterFunc(ctx, c.interruptFn)
	c.stopWatch = stop
	return c.unwatchFn
}

func noStop() bool { return false }

func (c *Conn) interruptRead() {
	c.dmu.Lock()
	if c.dactive {
		c.nc.SetReadDeadline(time.Unix(1, 0))
		c.dinterrupted = true
	}
	c.dmu.Unlock()
}

func (c *Conn) unwatch() bool {
	if c.stopWatch != nil {
		c.stopWatch()
		c.stopWatch = nil
	}
	c.dmu.Lock()
	c.dactive = false
	if c.dinterrupted {
		c.dinterrupted = false
		c.nc.SetReadDeadline(time.Time{})
	}
	c.dmu.Unlock()
	return true
}
