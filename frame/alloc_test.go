package frame

import (
	"strings"
	"testing"
)

// TestNoFunctionAllocates pins the zero-allocation contract of the hot path:
// every function, on valid input and on the peer's mistakes alike. Only the
// errors for a caller's mistake in AppendClosePayload allocate.
func TestNoFunctionAllocates(t *testing.T) {
	hdr := Header{Fin: true, Opcode: OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 70000}
	var wire [MaxHeaderSize]byte
	n := Put(wire[:], hdr)
	bad := unhex(t, "82 7f 8000000000000000")
	payload := []byte(strings.Repeat("añ€😀 ", 200))
	buf := make([]byte, len(payload))
	appendBuf := make([]byte, 0, 256)
	closeBody := []byte("\x03\xe8going away")
	var sinkErr error
	var sinkInt int
	var sinkBool bool
	var sinkStr string

	cases := map[string]func(){
		"Header.Size": func() { sinkInt = hdr.Size() },
		"Put":         func() { sinkInt = Put(wire[:], hdr) },
		"Append":      func() { appendBuf = Append(appendBuf[:0], hdr) },
		"Parse":       func() { _, sinkInt, sinkErr = Parse(wire[:n]) },
		"Parse short": func() { _, sinkInt, sinkErr = Parse(wire[:n-1]) },
		"Parse error": func() { _, sinkInt, sinkErr = Parse(bad) },
		"CheckHeader": func() { sinkErr = CheckHeader(hdr, true, 0) },
		"CheckHeader error": func() {
			sinkErr = CheckHeader(Header{Opcode: OpPing, Masked: true}, true, 0)
		},
		"Opcode.String":  func() { sinkStr = Opcode(0xB).String() },
		"ValidCloseCode": func() { sinkBool = ValidCloseCode(4000) },
		"AppendClosePayload": func() {
			appendBuf, sinkErr = AppendClosePayload(appendBuf[:0], CloseGoingAway, []byte("bye ✓"))
		},
		"ParseClosePayload":       func() { _, _, sinkErr = ParseClosePayload(closeBody) },
		"ParseClosePayload error": func() { _, _, sinkErr = ParseClosePayload(closeBody[:1]) },
		"Mask":                    func() { sinkInt = Mask(hdr.Mask, 1, buf) },
		"MaskCopy":                func() { sinkInt = MaskCopy(buf, payload, hdr.Mask, 3) },
		"UTF8.Feed": func() {
			var v UTF8
			sinkInt = v.Feed(payload)
			sinkBool = v.Complete()
			v.Reset()
		},
		"UTF8.FeedMasked": func() {
			var v UTF8
			_, sinkInt = v.FeedMasked(hdr.Mask, 0, buf)
		},
		"ValidUTF8": func() { sinkBool = ValidUTF8(payload) },
	}
	for name, f := range cases {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, a)
		}
	}
	_, _, _, _ = sinkErr, sinkInt, sinkBool, sinkStr
}
