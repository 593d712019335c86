package server

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// fallbackMemoryLimit is the budget when the memory the process may use
// cannot be read (not Linux, no /proc).
const fallbackMemoryLimit = 512 << 20

// defaultMemoryShare is the part of the memory the process may use that
// the default budget takes: one quarter.
const defaultMemoryShare = 4

// DefaultMemoryLimitRule says how DefaultMemoryLimit is chosen, for help
// texts.
const DefaultMemoryLimitRule = "a quarter of this machine's memory, or of its cgroup's limit if smaller"

// DefaultMemoryLimit returns the default memory budget: a quarter of the
// memory this process may use (MemoryAvailable), or 512 MiB where that
// cannot be read.
//
// A quarter, so that the budget sheds early and the process stays well
// inside what it may use: shedding starts at 80% of the budget (a fifth
// of that memory), new handshakes are refused from 90%, and the rest is
// for what the budget does not see: the kernel's socket buffers (a peer
// that does not read makes the kernel hold up to its send buffer, a few
// hundred KiB to 4 MiB per connection), the Go runtime's own overhead
// and the garbage collector's headroom, the program, and the other
// processes of the machine or container.
func DefaultMemoryLimit() int64 {
	return defaultMemoryLimit(MemoryAvailable())
}

func defaultMemoryLimit(avail int64) int64 {
	if avail <= 0 {
		return fallbackMemoryLimit
	}
	return avail / defaultMemoryShare
}

// MemoryAvailable returns the memory this process may use: the smaller of
// the machine's (MemTotal in /proc/meminfo) and its cgroup's limit, when
// one is set (memory.max in cgroup v2, memory.limit_in_bytes in v1); 0
// where neither can be read.
func MemoryAvailable() int64 {
	return memoryAvailable(readFile("/proc/meminfo"), readFile("/proc/self/cgroup"), readFile)
}

func readFile(name string) []byte {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return b
}

// memoryAvailable is MemoryAvailable on the given /proc/meminfo and
// /proc/self/cgroup contents, reading the cgroup's files with read.
func memoryAvailable(meminfo, cgroup []byte, read func(string) []byte) int64 {
	avail := memTotal(meminfo)
	if c := cgroupMemoryLimit(cgroup, read); c > 0 && (avail <= 0 || c < avail) {
		avail = c
	}
	return avail
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

// cgroupMemoryLimit returns the memory limit of this process's cgroup: v2
// ("0::/path" in /proc/self/cgroup, its memory.max) or v1 (the line of
// the memory controller, its memory.limit_in_bytes), looked for under the
// cgroup's path and, as inside a container's own namespace, at the root
// of the hierarchy. It returns 0 if there is none, or it is "max" (v2) or
// the kernel's "unlimited" (v1: a page-rounded maximum of int64).
func cgroupMemoryLimit(cgroup []byte, read func(string) []byte) int64 {
	for line := range strings.SplitSeq(string(cgroup), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		path = strings.TrimSuffix(path, "/")
		var names []string
		switch {
		case id == "0" && controllers == "":
			names = []string{"/sys/fs/cgroup" + path + "/memory.max", "/sys/fs/cgroup/memory.max"}
		case hasController(controllers, "memory"):
			names = []string{"/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
		default:
			continue
		}
		for _, name := range names {
			v := strings.TrimSpace(string(read(name)))
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if v == "max" || err != nil || n <= 0 || n >= cgroupUnlimited {
				break // this hierarchy sets no limit: another may
			}
			return n
		}
	}
	return 0
}

// cgroupUnlimited is where a cgroup v1 limit means "none": the kernel
// shows no limit as the largest int64 rounded down to a page.
const cgroupUnlimited = 1 << 62

// hasController reports whether the comma-separated list holds name.
func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
