package server

import (
	"sync"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// connRoles says what the server keeps a WebSocket connection for.
type connRoles uint8

const (
	// roleOpen: an open /echo, /ws or /chat connection, which the memory
	// watch may shed (shed.go).
	roleOpen connRoles = 1 << iota
	// roleWatched: a subscriber whose send queue the slow-subscriber
	// watch looks at (slow.go).
	roleWatched
)

// connTable is the server's one set of its WebSocket connections, each
// with what it is kept for: a map entry costs about 29 bytes a connection
// (a Go map of 10,000 pointers, whatever its values), once rather than
// once per use.
type connTable struct {
	mu      sync.Mutex
	m       shrinkmap.Map[*rally.Conn, connRoles] // gives back the room of a crowd that left
	watched int                                   // connections with roleWatched
}

// addLocked keeps c for role r too. The caller holds mu.
func (t *connTable) addLocked(c *rally.Conn, r connRoles) {
	old, _ := t.m.Get(c)
	if old&r != 0 {
		return
	}
	if r&roleWatched != 0 {
		t.watched++
	}
	t.m.Set(c, old|r)
}

// removeLocked stops keeping c for role r, and forgets it once it is kept
// for nothing. The caller holds mu.
func (t *connTable) removeLocked(c *rally.Conn, r connRoles) {
	old, ok := t.m.Get(c)
	if !ok || old&r == 0 {
		return
	}
	if r&roleWatched != 0 {
		t.watched--
	}
	if rest := old &^ r; rest != 0 {
		t.m.Set(c, rest)
		return
	}
	t.m.Delete(c)
}
