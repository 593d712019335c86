package loadgen

import (
	"testing"
	"time"
)

func TestRoundStatsCountsRoundsPastFourMediansAndARoundLeftOpen(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		done    []time.Duration
		open    time.Duration
		stalled int
		median  float64
	}{
		{"steady", []time.Duration{10 * ms, 12 * ms, 11 * ms}, 5 * ms, 0, 11},
		{"one slow round", []time.Duration{10 * ms, 10 * ms, 45 * ms, 10 * ms}, 0, 1, 10},
		{"at four medians is not stalled", []time.Duration{10 * ms, 40 * ms, 10 * ms}, 0, 0, 10},
		{"open past four medians", []time.Duration{10 * ms, 10 * ms}, 41 * ms, 1, 10},
		{"open, none done", nil, 3 * ms, 1, 0},
		{"nothing", nil, 0, 0, 0},
	} {
		s := roundStats(c.done, c.open)
		if s.Completed != len(c.done) || s.Stalled != c.stalled || s.MedianMs != c.median || s.Factor != StallFactor {
			t.Errorf("%s: %+v; want %d completed, %d stalled, median %v ms", c.name, s, len(c.done), c.stalled, c.median)
		}
	}
}
