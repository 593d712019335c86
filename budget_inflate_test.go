package rally_test

import (
	"bytes"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// What a compressed message inflates to is charged to the memory budget
// (MemoryInflate), not the few bytes that arrived: a small deflate stream
// that inflates past the budget's share for messages is failed with 1013
// before the memory is taken, one that inflates past the read limit first
// with 1009, and either way the charge is given back when the connection
// ends. A message that fits is delivered whole, the connection reads on,
// and its charge is given back once it was handled.
func TestACompressionBombIsChargedForWhatItInflatesTo(t *testing.T) {
	const limit = 1 << 20 // 512 KiB for messages being gathered
	cases := []struct {
		name      string
		readLimit int64
		inflated  int
		code      uint16 // 0: delivered
	}{
		{"PastTheShareFailsWith1013", 0, 4 << 20, rally.CloseTryAgainLater},
		{"PastTheReadLimitFailsWith1009", 256 << 10, 4 << 20, rally.CloseTooBig},
		{"WithinTheShareIsDelivered", 0, 256 << 10, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			budget := rally.NewMemoryBudget(limit)
			rec := newRecorder()
			s := echoServer()
			s.Options = &rally.AcceptOptions{
				ConnOptions: rally.ConnOptions{MemoryBudget: budget, ReadLimit: tc.readLimit},
				Compression: &rally.CompressionOptions{},
			}
			s.Close = rec.close
			p, _ := deflateServer(t, s, "permessage-deflate; client_no_context_takeover; server_no_context_takeover")
			body := deflateOnce(make([]byte, tc.inflated))
			if len(body) > 8<<10 {
				t.Fatalf("the bomb is %d bytes on the wire, want a few KiB", len(body))
			}
			if err := p.WriteFrame(compressedFrame(rawpeer.OpBinary, body)); err != nil {
				t.Fatal(err)
			}
			if tc.code != 0 {
				checkCloseFrame(t, p.ExpectClose(t, tc.code))
				p.Close()
				if ce := rec.waitClose(t); ce.Code != tc.code {
					t.Fatalf("Server.Close got %v, want %d", ce, tc.code)
				}
			} else {
				f, err := p.ReadFrame()
				if err != nil || f.Rsv&rawpeer.Rsv1 == 0 {
					t.Fatalf("the echo: %v %v, want a compressed frame", f, err)
				}
				if got := inflateOnce(t, f.Payload); !bytes.Equal(got, make([]byte, tc.inflated)) {
					t.Fatalf("the echo inflates to %d bytes, want the %d sent", len(got), tc.inflated)
				}
				p.WriteFrame(rawpeer.Ping([]byte("after")))
				if f, err := p.ReadFrame(); err != nil || f.Opcode != rawpeer.OpPong {
					t.Fatalf("after the echo: %v %v, want the pong", f, err)
				}
			}
			// A frame the server sends (the pong, the close) is charged to
			// its send queue until the write that put it on the wire has
			// returned, which may be after the peer read it: the budget
			// comes back to 0 soon after, not at once.
			waitUntil(t, "the budget holds nothing", func() bool { return budget.Used() == 0 })
			inflate, assembly := budget.Stats()[rally.MemoryInflate], budget.Stats()[rally.MemoryAssembly]
			if inflate.Used != 0 || assembly.Peak != 0 {
				t.Fatalf("after: inflate %d charged, assembly peak %d; want 0, 0", inflate.Used, assembly.Peak)
			}
			switch tc.code {
			case rally.CloseTryAgainLater:
				if inflate.Refused == 0 || inflate.Peak > limit/2 {
					t.Fatalf("inflate: %d refused, peak %d; want a refusal and a peak within the share (%d)", inflate.Refused, inflate.Peak, limit/2)
				}
			case rally.CloseTooBig:
				if inflate.Peak == 0 || inflate.Peak > limit/2 || inflate.Refused != 0 {
					t.Fatalf("inflate: %d refused, peak %d; want it charged up to the read limit, no refusal", inflate.Refused, inflate.Peak)
				}
			default:
				if inflate.Peak < int64(tc.inflated) {
					t.Fatalf("inflate: peak %d, want the %d bytes it inflated to", inflate.Peak, tc.inflated)
				}
			}
		})
	}
}
