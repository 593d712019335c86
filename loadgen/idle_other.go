//go:build !linux

package loadgen

import "net"

// pollHolder exists only on Linux; elsewhere a goroutine holds each idle
// connection.
type pollHolder struct{}

func newPollHolder(*idleRun) *pollHolder                 { return nil }
func (*pollHolder) take(net.Conn, []byte) bool           { return false }
func (*pollHolder) forget(*run)                          {}
func (*pollHolder) ping(frame []byte, first, slices int) {}
func (*pollHolder) close()                               {}
