//go:build amd64 && !purego

package frame

import "golang.org/x/sys/cpu"

// bestSIMD is the fastest validator this machine runs: AVX2 where the CPU
// has it and the operating system saves the YMM registers, else SSE where
// the CPU has SSSE3 and SSE4.1 (every amd64 CPU since about 2008), else the
// automaton. GODEBUG=cpu.avx2=off, or cpu.sse41=off, steps down.
var bestSIMD = func() simdPath {
	switch {
	case cpu.X86.HasAVX2:
		return simdAVX2
	case cpu.X86.HasSSSE3 && cpu.X86.HasSSE41:
		return simdSSE
	}
	return simdNone
}()

// lookup is lookupAVX2 or lookupSSE, as useSIMD says.
func lookup(p []byte) int {
	if useSIMD == simdAVX2 {
		return lookupAVX2(p)
	}
	return lookupSSE(p)
}

// unmaskLookup is unmaskLookupAVX2 or unmaskLookupSSE, as useSIMD says.
func unmaskLookup(p []byte, key uint64) int {
	if useSIMD == simdAVX2 {
		return unmaskLookupAVX2(p, key)
	}
	return unmaskLookupSSE(p, key)
}

// lookupAVX2 validates p, which starts at a character boundary and is at
// least simdMin bytes long. It returns 0 if p is valid UTF-8, 2 if p is valid
// but ends inside a character, and 1 if p contains an error (somewhere: the
// caller finds where).
//
//go:noescape
func lookupAVX2(p []byte) int

// unmaskLookupAVX2 is lookupAVX2 over p after XORing, in place, every whole
// 32-byte block of p with key (8 bytes of masking key, repeated from p[0]).
// The caller has unmasked the last len(p)%32 bytes.
//
//go:noescape
func unmaskLookupAVX2(p []byte, key uint64) int

// lookupSSE is lookupAVX2 with 16-byte registers.
//
//go:noescape
func lookupSSE(p []byte) int

// unmaskLookupSSE is unmaskLookupAVX2 with 16-byte registers (whole 32-byte
// blocks are unmasked, as there).
//
//go:noescape
func unmaskLookupSSE(p []byte, key uint64) int

// runnable reports whether this machine runs path p, for tests that force
// every path.
func runnable(p simdPath) bool {
	switch p {
	case simdAVX2:
		return cpu.X86.HasAVX2
	case simdSSE:
		return cpu.X86.HasSSSE3 && cpu.X86.HasSSE41
	}
	return true
}
