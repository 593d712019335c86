package rally_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// One rule for Write, told by the call site, tested by the same test with
// and without the event loop: Write returns once the kernel took the
// frame (nothing of it left in BufferedAmount), from the application's
// goroutine and from a Server's goroutine-mode callback alike, except on
// an event loop's goroutine, where it returns once the frame is accepted,
// before a peer that does not read has taken it; the frame then leaves
// whole, in order.
func TestWriteWaitsForTheKernelExceptOnAnEventLoopsGoroutine(t *testing.T) {
	const size = 1 << 20
	big := bytes.Repeat([]byte("w"), size)
	expectBig := func(t *testing.T, p *rawpeer.Peer) {
		t.Helper()
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("reading the written message: %v", err)
		}
		if f.Opcode != rawpeer.OpBinary || !f.Fin || !bytes.Equal(f.Payload, big) {
			t.Fatalf("the peer read opcode %#x fin %v, %d bytes; want the %d-byte binary message", f.Opcode, f.Fin, len(f.Payload), size)
		}
	}
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("EventLoop=%v", loop), func(t *testing.T) {
			// RALLY_TEST_EVENT_LOOP=1 puts every Server of the tests on loops.
			onLoop := (loop || os.Getenv("RALLY_TEST_EVENT_LOOP") == "1") && runtime.GOOS == "linux"
			type result struct {
				err      error
				buffered int
			}
			wrote := make(chan result, 1)
			opened := make(chan *rally.Conn, 1)
			s := &rally.Server{EventLoop: loop,
				Open: func(c *rally.Conn) { opened <- c },
				Message: func(c *rally.Conn, _ rally.MessageType, _ []byte) {
					err := c.Write(context.Background(), rally.Binary, big)
					wrote <- result{err, c.BufferedAmount()}
				}}
			p := dialStalledPeer(t, serveSmall(t, s), nil)
			var c *rally.Conn
			select {
			case c = <-opened:
			case <-time.After(wireTimeout()):
				t.Fatal("Server.Open was not called")
			}
			if err := p.WriteFrame(rawpeer.Text("go")); err != nil {
				t.Fatal(err)
			}
			if onLoop {
				// The peer reads nothing until Write returned.
				select {
				case r := <-wrote:
					if r.err != nil || r.buffered == 0 {
						t.Fatalf("Write from Message on the loop = %v with %d bytes buffered, want nil with the frame accepted, not yet taken", r.err, r.buffered)
					}
				case <-time.After(wireTimeout()):
					t.Fatal("Write from Message on the loop waited for a peer that does not read")
				}
				expectBig(t, p)
			} else {
				expectBig(t, p)
				if r := <-wrote; r.err != nil || r.buffered != 0 {
					t.Fatalf("Write from Message on goroutines = %v with %d bytes buffered, want nil once the kernel took the frame", r.err, r.buffered)
				}
			}

			// From the test's own goroutine: Write returns once the kernel
			// took the whole frame, which the peer reads meanwhile.
			done := make(chan error, 1)
			go func() { done <- c.Write(ctxT(t), rally.Binary, big) }()
			expectBig(t, p)
			if err := <-done; err != nil {
				t.Fatalf("Write from the application's goroutine = %v, want nil", err)
			}
			if n := c.BufferedAmount(); n != 0 {
				t.Fatalf("BufferedAmount after Write returned = %d, want 0: the frame was in the kernel", n)
			}
		})
	}
}
