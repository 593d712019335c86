package rally_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// After echoing a 4 MiB message sent in 64-byte fragments (Autobahn 9.4.1),
// a close from the peer, sent once it has read the whole echo, is answered
// with a close frame, in goroutine and event-loop mode.
func TestCloseAfterALargeEchoIsAnswered(t *testing.T) {
	for _, mode := range engines {
		t.Run(mode.name, func(t *testing.T) {
			s := echoServer()
			s.EventLoop = mode.loop
			p := dialPeer(t, serve(t, s))
			msg := bytes.Repeat([]byte{0xab}, 4<<20)
			var wire []byte
			for off := 0; off < len(msg); off += 64 {
				op := rawpeer.OpContinuation
				if off == 0 {
					op = rawpeer.OpBinary
				}
				f := rawpeer.Fragment(op, msg[off:off+64], off+64 == len(msg))
				f.Masked, f.Mask = true, [4]byte{1, 2, 3, 4}
				wire = append(wire, rawpeer.Build(f)...)
			}
			go p.WriteRaw(wire)
			var got []byte
			for {
				f, err := p.ReadFrame()
				if err != nil {
					t.Fatalf("the echo after %d bytes: %v", len(got), err)
				}
				got = append(got, f.Payload...)
				if f.Fin {
					break
				}
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("echo of %d bytes, want the %d sent", len(got), len(msg))
			}
			start := time.Now()
			c := rawpeer.Close(1000, "")
			c.Masked = true
			p.WriteFrame(c)
			p.ExpectClose(t, 1000)
			t.Logf("close answered in %v", time.Since(start))
		})
	}
}
