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
