package frame

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var benchSizes = []int{16, 1024, 64 * 1024}

func BenchmarkMask(b *testing.B) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for _, n := range benchSizes {
		for _, off := range []int{0, 1} {
			buf := make([]byte, n+off)[off:]
			b.Run(strconv.Itoa(n)+"/offset"+strconv.Itoa(off), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					Mask(key, 1, buf)
				}
			})
		}
	}
}

func BenchmarkMaskCopy(b *testing.B) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for _, n := range benchSizes {
		src, dst := make([]byte, n), make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				MaskCopy(dst, src, key, 2)
			}
		})
	}
}

// utf8BenchTexts are 16 KiB each: plain ASCII, and a mix of 2-, 3- and
// 4-byte characters with spaces, as text in other scripts looks.
var utf8BenchTexts = map[string][]byte{
	"ascii16K": []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 400)[:16384]),
	"mixed16K": func() []byte {
		s := strings.Repeat("Größe Привет 世界 ready 😀🎉 ünïcødé ", 500)
		for len(s) > 16384 {
			_, size := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-size]
		}
		return []byte(s)
	}(),
}

func BenchmarkUTF8(b *testing.B) {
	for _, name := range []string{"ascii16K", "mixed16K"} {
		p := utf8BenchTexts[name]
		if !utf8.Valid(p) {
			b.Fatal("benchmark text is not valid UTF-8")
		}
		b.Run(name+"/Feed", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			var v UTF8
			for b.Loop() {
				v.Reset()
				if v.Feed(p) >= 0 || !v.Complete() {
					b.Fatal("rejected valid text")
				}
			}
		})
		b.Run(name+"/ValidUTF8", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if !ValidUTF8(p) {
					b.Fatal("rejected valid text")
				}
			}
		})
		b.Run(name+"/unicode-utf8.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if !utf8.Valid(p) {
					b.Fatal("rejected valid text")
				}
			}
		})
	}
}

var benchHeaders = []struct {
	name string
	h    Header
}{
	{"7bit", Header{Fin: true, Opcode: OpText, Length: 100}},
	{"16bit", Header{Fin: true, Opcode: OpBinary, Length: 1000}},
	{"64bit", Header{Fin: true, Opcode: OpBinary, Length: 100000}},
	{"7bit-masked", Header{Fin: true, Opcode: OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 100}},
	{"16bit-masked", Header{Fin: true, Opcode: OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 1000}},
	{"64bit-masked", Header{Fin: true, Opcode: OpBinary, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Length: 100000}},
}

func BenchmarkPut(b *testing.B) {
	var buf [MaxHeaderSize]byte
	for _, bh := range benchHeaders {
		b.Run(bh.name, func(b *testing.B) {
			for b.Loop() {
				Put(buf[:], bh.h)
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	for _, bh := range benchHeaders {
		var buf [MaxHeaderSize]byte
		n := Put(buf[:], bh.h)
		b.Run(bh.name, func(b *testing.B) {
			for b.Loop() {
				if _, m, err := Parse(buf[:n]); m != n || err != nil {
					b.Fatal("parse failed")
				}
			}
		})
	}
}

func BenchmarkCheckHeader(b *testing.B) {
	h := Header{Fin: true, Opcode: OpText, Masked: true, Length: 100}
	for b.Loop() {
		if CheckHeader(h, true, Rsv1) != nil {
			b.Fatal("rejected a valid header")
		}
	}
}
