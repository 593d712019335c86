package frame

import (
	"bytes"
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

// utf8BenchTexts are plain ASCII, and a mix of 2-, 3- and 4-byte characters
// with spaces, as text in other scripts looks, at 44 B (a short JSON
// message), 1 KiB, 16 KiB and 64 KiB.
var utf8BenchTexts = func() map[string][]byte {
	ascii := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1500)
	mixed := strings.Repeat("Größe Привет 世界 ready 😀🎉 ünïcødé ", 2000)
	cut := func(s string, n int) []byte {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return []byte(s)
	}
	m := map[string][]byte{}
	for _, n := range []struct {
		name string
		size int
	}{{"44B", 44}, {"1K", 1024}, {"16K", 16384}, {"64K", 65536}} {
		m["ascii"+n.name] = cut(ascii, n.size)
		m["mixed"+n.name] = cut(mixed, n.size)
	}
	return m
}()

var utf8BenchNames = []string{"ascii44B", "mixed44B", "ascii1K", "mixed1K", "ascii16K", "mixed16K", "ascii64K", "mixed64K"}

// BenchmarkUTF8 measures the validator as dispatched on this machine (Feed,
// ValidUTF8), the automaton alone (Feed-automaton, as a machine without AVX2
// or a purego build runs it), and unicode/utf8.Valid for comparison.
func BenchmarkUTF8(b *testing.B) {
	for _, name := range utf8BenchNames {
		p := utf8BenchTexts[name]
		if !utf8.Valid(p) {
			b.Fatal("benchmark text is not valid UTF-8")
		}
		feed := func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			var v UTF8
			for b.Loop() {
				v.Reset()
				if v.Feed(p) >= 0 || !v.Complete() {
					b.Fatal("rejected valid text")
				}
			}
		}
		b.Run(name+"/Feed", feed)
		for _, path := range []simdPath{simdNone, simdSSE} {
			if !runnable(path) || path == bestSIMD {
				continue
			}
			b.Run(name+"/Feed-"+path.String(), func(b *testing.B) {
				saved := useSIMD
				useSIMD = path
				defer func() { useSIMD = saved }()
				feed(b)
			})
		}
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

// BenchmarkUnmaskUTF8 compares one pass that unmasks and validates
// (FeedMasked) with two (Mask, then Feed), on a masked text frame as a
// server receives it. Each iteration first copies the masked frame into the
// buffer, as a read would; that copy is the same in both.
func BenchmarkUnmaskUTF8(b *testing.B) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for _, name := range []string{"ascii1K", "mixed1K", "ascii16K", "mixed16K", "ascii64K", "mixed64K"} {
		wire := bytes.Clone(utf8BenchTexts[name])
		Mask(key, 0, wire)
		p := make([]byte, len(wire))
		b.Run(name+"/FeedMasked", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			var v UTF8
			for b.Loop() {
				copy(p, wire)
				v.Reset()
				if _, i := v.FeedMasked(key, 0, p); i >= 0 || !v.Complete() {
					b.Fatal("rejected valid text")
				}
			}
		})
		b.Run(name+"/Mask+Feed", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			var v UTF8
			for b.Loop() {
				copy(p, wire)
				v.Reset()
				Mask(key, 0, p)
				if v.Feed(p) >= 0 || !v.Complete() {
					b.Fatal("rejected valid text")
				}
			}
		})
		b.Run(name+"/copy", func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				copy(p, wire)
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
