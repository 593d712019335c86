package frame

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// maskLengths covers the tail loop, the 8-byte loop and the 32-byte loop and
// every way they combine.
var maskLengths = func() []int {
	var l []int
	for n := 0; n <= 80; n++ {
		l = append(l, n)
	}
	return append(l, 127, 128, 255, 256, 1000, 4099, 65536+5)
}()

func TestMaskMatchesTheByteLoopAtEveryKeyPositionLengthAndOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	for _, n := range maskLengths {
		for off := 0; off < 8; off++ {
			for pos := 0; pos < 4; pos++ {
				buf := make([]byte, off+n+8)
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				want := bytes.Clone(buf)
				wantNext := maskRef(key, pos, want[off:off+n])
				next := Mask(key, pos, buf[off:off+n])
				if next != wantNext {
					t.Fatalf("len %d off %d pos %d: Mask returned %d, want %d", n, off, pos, next, wantNext)
				}
				if !bytes.Equal(buf, want) {
					t.Fatalf("len %d off %d pos %d: Mask wrote %x, want %x", n, off, pos, buf, want)
				}
			}
		}
	}
}

func TestMaskUsesOnlyTheLowTwoBitsOfPos(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	a, b := make([]byte, 13), make([]byte, 13)
	na, nb := Mask(key, 2, a), Mask(key, 6, b)
	if na != nb || !bytes.Equal(a, b) {
		t.Fatalf("Mask at pos 6 = %x, %d; at pos 2 = %x, %d", b, nb, a, na)
	}
}

func TestMaskInPiecesEqualsMaskInOneCall(t *testing.T) {
	key := [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
	src := make([]byte, 300)
	for i := range src {
		src[i] = byte(i * 7)
	}
	whole := bytes.Clone(src)
	Mask(key, 0, whole)
	for cut1 := 0; cut1 <= len(src); cut1 += 7 {
		for cut2 := cut1; cut2 <= len(src); cut2 += 11 {
			got := bytes.Clone(src)
			pos := Mask(key, 0, got[:cut1])
			pos = Mask(key, pos, got[cut1:cut2])
			Mask(key, pos, got[cut2:])
			if !bytes.Equal(got, whole) {
				t.Fatalf("cuts %d,%d: pieces gave %x, want %x", cut1, cut2, got, whole)
			}
		}
	}
}

func TestMaskCopyMatchesTheByteLoopAndLeavesTheSourceAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := [4]byte{0x00, 0xff, 0x5a, 0x81}
	for _, n := range maskLengths {
		for off := 0; off < 8; off++ {
			for pos := 0; pos < 4; pos++ {
				src := make([]byte, n+off)
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				srcCopy := bytes.Clone(src)
				want := bytes.Clone(src[off:])
				wantNext := maskRef(key, pos, want)

				dst := bytes.Repeat([]byte{0xEE}, n+2*off+3)
				next := MaskCopy(dst[2*off:], src[off:], key, pos)
				if next != wantNext || !bytes.Equal(dst[2*off:2*off+n], want) {
					t.Fatalf("len %d off %d pos %d: MaskCopy = %x, %d; want %x, %d", n, off, pos, dst[2*off:2*off+n], next, want, wantNext)
				}
				if !bytes.Equal(src, srcCopy) {
					t.Fatalf("len %d off %d pos %d: MaskCopy changed src", n, off, pos)
				}
				for i, c := range dst {
					if (i < 2*off || i >= 2*off+n) && c != 0xEE {
						t.Fatalf("len %d off %d pos %d: MaskCopy wrote outside dst[:len(src)] at %d", n, off, pos, i)
					}
				}

				// Same slice as source and destination.
				inPlace := bytes.Clone(src[off:])
				if next := MaskCopy(inPlace, inPlace, key, pos); next != wantNext || !bytes.Equal(inPlace, want) {
					t.Fatalf("len %d off %d pos %d: in-place MaskCopy = %x, want %x", n, off, pos, inPlace, want)
				}
			}
		}
	}
}

func TestMaskCopyPanicsWhenDstIsShorterThanSrc(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MaskCopy into a shorter dst did not panic")
		}
	}()
	MaskCopy(make([]byte, 9, 64), make([]byte, 10), [4]byte{1, 2, 3, 4}, 0)
}
