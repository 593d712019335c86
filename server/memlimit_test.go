package server

import "testing"

// The default memory budget is a quarter of what the process may use: the
// machine's memory, or its cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes) when one is set and smaller.
func TestDefaultMemoryLimitIsAQuarterOfTheSmallerOfMachineAndCgroup(t *testing.T) {
	meminfo := []byte("MemTotal:       25165824 kB\nMemFree:         1000 kB\n")
	files := map[string]string{}
	read := func(name string) []byte { return []byte(files[name]) }
	for _, tc := range []struct {
		name, cgroup, file, value string
		want                      int64
	}{
		{"v2 none", "0::/user.slice/app\n", "/sys/fs/cgroup/user.slice/app/memory.max", "", 6 << 30},
		{"v2 max", "0::/user.slice/app\n", "/sys/fs/cgroup/user.slice/app/memory.max", "max\n", 6 << 30},
		{"v2 1GiB", "0::/user.slice/app\n", "/sys/fs/cgroup/user.slice/app/memory.max", "1073741824\n", 256 << 20},
		{"v2 above the machine", "0::/user.slice/app\n", "/sys/fs/cgroup/user.slice/app/memory.max", "107374182400\n", 6 << 30},
		{"v2 in a container's namespace", "0::/\n", "/sys/fs/cgroup/memory.max", "2147483648\n", 512 << 20},
		{"v1 2GiB", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n", "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n", 512 << 20},
		{"v1 in a container's namespace", "4:memory:/docker/abc\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n", 1 << 30},
		{"v1 unlimited", "4:memory:/process_api/aff5\n0::/\n", "/sys/fs/cgroup/memory/process_api/aff5/memory.limit_in_bytes", "9223372036854771712\n", 6 << 30},
	} {
		clear(files)
		files[tc.file] = tc.value
		if got := defaultMemoryLimit(memoryAvailable(meminfo, []byte(tc.cgroup), read)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	clear(files)
	if got := defaultMemoryLimit(memoryAvailable(nil, nil, read)); got != fallbackMemoryLimit {
		t.Errorf("nothing readable: %d, want %d", got, fallbackMemoryLimit)
	}
}
