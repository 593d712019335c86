// Package shrinkmap is a map that gives memory back as it empties.
//
// A Go map keeps the room of its largest size after its entries are
// deleted: the set of a server's connections, after a crowd of 100,000
// has left, goes on holding a few MiB for none. A Map is rebuilt at its
// size once it holds a quarter of the most it held since it was last
// built (when that was at least Min entries), so that what it keeps
// follows what it holds. Each rebuild copies what is left, at most a
// quarter of the entries deleted since the last one: deleting stays O(1)
// amortised.
package shrinkmap

// Min is the peak below which a Map is never rebuilt: a small map's room
// is not worth a copy.
const Min = 1024

// Map maps K to V. The zero Map is empty and ready to use. It is not safe
// for concurrent use.
type Map[K comparable, V any] struct {
	m    map[K]V
	peak int // the most entries m has held since it was made
}

// Get returns k's value and whether k is in the map.
func (m *Map[K, V]) Get(k K) (V, bool) {
	v, ok := m.m[k]
	return v, ok
}

// Set sets k's value.
func (m *Map[K, V]) Set(k K, v V) {
	if m.m == nil {
		m.m = make(map[K]V)
	}
	m.m[k] = v
	m.peak = max(m.peak, len(m.m))
}

// Delete removes k, rebuilding the map if it now holds a quarter of its
// peak or less.
func (m *Map[K, V]) Delete(k K) {
	delete(m.m, k)
	if n := len(m.m); m.peak >= Min && n <= m.peak/4 {
		m.rebuild(n)
	}
}

func (m *Map[K, V]) rebuild(n int) {
	if n == 0 {
		m.m, m.peak = nil, 0
		return
	}
	small := make(map[K]V, n)
	for k, v := range m.m {
		small[k] = v
	}
	m.m, m.peak = small, n
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int { return len(m.m) }

// All returns the map itself, to range over and to set the values of
// keys it holds; keys are added and deleted with Set and Delete, not
// through it. Deleting while ranging over it is safe: no entry is
// yielded twice.
func (m *Map[K, V]) All() map[K]V { return m.m }

// Clear removes every entry and gives back the room.
func (m *Map[K, V]) Clear() { m.m, m.peak = nil, 0 }
