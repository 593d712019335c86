package loadgen

import (
	"math/bits"
	"time"
)

// The latency histogram keeps values in nanoseconds with 32 sub-buckets
// per power of two (about 3% resolution) from 64 ns to about 35 minutes.
const (
	subBits    = 5
	subCount   = 1 << subBits
	linearTop  = 2 * subCount
	histBucket = linearTop + 36*subCount
)

type histogram struct {
	counts [histBucket]uint64
	total  uint64
	max    int64
}

func bucketOf(v int64) int {
	if v < linearTop {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - (subBits + 1)
	i := linearTop + (e-1)*subCount + int(uint64(v)>>e) - subCount
	if i >= histBucket {
		return histBucket - 1
	}
	return i
}

// bucketLow is the smallest value of bucket i, and so the upper bound
// (exclusive) of bucket i-1.
func bucketLow(i int) int64 {
	if i < linearTop {
		return int64(i)
	}
	e := (i-linearTop)/subCount + 1
	m := int64((i-linearTop)%subCount + subCount)
	return m << e
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) int64 {
	return (bucketLow(i) + bucketLow(i+1)) / 2
}

func (h *histogram) add(v int64) {
	h.counts[bucketOf(v)]++
	h.total++
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	if o.max > h.max {
		h.max = o.max
	}
}

// quantile returns the value below which a fraction q of the samples lie.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := bucketValue(i)
			if v > h.max {
				v = h.max
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// Latency summarises a latency distribution in microseconds.
type Latency struct {
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
	// Buckets is the distribution: the upper bound of each non-empty
	// histogram bucket (µs) and how many samples fell in it.
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Bucket is one bar of a latency distribution.
type Bucket struct {
	UpToMicros float64 `json:"up_to_us"`
	Count      uint64  `json:"count"`
}

func (h *histogram) summary() Latency {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	l := Latency{
		P50: us(h.quantile(0.50)), P90: us(h.quantile(0.90)), P99: us(h.quantile(0.99)),
		P999: us(h.quantile(0.999)), Max: us(time.Duration(h.max)),
	}
	for i, c := range h.counts {
		if c > 0 {
			l.Buckets = append(l.Buckets, Bucket{UpToMicros: float64(bucketLow(i+1)) / 1e3, Count: c})
		}
	}
	return l
}
