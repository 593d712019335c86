package loadgen_test

import (
	"slices"
	"testing"

	"github.com/rallyws/rally/loadgen"
)

func TestAdversaryDrawsTheSameClientsFromTheSameSeed(t *testing.T) {
	a, b := loadgen.DrawAdversary(7, 200), loadgen.DrawAdversary(7, 200)
	if !slices.Equal(a, b) {
		t.Fatal("seed 7 drew two different sets of clients")
	}
	if slices.Equal(a, loadgen.DrawAdversary(8, 200)) {
		t.Error("seeds 7 and 8 drew the same clients")
	}
	seen := map[string]bool{}
	for _, behaviour := range a {
		seen[behaviour] = true
	}
	if len(seen) != 11 {
		t.Errorf("200 clients of seed 7 picked %d behaviours, want all 11: %v", len(seen), seen)
	}
}
