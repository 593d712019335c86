// Package smallmap is a map from strings that holds its first entry in
// place: most connections subscribe to one topic or channel, and a Go map
// of one entry costs a few hundred bytes.
package smallmap

import "iter"

// Map maps strings to V. The zero Map is empty and ready to use. It is
// not safe for concurrent use.
type Map[V any] struct {
	oneKey string
	oneVal V
	has    bool
	more   map[string]V // made by the first entry that finds the place taken
}

// Get returns the value of k and whether k is in the map.
func (m *Map[V]) Get(k string) (V, bool) {
	if m.has && m.oneKey == k {
		return m.oneVal, true
	}
	v, ok := m.more[k]
	return v, ok
}

// Set sets k's value.
func (m *Map[V]) Set(k string, v V) {
	if m.has && m.oneKey == k {
		m.oneVal = v
		return
	}
	if _, ok := m.more[k]; ok {
		m.more[k] = v
		return
	}
	if !m.has {
		m.oneKey, m.oneVal, m.has = k, v, true
		return
	}
	if m.more == nil {
		m.more = map[string]V{}
	}
	m.more[k] = v
}

// Delete removes k.
func (m *Map[V]) Delete(k string) {
	if m.has && m.oneKey == k {
		var zero V
		m.oneKey, m.oneVal, m.has = "", zero, false
		return
	}
	delete(m.more, k)
	if len(m.more) == 0 {
		m.more = nil
	}
}

// Len returns the number of entries.
func (m *Map[V]) Len() int {
	n := len(m.more)
	if m.has {
		n++
	}
	return n
}

// All yields every entry, in no set order. The map must not change while
// it runs; see Keys.
func (m *Map[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		if m.has && !yield(m.oneKey, m.oneVal) {
			return
		}
		for k, v := range m.more {
			if !yield(k, v) {
				return
			}
		}
	}
}

// Keys returns the keys, a copy the caller may change the map while it
// ranges over.
func (m *Map[V]) Keys() []string {
	out := make([]string, 0, m.Len())
	for k := range m.All() {
		out = append(out, k)
	}
	return out
}
