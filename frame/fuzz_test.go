package frame

import (
	"bytes"
	"errors"
	"testing"
	"unicode/utf8"
)

func FuzzParse(f *testing.F) {
	for _, tt := range headerTable {
		f.Add(unhex(f, tt.wire))
	}
	for _, s := range []string{"", "81", "827e00", "827f80", "827f8000000000000000", "82ff00000000000000050102", "827e0005", "ffffffffffffffffffffffffffffff"} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The full slice expression makes any read beyond data panic.
		h, n, err := Parse(data[:len(data):len(data)])
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) || pe.Code != CloseProtocolError || n != 0 {
				t.Fatalf("Parse(%x) = %d, %v; want only a 1002 *ProtocolError", data, n, err)
			}
			if len(data) < 3 || data[1]&0x7f != 127 || data[2]&0x80 == 0 {
				t.Fatalf("Parse(%x) failed on a header whose length is not 64-bit with the top bit set", data)
			}
			return
		}
		if n == 0 {
			if len(data) >= MaxHeaderSize {
				t.Fatalf("Parse(%x) wants more than %d bytes", data, MaxHeaderSize)
			}
			return
		}
		if n > len(data) || n > MaxHeaderSize || h.Length < 0 {
			t.Fatalf("Parse(%x) = %+v, %d", data, h, n)
		}
		// Every shorter prefix asks for more bytes.
		for k := 0; k < n; k++ {
			if _, m, err := Parse(data[:k:k]); m != 0 || err != nil {
				t.Fatalf("Parse(%x) = %d, %v on a prefix of a %d-byte header", data[:k], m, err, n)
			}
		}
		// Put writes the minimal form, which parses back to h; when the
		// input was minimal it is the same bytes.
		var buf [MaxHeaderSize]byte
		m := Put(buf[:], h)
		if m != h.Size() {
			t.Fatalf("Put wrote %d bytes, Size says %d", m, h.Size())
		}
		back, k, err := Parse(buf[:m])
		if err != nil || k != m || back != h {
			t.Fatalf("Parse(Put(%+v)) = %+v, %d, %v", h, back, k, err)
		}
		if m == n && !bytes.Equal(buf[:m], data[:n]) {
			t.Fatalf("minimal header %x re-encoded as %x", data[:n], buf[:m])
		}
		_ = CheckHeader(h, h.Masked, Rsv1)
	})
}

func FuzzUTF8(f *testing.F) {
	for _, tt := range utf8Table {
		f.Add(unhex(f, tt.hex), uint16(1), uint16(2))
	}
	for _, tt := range longSamples {
		f.Add([]byte(tt.s), uint16(7), uint16(40))
	}
	f.Add(mixedText, uint16(63), uint16(129))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint16) {
		// The input as it is, and after enough ASCII that the vector
		// validator sees it whole, not only through the automaton.
		long := append(bytes.Repeat([]byte{'x'}, simdMin+int(cut1)%37), data...)
		for _, p := range [][]byte{data, long} {
			for _, path := range simdPaths() {
				useSIMD = path
				checkUTF8Splits(t, p, int(cut1), int(cut2))
			}
			useSIMD = bestSIMD
		}
	})
}

// checkUTF8Splits checks ValidUTF8, Feed in one, two and three parts, and
// FeedMasked in two parts against unicode/utf8.
func checkUTF8Splits(t *testing.T, data []byte, cut1, cut2 int) {
	t.Helper()
	valid := utf8.Valid(data)
	want := oracleInvalidAt(data)
	if got := ValidUTF8(data); got != valid {
		t.Fatalf("path %v: ValidUTF8(%x) = %v, utf8.Valid = %v", useSIMD, data, got, valid)
	}
	i, j := cut1%(len(data)+1), cut2%(len(data)+1)
	if i > j {
		i, j = j, i
	}
	for _, parts := range [][][]byte{{data}, {data[:i], data[i:]}, {data[:i], data[i:j], data[j:]}} {
		at, complete := feedParts(parts...)
		if at != want || complete != valid {
			t.Fatalf("path %v: %x in %d parts cut at %d,%d: fails at %d, complete %v; oracle %d, utf8.Valid %v",
				useSIMD, data, len(parts), i, j, at, complete, want, valid)
		}
	}
	key := [4]byte{byte(cut1), byte(cut2), 0xa5, 0x3c}
	if at, complete, unmasked := feedMaskedParts(data, key, i); at != want || complete != valid || !unmasked {
		t.Fatalf("path %v: %x masked, cut at %d: fails at %d, complete %v, unmasked %v; oracle %d, utf8.Valid %v",
			useSIMD, data, i, at, complete, unmasked, want, valid)
	}
}

func FuzzMask(f *testing.F) {
	f.Add([]byte("hello, world"), uint32(0x12345678), uint8(0), uint8(0), uint16(5))
	f.Add(bytes.Repeat([]byte{0xAA}, 100), uint32(0xffffffff), uint8(3), uint8(5), uint16(33))
	f.Add([]byte{}, uint32(0), uint8(1), uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, k uint32, pos, off uint8, cut uint16) {
		key := [4]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
		o := int(off) % (len(data) + 1)
		p := data[o:]
		want := bytes.Clone(p)
		wantNext := maskRef(key, int(pos), want)

		got := bytes.Clone(data)
		c := int(cut) % (len(p) + 1)
		next := Mask(key, int(pos), got[o:o+c])
		next = Mask(key, next, got[o+c:])
		if next != wantNext || !bytes.Equal(got[o:], want) || !bytes.Equal(got[:o], data[:o]) {
			t.Fatalf("Mask(%x, pos %d) in two parts cut at %d = %x, %d; want %x, %d", p, pos, c, got[o:], next, want, wantNext)
		}

		dst := make([]byte, len(p))
		if next := MaskCopy(dst, p, key, int(pos)); next != wantNext || !bytes.Equal(dst, want) {
			t.Fatalf("MaskCopy(%x, pos %d) = %x, %d; want %x, %d", p, pos, dst, next, want, wantNext)
		}
	})
}
