//go:build !amd64 || purego

package frame

// bestSIMD is simdNone: this build validates with the automaton only.
var bestSIMD = simdNone

func lookup(p []byte) int { panic("frame: no SIMD validator in this build") }

func unmaskLookup(p []byte, key uint64) int {
	panic("frame: no SIMD validator in this build")
}

// runnable reports whether this build runs path p: the automaton only.
func runnable(p simdPath) bool { return p == simdNone }
