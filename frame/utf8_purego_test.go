//go:build purego

package frame

import "testing"

func TestPuregoBuildValidatesWithTheAutomatonOnly(t *testing.T) {
	if bestSIMD != simdNone || useSIMD != simdNone || runnable(simdSSE) || runnable(simdAVX2) {
		t.Fatalf("purego build: bestSIMD %v, useSIMD %v; want the automaton only", bestSIMD, useSIMD)
	}
}
