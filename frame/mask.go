package frame

import (
	"encoding/binary"
	"math/bits"
)

// keyWord returns the masking key as a little-endian 64-bit word whose first
// byte is key[pos&3], so that XOR with a little-endian load of 8 payload bytes
// masks them as RFC 6455 5.3 requires.
func keyWord(key [4]byte, pos int) uint64 {
	k := bits.RotateLeft32(binary.LittleEndian.Uint32(key[:]), -8*(pos&3))
	return uint64(k)<<32 | uint64(k)
}

// Mask XORs b in place with the masking key (RFC 6455 5.3), starting at
// position pos of the 4-byte key stream, and returns the position after b,
// (pos+len(b))&3, to pass to the next call for the same frame. Only pos&3 is
// used. It works 8 bytes at a time at any alignment. Masking twice with the
// same key and position restores b.
func Mask(key [4]byte, pos int, b []byte) int {
	next := (pos + len(b)) & 3
	k := keyWord(key, pos)
	// Each load-XOR-store below compiles to one instruction with no
	// bounds check; four per iteration amortise the loop.
	for len(b) >= 32 {
		w := b[:32:32]
		binary.LittleEndian.PutUint64(w[0:8], binary.LittleEndian.Uint64(w[0:8])^k)
		binary.LittleEndian.PutUint64(w[8:16], binary.LittleEndian.Uint64(w[8:16])^k)
		binary.LittleEndian.PutUint64(w[16:24], binary.LittleEndian.Uint64(w[16:24])^k)
		binary.LittleEndian.PutUint64(w[24:32], binary.LittleEndian.Uint64(w[24:32])^k)
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k)
		b = b[8:]
	}
	for i := range b {
		b[i] ^= byte(k)
		k >>= 8
	}
	return next
}

// MaskCopy writes src XOR the masking key into dst, starting at position pos
// of the key stream, and returns the next position, (pos+len(src))&3. It lets
// a client mask a payload into its own buffer in one pass, leaving src
// untouched. len(dst) must be at least len(src) (MaskCopy panics otherwise);
// dst and src may be the same slice but must not otherwise overlap.
func MaskCopy(dst, src []byte, key [4]byte, pos int) int {
	if len(dst) < len(src) {
		panic("frame: MaskCopy into a dst shorter than src")
	}
	next := (pos + len(src)) & 3
	k := keyWord(key, pos)
	for len(src) >= 32 {
		s, d := src[:32:32], dst[:32:32]
		binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(s[0:8])^k)
		binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(s[8:16])^k)
		binary.LittleEndian.PutUint64(d[16:24], binary.LittleEndian.Uint64(s[16:24])^k)
		binary.LittleEndian.PutUint64(d[24:32], binary.LittleEndian.Uint64(s[24:32])^k)
		src, dst = src[32:], dst[32:]
	}
	for len(src) >= 8 {
		binary.LittleEndian.PutUint64(dst[:8], binary.LittleEndian.Uint64(src)^k)
		src, dst = src[8:], dst[8:]
	}
	dst = dst[:len(src)]
	for i := range src {
		dst[i] = src[i] ^ byte(k)
		k >>= 8
	}
	return next
}
