package loadgen

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// lowerPriority sets the niceness of every thread of this process to n
// (on Linux niceness belongs to a thread, and a thread inherits its
// maker's: threads the runtime starts later are made by these). Raising
// it needs no privilege; lowering it back would.
func lowerPriority(n int) error {
	// Twice: a thread started while the first pass ran is set by the
	// second, and the ones it starts are made by a thread already set.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && err != unix.ESRCH {
				return err
			}
		}
	}
	return nil
}
