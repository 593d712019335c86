package loadgen

import "unicode/utf8"

// textPattern mixes one-, two-, three- and four-byte UTF-8 sequences, so
// that a server validating text does real work.
const textPattern = "héllo wörld, ça va? Привет мир — こんにちは 世界 ✓ 😀 ñandú "

// Payload returns the size bytes every message of a run carries. Text
// payloads are valid UTF-8 built from whole characters of a mostly
// non-ASCII pattern, padded with ASCII to exactly size bytes; binary
// payloads are a pseudo-random byte pattern.
func Payload(size int, text bool) []byte {
	p := make([]byte, 0, size)
	if !text {
		x := uint32(2463534242)
		for len(p) < size {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			p = append(p, byte(x))
		}
		return p
	}
	for len(p) < size {
		for _, r := range textPattern {
			if len(p)+utf8.RuneLen(r) > size {
				for len(p) < size {
					p = append(p, '.')
				}
				return p
			}
			p = utf8.AppendRune(p, r)
		}
	}
	return p
}
