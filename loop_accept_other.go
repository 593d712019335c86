//go:build !linux

package rally

import "net"

// handshake reports false: without event loops, Serve reads each request
// head on a goroutine.
func (g *loopGroup) handshake(*Server, net.Conn) bool { return false }
