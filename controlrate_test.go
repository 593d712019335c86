package rally_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// pingFlood is n masked pings, "p-0", "p-1", ..., in one write.
func pingFlood(n int) []byte {
	var b []byte
	for i := range n {
		f := rawpeer.Ping(fmt.Appendf(nil, "p-%d", i))
		f.Masked, f.Mask = true, [4]byte{5, 6, 7, 8}
		b = append(b, rawpeer.Build(f)...)
	}
	return b
}

var engines = []struct {
	name string
	loop bool
}{{"Goroutines", false}, {"EventLoop", true}}

// A peer that sends pings faster than ConnOptions.ControlRate (by default
// 100 a second, in bursts of 1,000) is closed with 1008, and the
// application learns why (ErrControlRate), in either engine.
func TestServerClosesAPingFloodPastTheControlRateWith1008(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			rec := newRecorder()
			s := echoServer()
			s.EventLoop = e.loop
			s.Close = rec.close
			p := dialPeer(t, serve(t, s))
			go p.WriteRaw(pingFlood(2 * rally.DefaultControlRate * 10))
			pongs := 0
			for {
				f, err := p.ReadFrame()
				if err != nil {
					t.Fatalf("after %d pongs: %v, want a close 1008", pongs, err)
				}
				if f.Opcode == rawpeer.OpPong {
					pongs++
					continue
				}
				if f.Opcode != rawpeer.OpClose || len(f.Payload) < 2 || uint16(f.Payload[0])<<8|uint16(f.Payload[1]) != rally.ClosePolicyViolation {
					t.Fatalf("after %d pongs: opcode %d %q, want a close 1008", pongs, f.Opcode, f.Payload)
				}
				break
			}
			p.Close()
			if ce := rec.waitClose(t); ce.Code != rally.ClosePolicyViolation || !errors.Is(ce, rally.ErrControlRate) {
				t.Fatalf("Server.Close got %v, want 1008 with ErrControlRate", ce)
			}
		})
	}
}

// Pings within the rate are each answered, in order, in either engine.
func TestServerAnswersEveryPingWithinTheControlRateInOrder(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			s := echoServer()
			s.EventLoop = e.loop
			p := dialPeer(t, serve(t, s))
			const n = 500
			go p.WriteRaw(pingFlood(n))
			for i := range n {
				f, err := p.ReadFrame()
				if want := fmt.Sprintf("p-%d", i); err != nil || f.Opcode != rawpeer.OpPong || string(f.Payload) != want {
					t.Fatalf("frame %d: opcode %d %q %v, want the pong %q", i, f.Opcode, f.Payload, err, want)
				}
			}
		})
	}
}
