package frame

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// allSIMDPaths are the validators of every build, in the order of speed.
var allSIMDPaths = []simdPath{simdNone, simdSSE, simdAVX2}

// simdPaths are the validators this machine and build run: the automaton
// always, and each vector validator the CPU has.
func simdPaths() []simdPath {
	var ps []simdPath
	for _, p := range allSIMDPaths {
		if runnable(p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// onEveryPath runs f once with each validator: the automaton alone and each
// vector validator (a path the machine lacks is skipped, and says so).
func onEveryPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, p := range allSIMDPaths {
		t.Run(p.String(), func(t *testing.T) {
			if !runnable(p) {
				t.Skipf("no %v validator on this machine or in this build", p)
			}
			saved := useSIMD
			useSIMD = p
			t.Cleanup(func() { useSIMD = saved })
			f(t)
		})
	}
}

// onEveryVectorPath is onEveryPath without the automaton, for tests of the
// vector validators' own verdicts (lookup, unmaskLookup).
func onEveryVectorPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, p := range allSIMDPaths[1:] {
		t.Run(p.String(), func(t *testing.T) {
			if !runnable(p) {
				t.Skipf("no %v validator on this machine or in this build", p)
			}
			saved := useSIMD
			useSIMD = p
			t.Cleanup(func() { useSIMD = saved })
			f(t)
		})
	}
}

// feedMaskedParts masks p with key, feeds it in the given parts (cut at the
// offsets cuts) with FeedMasked, and returns what feedParts returns, plus
// whether the bytes came out unmasked.
func feedMaskedParts(p []byte, key [4]byte, cuts ...int) (invalidAt int, complete, unmasked bool) {
	wire := bytes.Clone(p)
	maskRef(key, 0, wire)
	var v UTF8
	invalidAt = -1
	pos, off := 0, 0
	for _, end := range append(cuts, len(p)) {
		part := wire[off:end]
		var i int
		pos, i = v.FeedMasked(key, pos, part)
		if i >= 0 && invalidAt < 0 {
			invalidAt = off + i
		}
		off = end
	}
	return invalidAt, invalidAt < 0 && v.Complete(), bytes.Equal(wire, p)
}

// mixedText is valid UTF-8 with characters of every length at every
// alignment, and runs of ASCII long enough for whole ASCII blocks.
var mixedText = []byte(strings.Repeat("Größe Привет 世界 ready 😀🎉 ünïcødé "+
	"plain ASCII for a while, long enough to fill a block of 64 bytes. ", 4))

// badPatterns each make a text invalid at their last byte, wherever they are
// put after a character boundary.
var badPatterns = [][]byte{
	{0xff}, {0x80}, {0xc0}, {0xc1, 0x80}, {0xf5}, {0xe0, 0x80}, {0xed, 0xa0}, {0xf0, 0x80},
	{0xf4, 0x90}, {0xc3, 0x28}, {0xe2, 0x82, 0x28}, {0xf0, 0x9f, 0x98, 0x41}, {0xe2, 0x82, 0xac, 0x80},
}

// utf8Inputs are prefixes of mixedText of every length up to 200 bytes (some
// ending inside a character), and 200-byte texts with each bad pattern put at
// each of many places.
func utf8Inputs() [][]byte {
	var in [][]byte
	for n := 0; n <= 200; n++ {
		in = append(in, mixedText[:n])
	}
	for k, bad := range badPatterns {
		for at := k % 3; at < 190; at += 3 {
			// Back up to a character boundary so the pattern is the first
			// error.
			b := at
			for b > 0 && !utf8.RuneStart(mixedText[b]) {
				b--
			}
			p := append(bytes.Clone(mixedText[:b]), bad...)
			p = append(p, mixedText[b+len(bad):200]...)
			in = append(in, p)
		}
	}
	return in
}

func TestUTF8OnEveryPathAgreesWithUnicodeUTF8AtEveryLengthAndSplit(t *testing.T) {
	inputs := utf8Inputs()
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	onEveryPath(t, func(t *testing.T) {
		for _, p := range inputs {
			want, valid := oracleInvalidAt(p), utf8.Valid(p)
			if ValidUTF8(p) != valid {
				t.Fatalf("ValidUTF8(%x) = %v, utf8.Valid %v", p, !valid, valid)
			}
			for i := 0; i <= len(p); i++ {
				if at, complete := feedParts(p[:i], p[i:]); at != want || complete != valid {
					t.Fatalf("%x split at %d: fails at %d, complete %v; oracle %d, utf8.Valid %v", p, i, at, complete, want, valid)
				}
				if at, complete, unmasked := feedMaskedParts(p, key, i); at != want || complete != valid || !unmasked {
					t.Fatalf("%x masked, split at %d: fails at %d, complete %v, unmasked %v; oracle %d, utf8.Valid %v",
						p, i, at, complete, unmasked, want, valid)
				}
			}
		}
	})
}

func TestUTF8OnEveryPathGivesTheSameOffsetSplitIntoThreeFeeds(t *testing.T) {
	// Three parts cut at every pair of places in a few texts around the
	// vector validator's minimum length.
	var inputs [][]byte
	for _, n := range []int{simdMin - 1, simdMin, simdMin + 33, 2*simdMin + 3} {
		inputs = append(inputs, mixedText[:n])
		bad := bytes.Clone(mixedText[:n])
		bad[n-5] = 0xff
		inputs = append(inputs, bad)
	}
	onEveryPath(t, func(t *testing.T) {
		for _, p := range inputs {
			want, valid := oracleInvalidAt(p), utf8.Valid(p)
			for i := 0; i <= len(p); i++ {
				for j := i; j <= len(p); j += 1 + j%3 {
					if at, complete := feedParts(p[:i], p[i:j], p[j:]); at != want || complete != valid {
						t.Fatalf("%x split at %d,%d: fails at %d, complete %v; oracle %d, utf8.Valid %v", p, i, j, at, complete, want, valid)
					}
				}
			}
		}
	})
}

func TestFeedMaskedUnmasksEverythingAndStaysInvalidAfterAnError(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	onEveryPath(t, func(t *testing.T) {
		p := bytes.Clone(mixedText[:150])
		p[70] = 0xff
		want := bytes.Clone(p)
		maskRef(key, 3, p)
		var v UTF8
		next, at := v.FeedMasked(key, 3, p)
		if next != (3+150)&3 || at != 70 || !bytes.Equal(p, want) {
			t.Fatalf("FeedMasked = %d, %d, bytes unmasked %v; want %d, 70, true", next, at, bytes.Equal(p, want), (3+150)&3)
		}
		q := bytes.Clone(mixedText[:100])
		maskRef(key, next, q)
		if next2, at := v.FeedMasked(key, next, q); at != 0 || next2 != (next+100)&3 || !bytes.Equal(q, mixedText[:100]) || v.Complete() {
			t.Fatalf("after an error FeedMasked = %d, %d, complete %v; want 0 and the bytes unmasked", next2, at, v.Complete())
		}
	})
}

// TestSIMDDispatchFollowsTheCPUFeatureCheck runs this test binary again with
// vector features turned off through GODEBUG, as a user can (none, AVX2,
// AVX2 and SSE4.1), and checks that each child chose the best validator left
// and validates with it; in this process the choice follows the CPU.
func TestSIMDDispatchFollowsTheCPUFeatureCheck(t *testing.T) {
	if want := os.Getenv("FRAME_TEST_WANT_SIMD"); want != "" {
		if bestSIMD.String() != want || useSIMD != bestSIMD {
			t.Fatalf("bestSIMD %v, useSIMD %v; want %s", bestSIMD, useSIMD, want)
		}
		bad := bytes.Clone(mixedText)
		bad[len(bad)-70] = 0xff
		if !ValidUTF8(mixedText) || ValidUTF8(bad) {
			t.Fatalf("%v: ValidUTF8 wrong on a long text", useSIMD)
		}
		return
	}
	if useSIMD != bestSIMD {
		t.Fatalf("useSIMD %v, bestSIMD %v; want the CPU's answer", useSIMD, bestSIMD)
	}
	// best is the fastest path this machine runs without the paths off.
	best := func(off ...simdPath) simdPath {
		b := simdNone
		for _, p := range allSIMDPaths {
			if runnable(p) && !slices.Contains(off, p) {
				b = p
			}
		}
		return b
	}
	if bestSIMD != best() {
		t.Fatalf("bestSIMD %v; the fastest this machine runs is %v", bestSIMD, best())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		godebug string
		want    simdPath
	}{
		{"", best()},
		{"cpu.avx2=off", best(simdAVX2)},
		{"cpu.avx2=off,cpu.sse41=off", simdNone},
	} {
		cmd := exec.Command(exe, "-test.run", "^TestSIMDDispatchFollowsTheCPUFeatureCheck$", "-test.count=1")
		if emu := os.Getenv("RALLY_TEST_EMULATOR"); emu != "" {
			// Under go test -exec qemu-…: the child needs the emulator too.
			cmd = exec.Command(emu, append([]string{exe}, cmd.Args[1:]...)...)
		}
		cmd.Env = append(os.Environ(), "FRAME_TEST_WANT_SIMD="+c.want.String(), "GODEBUG="+c.godebug)
		out, err := cmd.CombinedOutput()
		if errors.Is(err, syscall.ENOEXEC) {
			t.Skip("this binary is for another architecture (run under an emulator without RALLY_TEST_EMULATOR): it cannot start itself again")
		}
		if err != nil {
			t.Fatalf("with GODEBUG=%s: %v\n%s", c.godebug, err, out)
		}
	}
}

// verdictOK reports whether got is a right answer of lookup for p: 0
// exactly when p is valid; 2 when p is a valid prefix cut inside its last
// character, or when the only error is in the last character (which starts in
// the last three bytes and is left to the automaton); 1 for any other error.
func verdictOK(p []byte, got int) bool {
	last := len(p) - 1
	for last > len(p)-3 && p[last]&0xC0 == 0x80 {
		last--
	}
	at := oracleInvalidAt(p)
	switch {
	case utf8.Valid(p):
		return got == 0
	case at < 0:
		return got == 2
	case at >= last && utf8.Valid(p[:last]) && p[last] >= 0xC0:
		return got == 2 || got == 1
	}
	return got == 1
}

// TestVectorVerdictMatchesUnicodeUTF8 checks the vector validator's own
// answer, not only the results after the automaton's second look (which
// would hide a validator that calls everything an error).
func TestVectorVerdictMatchesUnicodeUTF8(t *testing.T) {
	key := [4]byte{0x9a, 0x01, 0xee, 0x50}
	onEveryVectorPath(t, func(t *testing.T) {
		for _, p := range utf8Inputs() {
			if len(p) < simdMin {
				continue
			}
			got := lookup(p)
			if !verdictOK(p, got) {
				t.Fatalf("lookup(%x) = %d", p, got)
			}
			for pos := range 4 {
				wire := bytes.Clone(p)
				maskRef(key, pos, wire)
				whole := len(wire) &^ 31
				maskRef(key, pos, wire[whole:])
				if g := unmaskLookup(wire, keyWord(key, pos)); g != got || !bytes.Equal(wire, p) {
					t.Fatalf("unmaskLookup(%x, pos %d) = %d, unmasked %v; lookup said %d", p, pos, g, bytes.Equal(wire, p), got)
				}
			}
		}
	})
}

// TestVectorValidatorAgreesOnEveryShortSequenceAtEveryLanePosition puts every
// 2-byte sequence and every 3- and 4-byte sequence of range-boundary bytes
// into ASCII at places that straddle the 16-byte lanes, the 32-byte blocks
// and the end of the text. Under -short it takes one place inside the text
// and leaves the 4-byte sequences to FuzzUTF8.
func TestVectorValidatorAgreesOnEveryShortSequenceAtEveryLanePosition(t *testing.T) {
	onEveryVectorPath(t, checkShortSequencesAtEveryLanePosition)
}

func checkShortSequencesAtEveryLanePosition(t *testing.T) {
	edge := []byte{0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff}
	places := []int{0, 14, 15, 30, 31, 33, 46, 47, 62, 63, 78, 90}
	if testing.Short() {
		places = []int{30} // across the first block's lanes and into the second
	}
	buf := bytes.Repeat([]byte{'a'}, 96)
	check := func(seq []byte) {
		// Inside the text, followed by ASCII: valid exactly when seq is.
		want := 1
		if utf8.Valid(seq) {
			want = 0
		}
		p := buf[:95] // the last block overlaps the one before it
		for _, at := range places {
			copy(p[at:], seq)
			if got := lookup(p); got != want {
				t.Fatalf("%x at %d of %d bytes: lookup = %d, want %d", seq, at, len(p), got, want)
			}
			copy(p[at:], "aaaa"[:len(seq)])
		}
		// At the end of the text.
		p = buf
		at := len(p) - len(seq)
		copy(p[at:], seq)
		if got := lookup(p); !verdictOK(p, got) {
			t.Fatalf("%x at the end of %d bytes: lookup = %d", seq, len(p), got)
		}
		copy(p[at:], "aaaa"[:len(seq)])
	}
	for a := range 256 {
		for b := range 256 {
			check([]byte{byte(a), byte(b)})
		}
	}
	for _, a := range edge {
		for _, b := range edge {
			for _, c := range edge {
				check([]byte{a, b, c})
				if testing.Short() {
					continue // 390,625 more; FuzzUTF8 covers them too
				}
				for _, d := range edge {
					check([]byte{a, b, c, d})
				}
			}
		}
	}
}
