//go:build linux

package rally

// loopGroup is a Server's event loops.
type loopGroup struct{}

// adopt hands c to one of the loops and reports whether it did; false
// leaves c to a goroutine of its own.
func (g *loopGroup) adopt(*Server, *Conn) bool { return false }
