package frame

import (
	"encoding/hex"
	"strings"
	"testing"
	"unicode/utf8"
)

// unhex decodes hex written with optional spaces, as the tables spell bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q in test table: %v", s, err)
	}
	return b
}

// maskRef is RFC 6455 5.3 read literally: byte i is XORed with key[i mod 4],
// the key stream starting at pos.
func maskRef(key [4]byte, pos int, b []byte) int {
	for i := range b {
		b[i] ^= key[(pos+i)&3]
	}
	return (pos + len(b)) & 3
}

// oracleInvalidAt is built on unicode/utf8, not on this package: it returns
// the smallest i such that no valid UTF-8 text starts with p[:i+1], or -1 if
// p is valid or only truncated at its end.
func oracleInvalidAt(p []byte) int {
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if r != utf8.RuneError || size > 1 {
			i += size
			continue
		}
		// p[i] starts no complete character. The bytes from i stay a
		// possible prefix while FullRune says more are needed; the
		// first one that settles it as an error is the failing byte.
		for j := i + 1; j <= len(p); j++ {
			if utf8.FullRune(p[i:j]) {
				return j - 1
			}
		}
		return -1
	}
	return -1
}

// feedParts feeds parts to a fresh UTF8 and returns the absolute offset of
// the first failing byte (or -1) and whether the whole was complete.
func feedParts(parts ...[]byte) (invalidAt int, complete bool) {
	var v UTF8
	off := 0
	for _, p := range parts {
		if i := v.Feed(p); i >= 0 {
			return off + i, false
		}
		off += len(p)
	}
	return -1, v.Complete()
}
