package loadgen

import (
	"slices"
	"time"
)

// StallFactor is how many times the median round a chat round may last
// before it counts as stalled.
const StallFactor = 4

// RoundStats are the chat rounds of the window: a round begins when every
// client is told to send and ends when every client has received every
// message of it. A stalled round is one that lasted more than StallFactor
// times the median, or was still open at the end of the window after that
// long (a delivery lost for good, a queue that stopped draining).
type RoundStats struct {
	Completed int     `json:"completed"`
	MedianMs  float64 `json:"median_ms"`
	MaxMs     float64 `json:"max_ms"`
	Stalled   int     `json:"stalled"`
	Factor    float64 `json:"stall_factor"`
}

// roundStats summarises the durations of the rounds completed in the window
// and the age, at the window's end, of a round still open (0 if none).
func roundStats(done []time.Duration, open time.Duration) *RoundStats {
	s := &RoundStats{Completed: len(done), Factor: StallFactor}
	if len(done) == 0 {
		if open > 0 {
			s.Stalled = 1
		}
		return s
	}
	sorted := slices.Sorted(slices.Values(done))
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + median) / 2
	}
	limit := StallFactor * median
	for _, d := range done {
		if d > limit {
			s.Stalled++
		}
	}
	if open > limit {
		s.Stalled++
	}
	s.MedianMs = float64(median) / float64(time.Millisecond)
	s.MaxMs = float64(max(sorted[len(sorted)-1], open)) / float64(time.Millisecond)
	return s
}
