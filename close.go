package rally

import (
	"context"
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
// Close fail with ErrClosed.
//
// On a connection served by a Server, and from its callbacks, Close sends
// and returns at once; the Server finishes the handshake and then calls
// Server.Close.
func (c *Conn) Close(code uint16, reason string) error {
	var buf [2 + frame.MaxCloseReason]byte
	payload, err := frame.AppendClosePayload(buf[:0], code, []byte(reason))
	if err != nil {
		return fmt.Errorf("rally: close: %w", err)
	}
	if !c.sendClose(payload) {
		select {
		case <-c.done:
			return ErrClosed
		default:
		}
	}
	if c.serving {
		return nil
	}
	select {
	case c.rsem <- struct{}{}:
		// Nobody is reading: read until the peer's close frame, discarding
		// data, then wind TCP down.
		c.skipReader(nil)
		for c.rend == nil {
			if _, err := c.nextEvent(nil); err != nil {
				break
			}
		}
		if c.lingering {
			c.lingering = false
			c.linger()
		}
		// Close read to the end for its own sake: the first Read after it
		// still gets the *CloseError.
		c.rdone = false
		<-c.rsem
	case <-c.done:
	}
	<-c.done
	if c.final != nil && c.final.Code == frame.CloseAbnormal {
		return c.final
	}
	return nil
}

// CloseNow closes the TCP connection at once, without a close handshake.
// Pending sends fail; a blocked Read returns a *CloseError with code 1006.
func (c *Conn) CloseNow() error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: errors.New("closed by this side without a close handshake")})
	return nil
}

// sendClose queues a close frame unless one was already sent, and arms the
// timer that cuts the connection if the handshake does not finish in time.
// It never waits. It reports whether this call sent the frame.
func (c *Conn) sendClose(payload []byte) bool {
	c.wmu.Lock()
	if c.closeSent || c.werr != nil {
		c.unlockWrite()
		return false
	}
	seq, err := c.frameLocked(frame.OpClose, true, payload)
	c.closeSent = true
	c.closeSeq = seq
	if err == nil {
		c.closeTimer = time.AfterFunc(c.opts.CloseTimeout, c.closeTimedOut)
	}
	c.unlockWrite()
	return true
}

func (c *Conn) closeTimedOut() {
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: errors.New("close handshake timed out")})
}

// linger winds the TCP connection down after close frames were exchanged
// (or after a failure was announced with one): a server waits for its close
// frame to leave and closes its side first; a client waits for the server
// to close. Both then read and drop whatever still arrives until the peer
// closes, so that unread bytes never turn the close into a reset. The close
// timer bounds the whole. The caller holds the read lock.
func (c *Conn) linger() {
	if c.server {
		c.wmu.Lock()
		seq := c.closeSeq
		c.unlockWrite()
		c.waitFlushed(context.Background(), seq, false)
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			c.finish(c.rend)
		}
	}
	for {
		if err := c.fill(); err != nil {
			break
		}
	}
	c.releaseReadBuffer()
	c.finish(c.rend)
}

// lingerAsync winds down after a read method returned the end.
func (c *Conn) lingerAsync() {
	c.lingering = false
	go func() {
		c.rsem <- struct{}{}
		c.linger()
		<-c.rsem
	}()
}

// finish ends the connection once: the TCP connection is closed, sends and
// their waiters fail, and Done is closed.
func (c *Conn) finish(ce *CloseError) {
	c.endOnce.Do(func() {
		c.final = ce
		c.wmu.Lock()
		if c.werr == nil {
			c.werr = ErrClosed
		}
		c.abortQueuedLocked(ErrClosed)
		if !c.flushing {
			c.releaseQueueLocked()
		}
		c.wakeLocked()
		fns := c.onClose
		c.onClose = nil
		if c.closeTimer != nil {
			c.closeTimer.Stop()
		}
		if c.keepalive != nil {
			c.keepalive.Stop()
		}
		c.unlockWrite()
		c.nc.Close()
		close(c.done)
		for _, f := range fns {
			f(ce)
		}
	})
}

// drained runs OnDrain after the send queue emptied. A Server's connection
// never runs it at the same time as its other callbacks: if one is running,
// the reading goroutine runs OnDrain right after it.
func (c *Conn) drained() {
	f := c.opts.OnDrain
	if f == nil {
		return
	}
	if !c.serving {
		f(c)
		return
	}
	if !c.cbmu.TryLock() {
		c.drainPending.Store(true)
		return
	}
	c.corkBegin()
	c.callDrain(f)
	c.corkEnd()
	c.cbmu.Unlock()
}

func (c *Conn) callDrain(f func(*Conn)) {
	defer c.recoverCallback()
	f(c)
}

// endAbnormal ends the connection after a write failure.
func (c *Conn) endAbnormal(err error) {
	c.finish(&CloseError{Code: frame.CloseAbnormal, Err: err})
}

// callbackPanicked logs a recovered panic and fails the connection with
// 1011, without waiting.
func (c *Conn) callbackPanicked(v any) {
	c.log.Error("rally: panic in a connection callback; closing with 1011",
		"remote", c.nc.RemoteAddr().String(), "panic", fmt.Sprint(v))
	c.closeWithCode(frame.CloseInternalError, "")
}

// startKeepalive arms the ping and idle timer when either is configured.
func (c *Conn) startKeepalive() {
	period := c.opts.PingInterval
	if c.opts.IdleTimeout > 0 && (period <= 0 || c.opts.IdleTimeout < period) {
		period = c.opts.IdleTimeout
	}
	if period <= 0 {
		return
	}
	c.lastRead.Store(time.Now().UnixNano())
	c.wmu.Lock()
	c.keepalive = time.AfterFunc(period, c.tick)
	c.wmu.Unlock()
}

// tick pings a quiet peer and closes an idle one with 1001.
func (c *Conn) tick() {
	select {
	case <-c.done:
		return
	default:
	}
	now := time.Now()
	idle := now.Sub(time.Unix(0, c.lastRead.Load()))
	if c.opts.IdleTimeout > 0 && idle >= c.opts.IdleTimeout {
		c.closeWithCode(frame.CloseGoingAway, "idle timeout")
		return
	}
	next := time.Duration(1<<63 - 1)
	if c.opts.IdleTimeout > 0 {
		next = c.opts.IdleTimeout - idle
	}
	c.wmu.Lock()
	if p := c.opts.PingInterval; p > 0 {
		if idle >= p && now.Sub(c.lastPing) >= p {
			c.lastPing = now
			c.sendLocked(frame.OpPing, true, nil)
		}
		next = min(next, p-idle%p)
	}
	c.keepalive.Reset(max(next, time.Millisecond))
	c.unlockWrite()
}
