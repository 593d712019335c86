//go:build !linux

package loadgen

import "syscall"

// bindNoPort does nothing here: the local port is picked at bind time.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
