//go:build !linux

package rally

// loopGroup is a Server's event loops; outside Linux there are none and
// every connection is served by a goroutine of its own.
type loopGroup struct{}

// adopt reports false: the connection is served by a goroutine.
func (g *loopGroup) adopt(*Server, *Conn) bool { return false }

// gatherLocked reports false: no loop turn gathers sends.
func (c *Conn) gatherLocked(uintptr) bool { return false }

// inLoopTurn reports false: there are no event loops.
func inLoopTurn(uintptr) bool { return false }

// mayWait reports true: there are no event loops.
func mayWait() bool { return true }

// loopWriteCalls is 0: no event loop runs here.
func loopWriteCalls() uint64 { return 0 }

// writeCalls is 0: no event loop runs here.
func (g *loopGroup) writeCalls() uint64 { return 0 }
