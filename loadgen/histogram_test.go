package loadgen

import (
	"testing"
	"time"
)

func TestHistogramQuantilesAreWithinThreePercent(t *testing.T) {
	var h histogram
	for us := 1; us <= 10000; us++ {
		h.add(int64(us) * 1000)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if d := float64(got-tc.want) / float64(tc.want); d > 0.03 || d < -0.03 {
			t.Errorf("q%.2f = %v, want %v within 3%%", tc.q, got, tc.want)
		}
	}
	if h.quantile(1) != 10*time.Millisecond {
		t.Errorf("q1 = %v, want the maximum 10ms", h.quantile(1))
	}
}

func TestHistogramBucketsCoverEveryValueInOrder(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<40; v = v*5/4 + 1 {
		b := bucketOf(v)
		if b < prev || bucketLow(b) > v || bucketLow(b+1) <= v {
			t.Fatalf("value %d in bucket %d [%d, %d)", v, b, bucketLow(b), bucketLow(b+1))
		}
		prev = b
	}
}
