//go:build purego

package frame

import "testing"

func TestPuregoBuildValidatesWithTheAutomatonOnly(t *testing.T) {
	if haveSIMD || useSIMD {
		t.Fatalf("purego build: haveSIMD %v, useSIMD %v; want the automaton only", haveSIMD, useSIMD)
	}
}
