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
// out between fragments. A Close called meanwhile does not wait for the
// message: its close frame follows the fragments already sent, the
// writer's further writes fail with ErrClosed, and the held sends are
// reported failed. Each fragment is handed to
// the kernel before Write returns; if ctx ends while one waits, the
// connection is failed, since a message cannot be taken back halfway. The
// returned writer is valid until Close and must be used by one goroutine.
func (c *Conn) Writer(ctx context.Context, typ MessageType) (io.WriteCloser, error) {
	return c.WriterCompress(ctx, typ, CompressAuto)
}

// WriterCompress is Writer with a per-message choice of compression (see
// Compress). Where permessage-deflate was negotiated, a streamed message is
// compressed fragment by fragment (RSV1 on its first frame only), each
// fragment flushed so the peer can inflate it as it arrives; CompressAuto
// applies the threshold to the message's first fragment (a message longer
// than the writer's 32 KiB buffer counts as at least that long).
func (c *Conn) WriterCompress(ctx context.Context, typ MessageType, mode Compress) (io.WriteCloser, error) {
	if !typ.valid() {
		return nil, errWriteType
	}
	if err := c.takeWriteSlot(ctx); err != nil {
		return nil, err
	}
	c.wr.mu.Lock()
	if err := c.closedLocked(); err != nil {
		c.unlockWrite()
		c.releaseWriteSlot()
		return nil, err
	}
	c.wr.q.streaming = true
	m := c.wr.moreLocked()
	if m.writer == nil {
		m.writer = &messageWriter{c: c}
	}
	w := m.writer
	c.unlockWrite()
	w.ctx = ctx
	w.op = frame.Opcode(typ)
	w.mode = mode
	w.open = true
	w.err = nil
	w.validate = typ == Text && c.opts.ValidateUTF8OnSend
	w.utf8.Reset()
	return w, nil
}

func (c *Conn) takeWriteSlot(ctx context.Context) error {
	select {
	case c.writeSlot() <- struct{}{}:
		return nil
	case <-c.Done():
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
	m := c.wr.moreLocked()
	if m.slot == nil {
		m.slot = make(chan struct{}, 1)
	}
	return m.slot
}

type messageWriter struct {
	c    *Conn
	ctx  context.Context
	op   frame.Opcode // the opcode of the next fragment
	buf  *[]byte
	mode Compress
	open bool
	err  error

	// With ConnOptions.ValidateUTF8OnSend, text is checked as it is
	// written, and a fragment never ends inside a character: the bytes of
	// an unfinished one stay in the buffer for the next fragment.
	validate bool
	utf8     frame.UTF8
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
	if w.validate {
		v := w.utf8
		if i := v.Feed(p); i >= 0 {
			return 0, &InvalidUTF8Error{Offset: i}
		}
		w.utf8 = v
	}
	n := len(p)
	for len(p) > 0 {
		if (w.buf == nil || len(*w.buf) == 0) && len(p) >= writerBufferSize {
			k := w.unfinished(p)
			if err := w.fragment(p[:len(p)-k], false); err != nil {
				return n - len(p), err
			}
			p = p[len(p)-k:]
			if k == 0 {
				return n, nil
			}
		}
		if w.buf == nil {
			w.buf = bufpool.Get(writerBufferSize)
		}
		k := min(len(p), writerBufferSize-len(*w.buf))
		*w.buf = append(*w.buf, p[:k]...)
		p = p[k:]
		if len(*w.buf) == writerBufferSize {
			b := *w.buf
			k := 0
			if len(p) == 0 {
				k = w.unfinished(b)
			}
			if err := w.fragment(b[:len(b)-k], false); err != nil {
				return n - len(p), err
			}
			*w.buf = b[:copy(b, b[len(b)-k:])]
		}
	}
	return n, nil
}

// unfinished returns how many bytes at the end of b, the end of what was
// written so far, belong to a character not finished yet (0 unless the
// writer validates).
func (w *messageWriter) unfinished(b []byte) int {
	if !w.validate || w.utf8.Complete() {
		return 0
	}
	for k := 1; k <= 3 && k <= len(b); k++ {
		if b[len(b)-k]&0xC0 != 0x80 {
			return k // b[len(b)-k] starts the unfinished character
		}
	}
	return 0
}

func (w *messageWriter) fragment(p []byte, fin bool) error {
	err := w.c.write(w.ctx, w.op, fin, p, nil, w.mode, laneFragment)
	w.op = frame.OpContinuation
	if err != nil {
		w.err = err
	}
	return err
}

// Close sends the last fragment and lets other messages go again, those
// held meanwhile first.
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
		var cut error
		if k := w.unfinished(last); k > 0 {
			// The message would end inside a character: it ends before
			// it instead, and the caller is told.
			last = last[:len(last)-k]
			cut = &InvalidUTF8Error{Offset: 0}
		}
		err = w.fragment(last, true)
		if err == nil {
			err = cut
		}
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
	if c.wr.more != nil {
		c.wr.more.streamZ = false
	}
	q.endStream()
	if c.wr.err != nil {
		return
	}
	if !c.wr.flushing && !c.anyCorkLocked() {
		c.kickLocked(false)
	}
}
