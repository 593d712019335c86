package loadgen

import (
	"math"

	"github.com/rallyws/rally/internal/jsonscan"
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
	i := jsonscan.SkipSpace(p, 0)
	if i == len(p) || p[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return true
	}
	for {
		if i == len(p) || p[i] != '"' {
			return false
		}
		end := jsonscan.ValueEnd(p, i)
		if end < 0 {
			return false
		}
		key := p[i+1 : end-1]
		i = jsonscan.SkipSpace(p, end)
		if i == len(p) || p[i] != ':' {
			return false
		}
		i = jsonscan.SkipSpace(p, i+1)
		if end = jsonscan.ValueEnd(p, i); end <= i {
			return false
		}
		if !fn(key, p[i:end]) {
			return true
		}
		i = jsonscan.SkipSpace(p, end)
		if i == len(p) {
			return false
		}
		switch p[i] {
		case ',':
			i = jsonscan.SkipSpace(p, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
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
