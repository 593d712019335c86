package loadgen

import (
	"bytes"
	"math"
)

// A few fields of a JSON object read without decoding it: the fast
// subscriber finds the type and position of each delivery this way, at a
// cost that does not grow with what was published (the members after the
// ones it wants are never looked at). The input must be valid JSON, as a
// server's frames are; invalid input gets no answer, or a wrong one, but
// never a panic.

// eachMember calls fn with the key (as sent, escapes kept) and the raw
// value of each member of the JSON object p, in order, until fn returns
// false. It reports false if p is not an object it could walk to the end
// of or to where fn stopped.
func eachMember(p []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(p, 0)
	if i == len(p) || p[i] != '{' {
		return false
	}
	i = skipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return true
	}
	for {
		if i == len(p) || p[i] != '"' {
			return false
		}
		end := skipString(p, i)
		if end < 0 {
			return false
		}
		key := p[i+1 : end-1]
		i = skipSpace(p, end)
		if i == len(p) || p[i] != ':' {
			return false
		}
		i = skipSpace(p, i+1)
		if end = skipValue(p, i); end < 0 {
			return false
		}
		if !fn(key, p[i:end]) {
			return true
		}
		i = skipSpace(p, end)
		if i == len(p) {
			return false
		}
		switch p[i] {
		case ',':
			i = skipSpace(p, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte of p from i on that is
// not JSON white space (RFC 8259 2), or len(p).
func skipSpace(p []byte, i int) int {
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string whose opening quote
// is p[i], or -1 if it does not end.
func skipString(p []byte, i int) int {
	for j := i + 1; ; j++ {
		k := bytes.IndexByte(p[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote ends the string unless it is escaped: after an odd
		// run of backslashes.
		n := 0
		for b := j - 1; b > i && p[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
}

// skipValue returns the index after the JSON value that starts at p[i],
// or -1 if it does not end.
func skipValue(p []byte, i int) int {
	if i == len(p) {
		return -1
	}
	switch p[i] {
	case '"':
		return skipString(p, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(p); j++ {
			switch p[j] {
			case '"':
				end := skipString(p, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: up to what follows a value.
	j := i
	for j < len(p) && p[j] != ',' && p[j] != '}' && p[j] != ']' && skipSpace(p, j) == j {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// jsonUint returns the whole number a raw JSON value spells in decimal
// digits, and false for anything else (a sign, a fraction, an exponent,
// a value past 2^64-1).
func jsonUint(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
