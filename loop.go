package rally

import (
	"errors"
	"syscall"
)

// isTemporaryAccept reports whether an accept error is worth retrying
// after a pause: the process or the system ran out of descriptors, or
// the kernel of memory, for the moment.
func isTemporaryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED)
}

// errLoopDry is a loop transport's read finding nothing more for now: the
// loop goes on with its other connections (see loop_linux.go).
var errLoopDry = errors.New("rally: nothing more to read for now")

// errLoopRead is the answer to Read, ReadAppend and Reader on a connection
// an event loop drives.
var errLoopRead = errors.New("rally: read: this connection is driven by an event loop (Server.EventLoop): its messages reach Server.Message")
