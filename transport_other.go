//go:build !linux

package rally

import (
	"net"
	"syscall"
)

// rawConnOf returns nil: outside Linux every connection takes the portable
// path (blocking reads, a flusher goroutine for writes).
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func writeFd(uintptr, *[2]iovec, []byte, []byte, bool) (int, error) { return 0, errAgain }

func readFd(uintptr, []byte, bool) (int, error) { return 0, errAgain }

func writevFd(uintptr, [][]byte, bool) (int, error) { return 0, errAgain }
