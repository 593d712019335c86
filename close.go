package rally

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/rallyws/rally/frame"
)

// Close starts the close handshake with code and reason (RFC 6455 7.1.2):
// it checks both before anything changes (code valid on the wire, reason at
// most 123 bytes of UTF-8), sends the close frame after everything already
// accepted for sending, waits up to ConnOptions.CloseTimeout for the peer's
// close frame, and closes the TCP connection (a client first gives the
// server the same time to close it, RFC 6455 7.1.1).
//
// It returns nil once the peer answered, the *CloseError (code 1006) if it
// did not, and ErrClosed if the connection had already ended. Sends after
// Close fail with ErrClosed. If a Writer is streaming a message, the close
// frame follows the message's end (and the sends held meanwhile). Inside
// the caller's own Cork, Close sends what the cork gathered and the close
// frame at once, as a blocking Write does, so that it never waits for
// itself.
//
// From a callback, Close sends and returns nil at once, in every mode: on
// a connection served by a Server, from any callback or hook (OnPing,
// OnPong, OnDrain, Server.Drain included), and on an event loop's
// goroutine (Server.EventLoop). A callback must not wait for the peer (the
// connection's other callbacks wait for it). The handshake then finishes
// on its own: whoever reads sees the peer's answer (a Server then calls
// Server.Close; a Read returns the *CloseError); if nobody reads an Accept
// or Dial connection, rally reads to the end itself. Done is closed once
// the connection has ended.
func (c *Conn) Close(code uint16, reason string) error {
	var buf [2 + frame.MaxCloseReason]byte
	payload, err := frame.AppendClosePayload(buf[:0], code, []byte(reason))
	if err != nil {
		return fmt.Errorf("rally: close: %w", err)
	}
	// Whoever reads the connection sees the peer's answer: its Server,
	// or this goroutine if it is the reader (a hook calling back in).
	reader := c.driven() || c.onReadingGoroutine() || !mayWait()
	callback := reader || c.inCallbackCork()
	sent := c.queueClose(payload, !callback)
	if !sent && c.isDone() {
		return ErrClosed
	}
	if callback {
		if sent && !reader {
			// OnDrain on an Accept or Dial connection: nobody may be
			// reading to see the peer's answer.
			go c.awaitClose()
		}
		return nil
	}
	c.awaitClose()
	if ce := c.cl.final.Load(); ce != nil && ce.Code == frame.CloseAbnormal {
		return ce
	}
	return nil
}

// awaitClose reads until the peer's close frame and winds TCP down, if
// nobody else reads the connection; otherwise it waits for the reader to
// end it. It returns once the connection has ended.
func (c *Conn) awaitClose() {
	select {
	case c.rd.sem <- struct{}{}:
		// Nobody is reading: read until the peer's close frame, discarding
		// data, then wind TCP down.
		c.rd.g.Store(currentG())
		c.skipReader(nil)
		for c.rd.end == nil {
			if _, err := c.nextEvent(nil); err != nil {
				break
			}
		}
		if c.rd.linger {
			c.rd.linger = false
			c.linger()
		}
		// Close read to the end for its own sake: the first Read after it
		// still gets the *CloseError.
		c.rd.ended = false
		c.rd.g.Store(0)
		<-c.rd.sem
	case <-c.Done():
	}
	<-c.Done()
}

// CloseNow closes the TCP connection at once, without a close handshake.
// Pending sends fail; a blocked Read returns a *CloseError with code 1006.
// It returns nil if it ended the connection, and ErrClosed, having done
// nothing, if the connection was already closed or something else was
// ending it (a Close whose handshake timed out, the memory budget cutting
// it): a connection is cut once, and only the call that cut it learns nil.
//
// If the read side has already ended with a close frame (a Read returned
// the peer's close, or a violation was announced), the handshake is over
// but for rally's close frame, which may still be queued: CloseNow then
// returns ErrClosed and lets the frame go out and the connection wind
// down on its own (bounded by CloseTimeout) instead of cutting it, so
// that the common "defer c.CloseNow()" after a read loop does not turn a
// clean close into 1006 for the peer.
func (c *Conn) CloseNow() error {
	if c.isDone() || c.cl.readEnd.Load() != nil {
		return ErrClosed
	}
	if !c.finish(&CloseError{Code: frame.CloseAbnormal, Err: errors.New("closed by this side without a close handshake")}) {
		return ErrClosed
	}
	return nil
}

// sendClose queues a close frame unless one was already accepted, and arms
// the timer that cuts the connection if the handshake does not finish in
// time. It never waits. It reports whether this call sent the frame.
func (c *Conn) sendClose(payload []byte) bool { return c.queueClose(payload, false) }

// queueClose is sendClose; flush sends the frame past the calling
// goroutine's cork, with what the cork gathered before it: a Close that
// waits for the peer's answer must not hold its own close frame until it
// returns.
func (c *Conn) queueClose(payload []byte, flush bool) bool {
	g := currentG()
	c.wr.mu.Lock()
	q := &c.wr.q
	if q.closed || c.wr.err != nil {
		c.unlockWrite()
		return false
	}
	if q.streaming {
		// The close frame does not wait for a streamed message (whose
		// writer may never finish it): what was held for the message's
		// end can no longer go, and the message stays unfinished.
		q.failHeld(ErrClosed)
	}
	f := c.frameLocked(frame.OpClose, true, payload, CompressNever, false)
	var err error
	m := c.wr.moreLocked()
	m.closeSeq, err = c.enqueueLocked(&f, flush || !c.corkedLocked(g), false)
	q.closed = true
	if err == nil {
		m.closeTimer = time.AfterFunc(c.opts.CloseTimeout, c.closeTimedOut)
	}
	c.unlockWrite()
	return true
}

// closeTimedOut cuts the connection when the close handshake did not end
// in time. If the read side had already ended (the peer's close frame
// arrived, or a violation was announced), the handshake itself is over and
// that is how the connection ended: only TCP's wind-down was cut short.
func (c *Conn) closeTimedOut() {
	if ce := c.cl.readEnd.Load(); ce != nil {
		c.finish(ce)
		return
	}
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: errors.New("close handshake timed out")})
}

// linger winds the TCP connection down after close frames were exchanged
// (or after a failure was announced with one): a server waits for its close
// frame to leave and closes its side first; a client waits for the server
// to close. Both then read and drop whatever still arrives until the peer
// closes, so that unread bytes never turn the close into a reset, up to
// lingerBytes. The close timer bounds the whole. The caller holds the read
// lock.
func (c *Conn) linger() {
	if c.rd.p.server {
		c.wr.mu.Lock()
		seq := c.wr.closeSeqLocked()
		c.unlockWrite()
		c.waitFlushed(context.Background(), seq)
		if cw, ok := c.netConn().(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			c.finish(c.rd.end)
		}
	}
	// At most lingerBytes are dropped: a peer that keeps sending after
	// the close (the rest of a message refused at its header) is not
	// read for long.
	for dropped := 0; dropped < lingerBytes; dropped += len(c.rd.in) {
		if err := c.fill(); err != nil {
			break
		}
	}
	c.releaseReadBuffer()
	c.finish(c.rd.end)
}

// lingerAsync winds down after a read method returned the end.
func (c *Conn) lingerAsync() {
	c.rd.linger = false
	go func() {
		c.rd.sem <- struct{}{}
		c.rd.g.Store(currentG())
		c.linger()
		c.rd.g.Store(0)
		<-c.rd.sem
	}()
}

// finish ends the connection once: the TCP connection is closed, sends and
// their waiters fail, Done is closed, and OnClose functions run. The call
// that sets the final end does it and returns true; any other returns
// false once Done is closed.
func (c *Conn) finish(ce *CloseError) bool {
	if !c.cl.final.CompareAndSwap(nil, ce) {
		<-c.Done()
		return false
	}
	c.end(ce)
	return true
}

// end is finish's work, done once by whoever set the final end ce.
func (c *Conn) end(ce *CloseError) {
	c.wr.mu.Lock()
	if c.wr.err == nil {
		c.wr.err = ErrClosed
	}
	c.wr.q.fail(ErrClosed)
	c.wakeLocked()
	var onClose func(*CloseError)
	var keepalive *time.Timer
	if x := c.x.Load(); x != nil {
		onClose, keepalive = x.onClose, x.keepalive
		x.onClose = nil
	}
	if keepalive != nil {
		keepalive.Stop()
	}
	if m := c.wr.more; m != nil {
		for _, t := range []*time.Timer{m.closeTimer, m.stall} {
			if t != nil {
				t.Stop()
			}
		}
	}
	c.unlockWrite()
	c.closeTransport(ce.Code == frame.CloseAbnormal)
	c.closeDone()
	reclaimClosed()
	if onClose != nil {
		c.runOnClose(onClose, ce)
	}
}

// closeTransport closes the network connection. An abrupt end skips TLS's
// close_notify alert, whose write could block for seconds on a full socket.
func (c *Conn) closeTransport(abrupt bool) {
	if tc, ok := c.netConn().(*tls.Conn); ok && abrupt {
		tc.NetConn().Close()
		return
	}
	c.netConn().Close()
}

// endAbnormal ends the connection after a write failure.
func (c *Conn) endAbnormal(err error) {
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: err})
}
