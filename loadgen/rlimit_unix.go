//go:build unix

package loadgen

import "syscall"

// openFileLimit is the most files this process may open (the hard
// RLIMIT_NOFILE, which Go raises the soft limit to), or 0 if unknown.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Max > 1<<30 {
		return 0
	}
	return int(l.Max)
}
