//go:build !amd64 || purego

package frame

// haveSIMD is false: this build validates with the automaton only.
var haveSIMD = false

func lookupAVX2(p []byte) int { panic("frame: no SIMD validator in this build") }

func unmaskLookupAVX2(p []byte, key uint64) int {
	panic("frame: no SIMD validator in this build")
}
