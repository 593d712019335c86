// Package room is the chat room shared by the Go peers of the benchmarks:
// a set of connections that a broadcast can walk without a lock.
package room

import (
	"sync"
	"sync/atomic"
)

// Room is a set of members. Join and Leave copy the set (they are rare);
// Members returns a snapshot without locking (it runs once per message).
// All methods are safe for concurrent use.
type Room[T comparable] struct {
	mu      sync.Mutex
	members atomic.Pointer[[]T]
}

// Join adds m.
func (r *Room[T]) Join(m T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next []T
	if cur := r.members.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, m)
	r.members.Store(&next)
}

// Leave removes m, if present.
func (r *Room[T]) Leave(m T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.members.Load()
	if cur == nil {
		return
	}
	next := make([]T, 0, len(*cur))
	for _, x := range *cur {
		if x != m {
			next = append(next, x)
		}
	}
	r.members.Store(&next)
}

// Members returns the members at the time of the call; the caller must
// not change the slice.
func (r *Room[T]) Members() []T {
	if cur := r.members.Load(); cur != nil {
		return *cur
	}
	return nil
}
