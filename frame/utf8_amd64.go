//go:build amd64 && !purego

package frame

import "golang.org/x/sys/cpu"

// haveSIMD reports whether this machine runs the AVX2 validator (the CPU
// has AVX2 and the operating system saves the YMM registers).
var haveSIMD = cpu.X86.HasAVX2

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
