package rally

// OnLoopTurnRead has f called at the end of each event-loop turn with the
// bytes the turn read from its connections and how many were ready in it,
// until the test ends; TurnReadBound is the most a turn with that many
// ready may read.
func OnLoopTurnRead(t interface{ Cleanup(func()) }, f func(read, ready int)) {
	testHookTurnRead.Store(&f)
	t.Cleanup(func() { testHookTurnRead.Store(nil) })
}

// TurnReadBound is the most a turn with ready connections reads: the
// turn's bytes, and one read past each connection's share at most.
func TurnReadBound(ready int) int { return loopTurnBytes + 2*ready*loopMinShare }

// OnLoopDeliver has f called as an event loop begins a delivery to c
// (reading and running its callbacks), saying whether c was streaming
// (its last delivery left input behind) and in which turn, until the test
// ends.
func OnLoopDeliver(t interface{ Cleanup(func()) }, f func(c *Conn, streaming bool, turn uint64)) {
	testHookDeliver.Store(&f)
	t.Cleanup(func() { testHookDeliver.Store(nil) })
}
