package rally_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// answerClose is a peer that answers a close at once: it reads frames
// until the close frame, records each, sends its own close 1000, and
// closes TCP (after the server did, if the peer is the client). It returns
// what it read, or the error that stopped it.
func answerClose(p *rawpeer.Peer, rallyIsServer bool) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var seen []string
		defer func() { out <- seen }()
		for {
			f, err := p.ReadFrame()
			if err != nil {
				seen = append(seen, "error: "+err.Error())
				return
			}
			if f.Opcode != rawpeer.OpClose {
				seen = append(seen, fmt.Sprintf("opcode %#x %q", f.Opcode, f.Payload))
				continue
			}
			code, reason, _ := rawpeer.ParseClose(f.Payload)
			seen = append(seen, fmt.Sprintf("close %d %q", code, reason))
			if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
				seen = append(seen, "error: "+err.Error())
				return
			}
			if rallyIsServer {
				if err := p.WaitEOF(); err != nil {
					seen = append(seen, "error: "+err.Error())
				}
			}
			p.Close()
			return
		}
	}()
	return out
}

// Close inside the caller's own Cork sends what the cork gathered and the
// close frame at once, and completes the handshake: it used to queue the
// close frame behind the cork and wait for an answer that could not come
// before the cork ended, so nothing left until CloseTimeout and Close
// reported 1006.
func TestCloseInsideTheCallersOwnCorkCompletesTheHandshake(t *testing.T) {
	for _, side := range []string{"Server", "Client"} {
		t.Run(side, func(t *testing.T) {
			opts := rally.ConnOptions{CloseTimeout: wireTimeout()}
			var c *rally.Conn
			var p *rawpeer.Peer
			if side == "Server" {
				c, p = acceptConn(t, &rally.AcceptOptions{ConnOptions: opts})
			} else {
				c, p = dialRaw(t, &rally.DialOptions{ConnOptions: opts})
			}
			seen := answerClose(p, side == "Server")
			var err error
			c.Cork(func() {
				if st, err := c.Send(rally.Text, []byte("before")); st != rally.Sent || err != nil {
					t.Errorf("Send in the cork = %v, %v; want sent", st, err)
				}
				err = c.Close(1000, "bye")
			})
			if err != nil {
				t.Errorf("Close inside Cork = %v, want nil (the peer answered)", err)
			}
			got := <-seen
			want := []string{`opcode 0x1 "before"`, `close 1000 "bye"`}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the peer saw %q, want %q", got, want)
			}
			if err := c.Close(1000, ""); !errors.Is(err, rally.ErrClosed) {
				t.Errorf("Close after the handshake = %v, want rally.ErrClosed", err)
			}
		})
	}
}

// drainCloser is an OnDrain (or Server.Drain) that closes the connection
// the first time it runs and hands Close's result over.
type drainCloser struct {
	once   sync.Once
	result chan error
}

func newDrainCloser() *drainCloser { return &drainCloser{result: make(chan error, 1)} }

func (d *drainCloser) onDrain(c *rally.Conn) {
	d.once.Do(func() { d.result <- c.Close(1000, "drained") })
}

// Close called from OnDrain sends the close frame and returns nil at once,
// whoever drives the connection: a Server on goroutines or on an event
// loop (Server.Drain), and an Accept or Dial connection read by a loop of
// Read calls or read by nobody. The handshake then completes as the peer
// answers. On Accept and Dial connections Close used to wait for the
// peer's answer from inside OnDrain.
func TestCloseFromOnDrainSendsAndReturnsAtOnceInEveryMode(t *testing.T) {
	const size = 4 << 10
	// check fills c's queue until a Send is Queued, lets the peer read
	// everything up to the close frame that OnDrain's Close sent, wants
	// Close returned before the peer answers, answers, and returns how the
	// connection ended on rally's side.
	check := func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool, d *drainCloser, ended func() *rally.CloseError) {
		n := fillUntilQueued(t, c, p, size)
		for i := 0; ; i++ {
			f, raw := readRaw(t, p)
			if f.Opcode == rawpeer.OpBinary && f.Masked == masked && len(f.Payload) == size && i < n {
				continue
			}
			code, reason, _ := rawpeer.ParseClose(f.Payload)
			if f.Opcode != rawpeer.OpClose || code != 1000 || string(reason) != "drained" {
				t.Fatalf("frame %d after %d messages: %.40s, want close 1000 \"drained\"", i, n, raw)
			}
			break
		}
		select {
		case err := <-d.result:
			if err != nil {
				t.Fatalf("Close from OnDrain = %v, want nil", err)
			}
		case <-time.After(wireTimeout()):
			t.Fatal("Close from OnDrain did not return before the peer answered")
		}
		if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
			t.Fatal(err)
		}
		if !masked {
			p.ExpectEOF(t)
		}
		p.Close()
		if ce := ended(); ce == nil || ce.Code != 1000 {
			t.Fatalf("the connection ended with %v, want the peer's close 1000", ce)
		}
	}
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("Server/EventLoop=%v", loop), func(t *testing.T) {
			d := newDrainCloser()
			c, p, rec := servedStalled(t, &rally.Server{EventLoop: loop, Drain: d.onDrain})
			check(t, c, p, false, d, func() *rally.CloseError { return rec.waitClose(t) })
		})
	}
	for _, reader := range []string{"ReadLoop", "NoReader"} {
		t.Run(reader, func(t *testing.T) {
			var cur atomic.Pointer[drainCloser] // each side's own
			onDrain := func(c *rally.Conn) { cur.Load().onDrain(c) }
			stalledSides(t, rally.ConnOptions{BufferLimit: -1, CloseTimeout: 2 * wireTimeout(), OnDrain: onDrain},
				func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
					d := newDrainCloser()
					cur.Store(d)
					ended := make(chan *rally.CloseError, 1)
					c.OnClose(func(ce *rally.CloseError) { ended <- ce })
					if reader == "ReadLoop" {
						go func() {
							for {
								if _, _, err := c.Read(context.Background()); err != nil {
									return
								}
							}
						}()
					}
					check(t, c, p, masked, d, func() *rally.CloseError {
						select {
						case ce := <-ended:
							return ce
						case <-time.After(2 * wireTimeout()):
							t.Fatal("the connection did not end after the peer answered")
							return nil
						}
					})
				})
		})
	}
}

// One meaning per call, whoever drives the connection: on a connection a
// Server serves, Read returns an error at once (the Server reads it),
// Close from a callback sends and returns nil, and the peer sees the close
// frame after what the callback sent before it; the same test on
// goroutines and on an event loop. Read on a Server's goroutine-mode
// connection used to wait for its context instead.
func TestServedConnectionsCallsMeanTheSameInBothModes(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("EventLoop=%v", loop), func(t *testing.T) {
			closed := make(chan error, 1)
			opened := make(chan *rally.Conn, 1)
			s := &rally.Server{EventLoop: loop,
				Open: func(c *rally.Conn) { opened <- c },
				Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
					c.Send(typ, p)
					closed <- c.Close(1000, "bye")
				}}
			p := dialPeer(t, serve(t, s))
			var c *rally.Conn
			select {
			case c = <-opened:
			case <-time.After(wireTimeout()):
				t.Fatal("Server.Open was not called")
			}
			if _, _, err := c.Read(ctxT(t)); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Read on a served connection = %v, want an error at once", err)
			}
			seen := answerClose(p, true)
			if err := p.WriteFrame(rawpeer.Text("hi")); err != nil {
				t.Fatal(err)
			}
			if err := <-closed; err != nil {
				t.Errorf("Close from Message = %v, want nil", err)
			}
			got := <-seen
			want := []string{`opcode 0x1 "hi"`, `close 1000 "bye"`}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the peer saw %q, want %q", got, want)
			}
		})
	}
}
