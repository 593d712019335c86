package frame_test

import (
	"fmt"

	"github.com/rallyws/rally/frame"
)

// A client masks a text frame into its own buffer; the server parses the
// header, checks it, and unmasks the payload in place while it validates the
// text.
func Example() {
	msg := []byte("héllo")
	key := [4]byte{0x12, 0x34, 0x56, 0x78}

	// Client side: header and masked payload in one buffer.
	h := frame.Header{Fin: true, Opcode: frame.OpText, Masked: true, Mask: key, Length: int64(len(msg))}
	wire := frame.Append(nil, h)
	n := len(wire)
	wire = append(wire, make([]byte, len(msg))...)
	frame.MaskCopy(wire[n:], msg, key, 0)
	fmt.Printf("wire: % x\n", wire)

	// Server side.
	got, n, err := frame.Parse(wire)
	if err != nil || n == 0 {
		fmt.Println("need more bytes or bad header:", err)
		return
	}
	if err := frame.CheckHeader(got, true, 0); err != nil {
		fmt.Println(err)
		return
	}
	payload := wire[n : n+int(got.Length)]
	var v frame.UTF8
	if _, bad := v.FeedMasked(got.Mask, 0, payload); bad >= 0 || !v.Complete() {
		fmt.Println("close with", frame.CloseInvalidPayload)
		return
	}
	fmt.Printf("%s, fin %v, %q\n", got.Opcode, got.Fin, payload)

	// A peer that sends a 126-byte ping breaks RFC 6455 5.5.
	err = frame.CheckHeader(frame.Header{Fin: true, Opcode: frame.OpPing, Masked: true, Length: 126}, true, 0)
	fmt.Println(err)

	// Output:
	// wire: 81 86 12 34 56 78 7a f7 ff 14 7e 5b
	// text, fin true, "héllo"
	// websocket: protocol error (1002): control frame payload longer than 125 bytes
}

// A server's text frame arrives in two reads that split "é". FeedMasked
// unmasks each part in place and validates it; the key position and the
// half character carry over to the next call, and Complete says whether the
// text may end there.
func ExampleUTF8_FeedMasked() {
	key := [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
	wire := []byte("café au lait")
	frame.Mask(key, 0, wire) // as the client sent it

	var v frame.UTF8
	pos := 0
	for _, part := range [][]byte{wire[:4], wire[4:]} {
		var bad int
		pos, bad = v.FeedMasked(key, pos, part)
		fmt.Printf("%q: first bad byte %d, complete %v\n", part, bad, v.Complete())
	}

	// Output:
	// "caf\xc3": first bad byte -1, complete false
	// "\xa9 au lait": first bad byte -1, complete true
}
