package frame

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// utf8Table is RFC 3629 as cases: bytes in hex and the index of the first
// byte after which no valid UTF-8 text could start with the bytes so far
// (-1: valid so far). complete says whether the bytes end on a boundary.
var utf8Table = []struct {
	name      string
	hex       string
	invalidAt int
	complete  bool
}{
	{"empty", "", -1, true},
	{"ascii", "48656c6c6f", -1, true},
	{"U+007F last 1-byte", "7f", -1, true},
	{"U+0080 first 2-byte", "c280", -1, true},
	{"U+07FF last 2-byte", "dfbf", -1, true},
	{"U+0800 first 3-byte", "e0a080", -1, true},
	{"U+D7FF below the surrogates", "ed9fbf", -1, true},
	{"U+E000 above the surrogates", "ee8080", -1, true},
	{"U+FFFD replacement character", "efbfbd", -1, true},
	{"U+FFFF last 3-byte", "efbfbf", -1, true},
	{"U+10000 first 4-byte", "f0908080", -1, true},
	{"U+10FFFF last code point", "f48fbfbf", -1, true},
	{"mixed widths", "41 c3a9 e282ac f09f9880 5a", -1, true},

	{"C0 never occurs", "c0", 0, false},
	{"overlong 2-byte slash", "c0af", 0, false},
	{"C1 never occurs", "c1bf", 0, false},
	{"overlong 3-byte", "e080af", 1, false},
	{"overlong 3-byte U+07FF", "e09fbf", 1, false},
	{"overlong 4-byte", "f0808080", 1, false},
	{"overlong 4-byte U+FFFF", "f08fbfbf", 1, false},
	{"surrogate U+D800", "eda080", 1, false},
	{"surrogate U+DFFF", "edbfbf", 1, false},
	{"U+110000", "f4908080", 1, false},
	{"F5 never occurs", "f5808080", 0, false},
	{"F8 never occurs", "f888808080", 0, false},
	{"FE never occurs", "fe", 0, false},
	{"FF never occurs", "ff", 0, false},
	{"lone continuation", "80", 0, false},
	{"continuation after ascii", "41bf", 1, false},
	{"too many continuations", "c3a9a9", 2, false},
	{"invalid after text", "6162 eda080", 3, false},

	{"truncated 2-byte", "c3", -1, false},
	{"truncated 3-byte", "e282", -1, false},
	{"truncated 4-byte", "f09080", -1, false},
	{"truncated 3-byte then ascii", "e28241", 2, false},
	{"truncated 4-byte then ascii", "f0908041", 3, false},
	{"truncated 2-byte then lead", "c3c3a9", 1, false},
	{"truncated 3-byte then 4-byte lead", "e2f09f9880", 1, false},
}

// longSamples push the bad byte past the ASCII word paths and the
// automaton's blocks.
var longSamples = []struct {
	name      string
	s         string
	invalidAt int
	complete  bool
}{
	{"40 ascii then FF", strings.Repeat("a", 40) + "\xff", 40, false},
	{"64 ascii then truncated then ascii", strings.Repeat("a", 64) + "\xe2\x82" + strings.Repeat("b", 33), 66, false},
	{"long mixed text", strings.Repeat("añ€😀 ", 40), -1, true},
	{"long mixed text then surrogate", strings.Repeat("añ€😀 ", 40) + "\xed\xa0\x80", 40*11 + 1, false},
	{"long 3-byte text then overlong", strings.Repeat("€", 33) + "\xe0\x80\x80", 33*3 + 1, false},
	{"ascii blocks around a 4-byte char", strings.Repeat("x", 31) + "😀" + strings.Repeat("y", 70), -1, true},
	{"ascii, mixed, ascii, stray continuation", strings.Repeat("x", 17) + strings.Repeat("é", 20) + strings.Repeat("y", 50) + "\x80", 17 + 40 + 50, false},
}

type utf8Case struct {
	name      string
	p         []byte
	invalidAt int
	complete  bool
}

func utf8Cases(t *testing.T) []utf8Case {
	var cs []utf8Case
	for _, tt := range utf8Table {
		cs = append(cs, utf8Case{tt.name, unhex(t, tt.hex), tt.invalidAt, tt.complete})
	}
	for _, tt := range longSamples {
		cs = append(cs, utf8Case{tt.name, []byte(tt.s), tt.invalidAt, tt.complete})
	}
	return cs
}

func TestUTF8FailsAtTheFirstByteNoValidTextCouldContain(t *testing.T) {
	for _, c := range utf8Cases(t) {
		got, complete := feedParts(c.p)
		if got != c.invalidAt || complete != c.complete {
			t.Errorf("%s: Feed(%x) fails at %d, complete %v; want %d, %v", c.name, c.p, got, complete, c.invalidAt, c.complete)
		}
		// The table agrees with an oracle built on unicode/utf8.
		if want := oracleInvalidAt(c.p); want != c.invalidAt {
			t.Errorf("%s: the table says %d, the unicode/utf8 oracle %d", c.name, c.invalidAt, want)
		}
		if got, want := ValidUTF8(c.p), c.complete; got != want {
			t.Errorf("%s: ValidUTF8 = %v, want %v", c.name, got, want)
		}
		if got, want := ValidUTF8(c.p), utf8.Valid(c.p); got != want {
			t.Errorf("%s: ValidUTF8 = %v, utf8.Valid = %v", c.name, got, want)
		}
	}
}

func TestUTF8GivesTheSameVerdictAndOffsetSplitIntoTwoOrThreeFeeds(t *testing.T) {
	for _, c := range utf8Cases(t) {
		p := c.p
		for i := 0; i <= len(p); i++ {
			if at, complete := feedParts(p[:i], p[i:]); at != c.invalidAt || complete != c.complete {
				t.Fatalf("%s split at %d: fails at %d, complete %v; want %d, %v", c.name, i, at, complete, c.invalidAt, c.complete)
			}
			for j := i; j <= len(p); j++ {
				if at, complete := feedParts(p[:i], p[i:j], p[j:]); at != c.invalidAt || complete != c.complete {
					t.Fatalf("%s split at %d,%d: fails at %d, complete %v; want %d, %v", c.name, i, j, at, complete, c.invalidAt, c.complete)
				}
			}
		}
	}
}

func TestUTF8StaysInvalidUntilReset(t *testing.T) {
	var v UTF8
	if i := v.Feed([]byte("ok\xff")); i != 2 {
		t.Fatalf("Feed = %d, want 2", i)
	}
	for _, p := range []string{"more", "", "é"} {
		if i := v.Feed([]byte(p)); i != 0 || v.Complete() {
			t.Fatalf("after an error Feed(%q) = %d, Complete = %v; want 0, false", p, i, v.Complete())
		}
	}
	v.Reset()
	if i := v.Feed([]byte("é")); i != -1 || !v.Complete() {
		t.Fatalf("after Reset Feed = %d, Complete = %v; want -1, true", i, v.Complete())
	}
}

func TestUTF8IsIncompleteInsideACharacterAndCompleteAfterIt(t *testing.T) {
	var v UTF8
	euro := []byte("€")
	for i, c := range euro {
		if v.Complete() != (i == 0) {
			t.Fatalf("Complete = %v before byte %d of €", v.Complete(), i)
		}
		if v.Feed([]byte{c}) != -1 {
			t.Fatalf("byte %d of € rejected", i)
		}
	}
	if !v.Complete() {
		t.Fatal("Complete = false after all of €")
	}
}

// TestUTF8AgreesWithUnicodeUTF8OnEveryShortSequence checks every sequence of
// 1 and 2 bytes, every 2 bytes followed by a range-boundary byte, and every
// 4-byte sequence of range-boundary bytes.
func TestUTF8AgreesWithUnicodeUTF8OnEveryShortSequence(t *testing.T) {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	edge := []byte{0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff}
	checkOne := func(p []byte) {
		got, complete := feedParts(p)
		if want := oracleInvalidAt(p); got != want || complete != utf8.Valid(p) || ValidUTF8(p) != utf8.Valid(p) {
			t.Fatalf("%x: fails at %d, complete %v; oracle %d, utf8.Valid %v", p, got, complete, want, utf8.Valid(p))
		}
	}
	for _, a := range all {
		checkOne([]byte{a})
		for _, b := range all {
			checkOne([]byte{a, b})
			for _, c := range edge {
				checkOne([]byte{a, b, c})
			}
		}
	}
	for _, a := range edge {
		for _, b := range edge {
			for _, c := range edge {
				for _, d := range edge {
					checkOne([]byte{a, b, c, d})
				}
			}
		}
	}
}
