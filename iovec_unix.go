//go:build unix

package rally

import "syscall"

// iovec is one piece of a gathered write (writev).
type iovec = syscall.Iovec
