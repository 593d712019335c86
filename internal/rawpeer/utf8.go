package rawpeer

// ValidUTF8 reports whether b is well-formed UTF-8 as RFC 3629 section 4
// defines it: no overlong forms, no surrogates (U+D800-U+DFFF), nothing
// above U+10FFFF, no truncated sequence at the end.
func ValidUTF8(b []byte) bool {
	n, ok := ScanUTF8(b)
	return ok && n == len(b)
}

// ScanUTF8 checks b as a prefix of a longer text. It returns the number of
// bytes of b that are known good and whether b can still be the beginning of
// valid UTF-8: ok is false at the first byte that no continuation could
// make valid, and then n is that byte's index. With ok true and n < len(b),
// b ends inside a sequence that more bytes may complete. This is what
// fail-fast validation across fragments needs.
func ScanUTF8(b []byte) (n int, ok bool) {
	i := 0
	for i < len(b) {
		c := b[i]
		if c < 0x80 {
			i++
			continue
		}
		// RFC 3629 section 4: the first byte fixes the length and the range
		// of the second byte; later bytes are 80..BF.
		var size int
		lo, hi := byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			size = 2
		case c == 0xE0:
			size, lo = 3, 0xA0
		case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
			size = 3
		case c == 0xED:
			size, hi = 3, 0x9F
		case c == 0xF0:
			size, lo = 4, 0x90
		case c >= 0xF1 && c <= 0xF3:
			size = 4
		case c == 0xF4:
			size, hi = 4, 0x8F
		default:
			return i, false
		}
		for k := 1; k < size; k++ {
			if i+k >= len(b) {
				return i, true
			}
			d := b[i+k]
			if k == 1 && (d < lo || d > hi) || k > 1 && (d < 0x80 || d > 0xBF) {
				return i + k, false
			}
		}
		i += size
	}
	return i, true
}
