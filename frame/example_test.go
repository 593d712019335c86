package frame_test

import (
	"fmt"

	"github.com/rallyws/rally/frame"
)

// A client masks a text frame into its own buffer; the server parses the
// header, checks it, unmasks the payload in place and validates the text.
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
	frame.Mask(got.Mask, 0, payload)
	var v frame.UTF8
	if v.Feed(payload) >= 0 || !v.Complete() {
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
