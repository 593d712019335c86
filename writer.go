package rally

import (
	"context"
	"errors"
	"io"

	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/bufpool"
)

// writerBufferSize is how much a streaming Writer gathers before it sends a
// fragment.
const writerBufferSize = 32 << 10

var errWriterClosed = errors.New("rally: write to a closed message writer")

// Writer returns a writer for one message of type typ, sent as fragments
// as its buffer fills and ended by Close. Until Close, other data messages
// wait: a blocking Write waits for the Writer to close, and a Send is held
// (it reports Queued, counts in BufferedAmount and against the buffer
// limit, and leaves right after the message). Control frames may still go
// out between fragments. A Close called meanwhile is held too: its close
// frame follows the message and what was held. Each fragment is handed to
// the kernel before Write returns; if ctx ends while one waits, the
// connection is failed, since a message cannot be taken back halfway. The
// returned writer is valid until Close and must be used by one goroutine.
func (c *Conn) Writer(ctx context.Context, typ MessageType) (io.WriteCloser, error) {
	if !typ.valid() {
		return nil, errWriteType
	}
	if err := c.takeWriteSlot(ctx); err != nil {
		return nil, err
	}
	c.wr.mu.Lock()
	if err := c.closedLocked(false); err != nil {
		c.unlockWrite()
		c.releaseWriteSlot()
		return nil, err
	}
	c.wr.q.streaming = true
	if c.wr.writer == nil {
		c.wr.writer = &messageWriter{c: c}
	}
	w := c.wr.writer
	c.unlockWrite()
	w.ctx = ctx
	w.op = frame.Opcode(typ)
	w.open = true
	w.err = nil
	return w, nil
}

func (c *Conn) takeWriteSlot(ctx context.Context) error {
	select {
	case c.writeSlot() <- struct{}{}:
		return nil
	case <-c.cl.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Conn) releaseWriteSlot() { <-c.writeSlot() }

// writeSlot is held by a streaming Writer; other data messages wait for it.
func (c *Conn) writeSlot() chan struct{} {
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	if c.wr.slot == nil {
		c.wr.slot = make(chan struct{}, 1)
	}
	return c.wr.slot
}

type messageWriter struct {
	c    *Conn
	ctx  context.Context
	op   frame.Opcode // the opcode of the next fragment
	buf  *[]byte
	open bool
	err  error
}

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
	err := w.c.write(w.ctx, w.op, fin, p, nil, CompressNever, laneFragment)
	w.op = frame.OpContinuation
	if err != nil {
		w.err = err
	}
	return err
}

// Close sends the last fragment and lets other messages go again: those
// held meanwhile leave first, then a close frame held meanwhile.
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
	c.wr.mu.Lock()
	c.endStreamLocked()
	c.unlockWrite()
	c.releaseWriteSlot()
	return err
}

// endStreamLocked ends a streamed message: what was held joins the queue
// and goes out.
func (c *Conn) endStreamLocked() {
	q := &c.wr.q
	closeHeld := q.closed && c.wr.closeSeq == 0
	last := q.endStream()
	if c.wr.err != nil {
		return
	}
	if closeHeld {
		c.wr.closeSeq = last
	}
	if !c.wr.flushing && !c.anyCorkLocked() {
		c.kickLocked(false)
	}
}
