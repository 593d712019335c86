// Package bufpool lends byte slices in power-of-two size classes, so that a
// connection holds a buffer only while it has bytes to keep, and an idle
// connection holds none. It is for rally's own packages, not for users.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minShift = 9  // 512 B
	maxShift = 24 // 16 MiB
)

var pools [maxShift - minShift + 1]sync.Pool

func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// Cap returns the capacity of the buffer Get(n) returns: what lending it
// costs (for accounting memory before it is taken).
func Cap(n int) int {
	if c := class(n); c < len(pools) {
		return 1 << (c + minShift)
	}
	return n
}

// Get returns a buffer with len 0 and cap >= n. Buffers larger than 16 MiB
// are allocated and never pooled. The caller owns it until Put.
func Get(n int) *[]byte {
	c := class(n)
	if c >= len(pools) {
		b := make([]byte, 0, n)
		return &b
	}
	if v := pools[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, 1<<(c+minShift))
	return &b
}

// Put gives b back. b must not be used afterwards. A buffer whose cap is not
// a pooled class size (or nil) is dropped.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	n := cap(*b)
	if n < 1<<minShift || n&(n-1) != 0 {
		return
	}
	c := class(n)
	if c >= len(pools) {
		return
	}
	pools[c].Put(b)
}
