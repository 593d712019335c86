package frame

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// headerTable is the wire format of RFC 6455 5.2: each row is a header and
// its minimal encoding.
var headerTable = []struct {
	name string
	h    Header
	wire string
}{
	{"empty final text", Header{Fin: true, Opcode: OpText}, "81 00"},
	{"7-bit length 125", Header{Fin: true, Opcode: OpText, Length: 125}, "81 7d"},
	{"16-bit length 126", Header{Fin: true, Opcode: OpText, Length: 126}, "81 7e 007e"},
	{"16-bit length 127", Header{Fin: true, Opcode: OpText, Length: 127}, "81 7e 007f"},
	{"16-bit length 65535", Header{Fin: true, Opcode: OpBinary, Length: 65535}, "82 7e ffff"},
	{"64-bit length 65536", Header{Fin: true, Opcode: OpBinary, Length: 65536}, "82 7f 0000000000010000"},
	{"64-bit length 2^32", Header{Fin: true, Opcode: OpBinary, Length: 1 << 32}, "82 7f 0000000100000000"},
	{"64-bit length 2^63-1", Header{Fin: true, Opcode: OpBinary, Length: 1<<63 - 1}, "82 7f 7fffffffffffffff"},
	{"non-final continuation", Header{Opcode: OpContinuation, Length: 3}, "00 03"},
	{"rsv1 compressed first fragment", Header{Rsv: Rsv1, Opcode: OpText, Length: 1}, "41 01"},
	{"all rsv bits and fin", Header{Fin: true, Rsv: Rsv1 | Rsv2 | Rsv3, Opcode: OpBinary}, "f2 00"},
	{"rsv2 and rsv3", Header{Rsv: Rsv2 | Rsv3, Opcode: 0x3}, "33 00"},
	{"masked ping", Header{Fin: true, Opcode: OpPing, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 5}, "89 85 01020304"},
	{"masked 16-bit", Header{Fin: true, Opcode: OpText, Masked: true, Mask: [4]byte{0xde, 0xad, 0xbe, 0xef}, Length: 300}, "81 fe 012c deadbeef"},
	{"masked 64-bit", Header{Fin: true, Opcode: OpBinary, Masked: true, Mask: [4]byte{0xff, 0, 0xff, 0}, Length: 1 << 40}, "82 ff 0000010000000000 ff00ff00"},
	{"masked with zero key", Header{Fin: true, Opcode: OpClose, Masked: true, Length: 2}, "88 82 00000000"},
	{"reserved opcode is still structure", Header{Fin: true, Opcode: 0xF, Length: 1}, "8f 01"},
}

func TestPutWritesTheMinimalEncoding(t *testing.T) {
	for _, tt := range headerTable {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.wire)
			if got := tt.h.Size(); got != len(want) {
				t.Errorf("Size() = %d, want %d", got, len(want))
			}
			buf := bytes.Repeat([]byte{0xAA}, MaxHeaderSize+2)
			n := Put(buf, tt.h)
			if !bytes.Equal(buf[:n], want) {
				t.Errorf("Put wrote %x, want %x", buf[:n], want)
			}
			for i, c := range buf[n:] {
				if c != 0xAA {
					t.Fatalf("Put wrote beyond its %d bytes at %d", n, n+i)
				}
			}
			pre := []byte{0x01, 0x02}
			if got := Append(pre, tt.h); !bytes.Equal(got, append([]byte{0x01, 0x02}, want...)) {
				t.Errorf("Append = %x, want 0102%x", got, want)
			}
		})
	}
}

func TestParseDecodesEveryHeaderOfTheTable(t *testing.T) {
	for _, tt := range headerTable {
		t.Run(tt.name, func(t *testing.T) {
			wire := unhex(t, tt.wire)
			// Trailing payload bytes must not change the result.
			in := append(append([]byte{}, wire...), 0x55, 0x66, 0x77)
			h, n, err := Parse(in)
			if err != nil || n != len(wire) || h != tt.h {
				t.Errorf("Parse(%x) = %+v, %d, %v; want %+v, %d, nil", in, h, n, err, tt.h, len(wire))
			}
		})
	}
}

func TestParseAsksForMoreBytesOnEveryPrefixOfAValidHeader(t *testing.T) {
	for _, tt := range headerTable {
		wire := unhex(t, tt.wire)
		for k := 0; k < len(wire); k++ {
			// A full slice expression: reading past k would panic.
			h, n, err := Parse(wire[:k:k])
			if n != 0 || err != nil || h != (Header{}) {
				t.Errorf("%s: Parse(%x) = %+v, %d, %v; want zero header, 0, nil", tt.name, wire[:k], h, n, err)
			}
		}
	}
}

func TestParseAcceptsNonMinimalLengthEncodings(t *testing.T) {
	tests := []struct {
		wire   string
		length int64
		n      int
	}{
		{"82 7e 0000", 0, 4},
		{"82 7e 007d", 125, 4},
		{"82 7f 0000000000000005", 5, 10},
		{"82 7f 000000000000ffff", 65535, 10},
		{"82 ff 0000000000000001 01020304", 1, 14},
	}
	for _, tt := range tests {
		h, n, err := Parse(unhex(t, tt.wire))
		if err != nil || n != tt.n || h.Length != tt.length {
			t.Errorf("Parse(%s) = length %d, n %d, %v; want %d, %d, nil", tt.wire, h.Length, n, err, tt.length, tt.n)
		}
	}
}

func TestParseFailsA64BitLengthWithTheMostSignificantBitSetWith1002(t *testing.T) {
	wire := unhex(t, "82 7f 8000000000000000")
	// As soon as the first length byte is there, and with the whole header.
	for k := 3; k <= len(wire); k++ {
		h, n, err := Parse(wire[:k:k])
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Code != CloseProtocolError || n != 0 || h != (Header{}) {
			t.Fatalf("Parse(%x) = %+v, %d, %v; want a 1002 *ProtocolError", wire[:k], h, n, err)
		}
	}
	if _, _, err := Parse(unhex(t, "82 ff ffffffffffffffff 01020304")); err == nil {
		t.Fatal("Parse accepted a masked header with length 2^64-1")
	}
}

func TestPutAndParseRoundTripEveryLengthBoundary(t *testing.T) {
	lengths := []int64{0, 1, 124, 125, 126, 127, 65534, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1}
	for _, l := range lengths {
		for _, masked := range []bool{false, true} {
			for _, op := range []Opcode{OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong} {
				h := Header{Fin: l%2 == 0, Rsv: byte(l) & rsvBits, Opcode: op, Masked: masked, Length: l}
				if masked {
					h.Mask = [4]byte{byte(l), 0x5a, 0xa5, byte(op)}
				}
				var buf [MaxHeaderSize]byte
				n := Put(buf[:], h)
				got, m, err := Parse(buf[:n])
				if err != nil || m != n || got != h {
					t.Fatalf("Parse(Put(%+v)) = %+v, %d, %v (wire %s)", h, got, m, err, hex.EncodeToString(buf[:n]))
				}
			}
		}
	}
}

func TestPutIgnoresBitsOutsideTheirFields(t *testing.T) {
	var buf [MaxHeaderSize]byte
	n := Put(buf[:], Header{Fin: true, Rsv: 0xFF, Opcode: 0xF1})
	if got, want := buf[:n], unhex(t, "f1 00"); !bytes.Equal(got, want) {
		t.Errorf("Put = %x, want %x", got, want)
	}
}

func TestPutPanicsOnANegativeLengthOrAShortBuffer(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("negative length", func() { Put(make([]byte, MaxHeaderSize), Header{Length: -1}) })
	mustPanic("short buffer for 16-bit length", func() { Put(make([]byte, 3), Header{Length: 126}) })
	mustPanic("short buffer for the mask", func() { Put(make([]byte, 5, 14), Header{Masked: true}) })
}
