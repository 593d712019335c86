package rally

import (
	"io"
	"testing"
	"time"

	"github.com/rallyws/rally/frame"
)

// maskedFrame is a client's frame of n payload bytes of op.
func maskedFrame(op frame.Opcode, n int) []byte {
	h := frame.Header{Fin: true, Opcode: op, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: int64(n)}
	b := frame.Append(nil, h)
	return append(b, make([]byte, n)...)
}

func TestReadsAskForWholeLargeFrames(t *testing.T) {
	big := maskedFrame(frame.OpBinary, 64<<10) // 65550 bytes with its header
	for _, c := range []struct {
		name string
		fed  []byte // what the parser has consumed
		want int
	}{
		{"nothing yet: the default buffer", nil, 0},
		{"after 1 KiB frames: the default buffer", maskedFrame(frame.OpBinary, 1<<10), 0},
		{"after a ping: the default buffer", maskedFrame(frame.OpPing, 5), 0},
		{"after a 64 KiB frame: three more whole ones", big, 3 * len(big)},
		{"inside a 64 KiB frame: its rest and the whole ones that fit", big[:1000], len(big) - 1000 + 3*len(big)},
		{"inside a header: the default buffer", big[:3], 0},
		{"after a 16 KiB frame: as many whole ones as fit", maskedFrame(frame.OpBinary, 16<<10), 15 * (16<<10 + 8)},
		{"inside a 1 MiB frame: at most readAhead", maskedFrame(frame.OpBinary, 1<<20)[:100], readAhead},
		{"after a 1 MiB frame: readAhead of the next", maskedFrame(frame.OpBinary, 1<<20), readAhead},
	} {
		p := parser{server: true}
		for in := c.fed; len(in) > 0; {
			_, n, err := p.next(in, readLimits{})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			in = in[n:]
		}
		if got := p.readSize(); got != c.want {
			t.Errorf("%s: readSize %d, want %d", c.name, got, c.want)
		}
	}
}

// A cork that has gathered corkMax bytes lets the sends after them go out
// at once: the peer reads the first frame while the cork is still held.
func TestACorkHoldingCorkMaxBytesSendsWithoutWaitingForItsEnd(t *testing.T) {
	a, peer := socketPair(t)
	t.Cleanup(func() { peer.Close() })
	c := newConn(a, nil, true, "", nil)
	t.Cleanup(func() { c.CloseNow() })
	msg := make([]byte, 64<<10)
	c.Cork(func() {
		for range corkMax/len(msg) + 1 {
			if _, err := c.Send(Binary, msg); err != nil {
				t.Fatal(err)
			}
		}
		// Only a safety net: the bytes are in the socket already, or
		// never will be until the cork ends.
		peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [4]byte
		if _, err := io.ReadFull(peer, hdr[:]); err != nil {
			t.Fatalf("reading the first frame inside the cork: %v", err)
		}
		if hdr != [4]byte{0x82, 127, 0, 0} {
			t.Fatalf("first frame starts % x, want a final binary frame with a 64-bit length", hdr)
		}
	})
}

// A frame of largeSend bytes or more sent into a cork that holds nothing
// is written at once, from the caller's bytes; a small one after it is
// gathered as before.
func TestALargeSendIntoAnEmptyCorkIsWrittenAtOnce(t *testing.T) {
	a, peer := socketPair(t)
	t.Cleanup(func() { peer.Close() })
	c := newConn(a, nil, true, "", nil)
	t.Cleanup(func() { c.CloseNow() })
	c.Cork(func() {
		if st, err := c.Send(Binary, make([]byte, largeSend)); st != Sent || err != nil {
			t.Fatalf("large Send = %v %v, want sent", st, err)
		}
		peer.SetReadDeadline(time.Now().Add(10 * time.Second)) // only a safety net
		var hdr [4]byte
		if _, err := io.ReadFull(peer, hdr[:]); err != nil {
			t.Fatalf("reading the large frame inside the cork: %v", err)
		}
		if _, err := c.Send(Text, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if n := c.BufferedAmount(); n != 7 {
			t.Fatalf("BufferedAmount %d after a small send into the cork, want 7 (gathered)", n)
		}
	})
}
