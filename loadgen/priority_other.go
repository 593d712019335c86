//go:build !linux

package loadgen

import "errors"

func lowerPriority(int) error {
	return errors.New("setting each thread's niceness is done on Linux only")
}
