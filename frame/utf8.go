package frame

import "encoding/binary"

// The validator is a deterministic automaton over bytes whose states are
// "how the current character may continue". Each state is a multiple of 6 and
// names a 6-bit field: dfa[c] holds, in the field of state s, the state that
// follows s on byte c. So one step is a table load that does not depend on the
// state and a shift that does: s = dfa[c] >> (s & 63).
//
// Ranges from RFC 3629 section 4 (UTF8-2, UTF8-3, UTF8-4): E0 needs A0-BF next
// (no overlongs), ED needs 80-9F (no surrogates), F0 needs 90-BF (no
// overlongs), F4 needs 80-8F (nothing above U+10FFFF); C0, C1 and F5-FF never
// occur.
const (
	sAccept = 0  // at a character boundary; zero so that UTF8{} is ready
	sReject = 6  // invalid; every byte stays here
	sTail1  = 12 // one more byte 80-BF
	sTail2  = 18 // two more bytes 80-BF
	sTail3  = 24 // three more bytes 80-BF
	sE0     = 30 // after E0: A0-BF, then one more
	sED     = 36 // after ED: 80-9F, then one more
	sF0     = 42 // after F0: 90-BF, then two more
	sF4     = 48 // after F4: 80-8F, then two more
)

var dfa = func() (t [256]uint64) {
	for c := range t {
		var next [sF4/6 + 1]uint64 // indexed by state/6; sReject unless set below
		for i := range next {
			next[i] = sReject
		}
		switch {
		case c < 0x80:
			next[sAccept/6] = sAccept
		case c >= 0xC2 && c <= 0xDF:
			next[sAccept/6] = sTail1
		case c == 0xE0:
			next[sAccept/6] = sE0
		case c == 0xED:
			next[sAccept/6] = sED
		case c >= 0xE1 && c <= 0xEF:
			next[sAccept/6] = sTail2
		case c == 0xF0:
			next[sAccept/6] = sF0
		case c == 0xF4:
			next[sAccept/6] = sF4
		case c >= 0xF1 && c <= 0xF3:
			next[sAccept/6] = sTail3
		}
		if c >= 0x80 && c <= 0xBF {
			next[sTail1/6] = sAccept
			next[sTail2/6] = sTail1
			next[sTail3/6] = sTail2
			if c >= 0xA0 {
				next[sE0/6] = sTail1
			} else {
				next[sED/6] = sTail1
			}
			if c >= 0x90 {
				next[sF0/6] = sTail2
			} else {
				next[sF4/6] = sTail2
			}
		}
		for i, s := range next {
			t[c] |= s << (6 * i)
		}
	}
	return t
}()

// dfaBlock is how many bytes the automaton runs between checks for the
// reject state and chances to take the ASCII path again.
const dfaBlock = 32

const hiBits = 0x8080808080808080

// scanDFA runs the automaton from state s over p. It returns the state after
// p and -1, or sReject and the index of the first byte that made p invalid.
func scanDFA(s uint64, p []byte) (uint64, int) {
	n := len(p)
	for len(p) > 0 {
		if s == sAccept {
			// Skip ASCII 32 bytes at a time, then 8. (">" rather than ">="
			// spares the compiler a fix-up for slicing to the very end.)
			for len(p) > 32 && (binary.LittleEndian.Uint64(p)|binary.LittleEndian.Uint64(p[8:])|
				binary.LittleEndian.Uint64(p[16:])|binary.LittleEndian.Uint64(p[24:]))&hiBits == 0 {
				p = p[32:]
			}
			for len(p) > 8 && binary.LittleEndian.Uint64(p)&hiBits == 0 {
				p = p[8:]
			}
		}
		blk := p[:min(dfaBlock, len(p))]
		s0 := s
		for len(blk) > 4 {
			s = dfa[blk[0]] >> (s & 63)
			s = dfa[blk[1]] >> (s & 63)
			s = dfa[blk[2]] >> (s & 63)
			s = dfa[blk[3]] >> (s & 63)
			blk = blk[4:]
		}
		for _, c := range blk {
			s = dfa[c] >> (s & 63)
		}
		s &= 63
		if s == sReject {
			// Run the block again, byte by byte, to find the culprit.
			s = s0
			for j, c := range p[:min(dfaBlock, len(p))] {
				s = dfa[c] >> (s & 63) & 63
				if s == sReject {
					return sReject, n - len(p) + j
				}
			}
		}
		p = p[min(dfaBlock, len(p)):]
	}
	return s, -1
}

// simdMin is the shortest input handed to the vector validator: below it the
// call into assembly (never inlined) and its setup cost more than the
// automaton spends on the bytes.
const simdMin = 64

// simdPath names a validator: the automaton alone, or a vector validator
// that checks the bulk of long inputs.
type simdPath uint8

const (
	simdNone simdPath = iota // the automaton alone
	simdSSE                  // SSSE3 and SSE4.1, 16 bytes per instruction (amd64)
	simdAVX2                 // AVX2, 32 bytes per instruction (amd64)
)

// useSIMD selects the validator: bestSIMD, the fastest this machine runs;
// tests set it to each path the machine has, the automaton included, to run
// them all on the same inputs.
var useSIMD = bestSIMD

// scan is scanDFA, with the bulk of a long p checked by the vector
// validator.
func scan(s uint64, p []byte) (uint64, int) {
	if useSIMD != simdNone && len(p) >= simdMin {
		return scanSIMD(s, p)
	}
	return scanDFA(s, p)
}

// scanSIMD is scanDFA for a p of at least simdMin bytes, with the bulk of p
// checked by the vector validator.
func scanSIMD(s uint64, p []byte) (uint64, int) {
	// Finish the character the last call left open: at most 3 bytes.
	i := 0
	for ; s != sAccept && i < len(p); i++ {
		if s = dfa[p[i]] >> (s & 63) & 63; s == sReject {
			return sReject, i
		}
	}
	r := 1
	if len(p)-i >= simdMin {
		r = lookup(p[i:])
	}
	return afterLookup(p, i, r)
}

// afterLookup turns r, the vector validator's verdict on p[i:] (which starts
// at a character boundary), into the automaton's state after p and the offset
// in p of the first invalid byte. For r == 1, an error somewhere or a body too
// short to look up, the automaton runs over the body: an error's place is
// needed, and errors are rare.
func afterLookup(p []byte, i, r int) (uint64, int) {
	body := p[i:]
	switch r {
	case 0:
		return sAccept, -1
	case 2:
		// Valid so far and ending inside a character: its lead byte is one
		// of the last three, and the automaton takes it from there.
		j := len(body) - 1
		for j > len(body)-3 && body[j]&0xC0 == 0x80 {
			j--
		}
		i += j
		body = body[j:]
	}
	s, k := scanDFA(sAccept, body)
	if k >= 0 {
		k += i
	}
	return s, k
}

// UTF8 validates UTF-8 incrementally, across fragment and read boundaries, and
// fails at the first byte that makes the text invalid: the first byte after
// which no continuation could make the bytes fed so far valid UTF-8
// (RFC 3629). Overlong forms, surrogates U+D800-DFFF, code points above
// U+10FFFF, stray continuation bytes and the bytes C0, C1 and F5-FF are
// invalid; so E0 80 fails at 80, ED A0 at A0, F4 90 at 90, C0 at C0.
//
// On amd64, inputs of 64 bytes or more are checked with vector instructions,
// 32 bytes at a time with AVX2 or 16 with SSE4 where AVX2 is missing, and
// shorter ones by a table automaton, as everywhere else (and in builds with
// the purego tag); the results are the same.
//
// The zero value is ready to use. A UTF8 holds no reference to the bytes it
// was fed. It is not safe for concurrent use.
type UTF8 struct {
	state uint64
}

// Feed checks p as the continuation of everything fed before. It returns the
// index in p of the first byte that makes the text invalid, or -1 if the text
// is still valid (possibly ending inside a character). Once invalid, the
// validator stays invalid and later calls return 0 until Reset.
func (v *UTF8) Feed(p []byte) int {
	if v.state == sReject {
		return 0
	}
	var i int
	if useSIMD != simdNone && len(p) >= simdMin {
		v.state, i = scanSIMD(v.state, p)
	} else {
		v.state, i = scanDFA(v.state, p)
	}
	return i
}

// Complete reports whether everything fed since the last Reset is valid and
// ends on a character boundary, as a whole text message must.
func (v *UTF8) Complete() bool { return v.state == sAccept }

// Reset makes v ready for a new text, as the zero value is.
func (v *UTF8) Reset() { v.state = sAccept }

// ValidUTF8 reports whether p is valid UTF-8 under the same rules as UTF8.
func ValidUTF8(p []byte) bool {
	if useSIMD != simdNone && len(p) >= simdMin {
		return lookup(p) == 0
	}
	s, _ := scanDFA(sAccept, p)
	return s == sAccept
}

// FeedMasked unmasks p in place, as Mask(key, pos, p) does, and feeds the
// unmasked bytes to v, in one pass over p where the machine allows. It
// returns the key position after p, for the next call on the same frame, and
// what Feed would return. All of p is unmasked whatever the verdict. It is
// for a server's text frames, which arrive masked.
func (v *UTF8) FeedMasked(key [4]byte, pos int, p []byte) (next, invalidAt int) {
	if v.state == sReject || useSIMD == simdNone || len(p) < simdMin {
		next = Mask(key, pos, p)
		return next, v.Feed(p)
	}
	next = (pos + len(p)) & 3
	s, i := v.state, 0
	for ; s != sAccept && i < len(p); i++ {
		p[i] ^= key[(pos+i)&3]
		if s = dfa[p[i]] >> (s & 63) & 63; s == sReject {
			Mask(key, pos+i+1, p[i+1:])
			v.state = sReject
			return next, i
		}
	}
	body := p[i:]
	pos += i
	r := 1
	if len(body) >= simdMin {
		// The vector code unmasks whole 32-byte blocks; the rest first,
		// at the same key position since 32 is a multiple of 4.
		Mask(key, pos, body[len(body)&^31:])
		r = unmaskLookup(body, keyWord(key, pos))
	} else {
		Mask(key, pos, body)
	}
	v.state, invalidAt = afterLookup(p, i, r)
	return next, invalidAt
}

func (p simdPath) String() string {
	switch p {
	case simdSSE:
		return "sse"
	case simdAVX2:
		return "avx2"
	}
	return "automaton"
}
