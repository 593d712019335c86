package server

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// fallbackMemoryLimit is the budget when the machine's memory cannot be
// read (not Linux, no /proc).
const fallbackMemoryLimit = 1 << 30

// DefaultMemoryLimit returns half of the memory this process may use: the
// smaller of the machine's (MemTotal in /proc/meminfo) and its cgroup's
// limit (memory.max, cgroup v2). Half leaves room for what the budget
// does not account: the kernel's socket buffers, the program itself, the
// garbage collector's headroom. Where neither can be read, 1 GiB.
func DefaultMemoryLimit() int64 {
	return defaultMemoryLimit(readFile("/proc/meminfo"), readFile("/proc/self/cgroup"), readFile)
}

func readFile(name string) []byte {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return b
}

// defaultMemoryLimit is DefaultMemoryLimit on the given /proc/meminfo and
// /proc/self/cgroup contents, reading the cgroup's memory.max with read.
func defaultMemoryLimit(meminfo, cgroup []byte, read func(string) []byte) int64 {
	avail := memTotal(meminfo)
	if c := cgroupMemoryMax(cgroup, read); c > 0 && (avail <= 0 || c < avail) {
		avail = c
	}
	if avail <= 0 {
		return fallbackMemoryLimit
	}
	return avail / 2
}

// memTotal returns MemTotal of /proc/meminfo in bytes, or 0.
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 || kb > 1<<42 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupMemoryMax returns the memory.max of this process's cgroup v2
// ("0::/path" in /proc/self/cgroup), or 0 if there is none or it is
// "max".
func cgroupMemoryMax(cgroup []byte, read func(string) []byte) int64 {
	for line := range strings.SplitSeq(string(cgroup), "\n") {
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		for _, name := range []string{"/sys/fs/cgroup" + strings.TrimSuffix(p, "/") + "/memory.max", "/sys/fs/cgroup/memory.max"} {
			v := strings.TrimSpace(string(read(name)))
			if v == "" {
				continue
			}
			if v == "max" {
				return 0
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0
			}
			return n
		}
	}
	return 0
}
