package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of the CPU times in /proc (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the user plus system CPU time the process pid has used
// so far, from /proc/PID/stat (pid 0 means this process). It fails where
// /proc is not available.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields are
	// counted after the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("loadgen: unexpected %s", procPath(pid, "stat"))
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("loadgen: unexpected %s", procPath(pid, "stat"))
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("loadgen: unexpected %s", procPath(pid, "stat"))
	}
	return time.Duration(u+s) * clockTick, nil
}

// ProcessMemory returns the resident set size of process pid and its peak
// (VmRSS and VmHWM of /proc/PID/status), in bytes.
func ProcessMemory(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(procPath(pid, "status"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &peak
		default:
			continue
		}
		f := bytes.Fields(value)
		if len(f) >= 1 {
			kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
			*dst = kb << 10
		}
	}
	return rss, peak, nil
}

// ProcessAnonMemory returns the part of process pid's resident set that
// is its own memory (RssAnon of /proc/PID/status: heap, stacks, the Go
// runtime's), in bytes, leaving out the pages mapped from files (RssFile:
// the executable's code and data, read in the first time a path of the
// code runs, shared with every process running the same binary, and
// dropped by the kernel when it needs the room).
func ProcessAnonMemory(pid int) (int64, error) {
	b, err := os.ReadFile(procPath(pid, "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(name) != "RssAnon" {
			continue
		}
		if f := bytes.Fields(value); len(f) >= 1 {
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("loadgen: no RssAnon in %s", procPath(pid, "status"))
}

// ResetPeakMemory makes the peak resident set size of process pid start
// again from its current size (Linux clear_refs, value 5), so that a peak
// read later belongs to the window that follows. It needs the right to
// write that file (the process's owner or root).
func ResetPeakMemory(pid int) error {
	return os.WriteFile(procPath(pid, "clear_refs"), []byte("5"), 0)
}

// MachineCPU returns the busy and total CPU time of the whole machine so
// far, summed over all cores, from the first line of /proc/stat.
func MachineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0, fmt.Errorf("loadgen: unexpected /proc/stat")
	}
	// user nice system idle iowait irq softirq steal ...; idle and iowait
	// are not busy, guest time is already inside user.
	for i, v := range f[1:] {
		if i >= 8 {
			break
		}
		n, _ := strconv.ParseUint(string(v), 10, 64)
		total += time.Duration(n) * clockTick
		if i != 3 && i != 4 {
			busy += time.Duration(n) * clockTick
		}
	}
	return busy, total, nil
}

func procPath(pid int, name string) string {
	if pid == 0 {
		return "/proc/self/" + name
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + name
}

// meter measures, over a window, the CPU time of the server, of this
// process and of the whole machine.
type meter struct {
	pid            int
	begin, end     cpuSample
	beganAt, endAt time.Time
}

type cpuSample struct {
	server, self             time.Duration
	machineBusy, machineAll  time.Duration
	serverOK, machineOK      bool
	serverRSS, serverPeakRSS int64
}

func sampleCPU(pid int) cpuSample {
	var s cpuSample
	if pid > 0 {
		c, err := ProcessCPU(pid)
		s.server, s.serverOK = c, err == nil
	}
	s.self, _ = ProcessCPU(0)
	b, a, err := MachineCPU()
	s.machineBusy, s.machineAll, s.machineOK = b, a, err == nil
	return s
}

// startMeter opens a window: it resets the server's peak memory and reads
// the CPU times.
func startMeter(pid int) *meter {
	if pid > 0 {
		ResetPeakMemory(pid)
	}
	return &meter{pid: pid, begin: sampleCPU(pid), beganAt: time.Now()}
}

// stop closes the window: it reads the CPU times and the server's memory.
func (m *meter) stop() {
	m.end = sampleCPU(m.pid)
	m.endAt = time.Now()
	if m.pid > 0 {
		m.end.serverRSS, m.end.serverPeakRSS, _ = ProcessMemory(m.pid)
	}
}

// fill writes the server and machine parts of r, whose Messages must be
// final.
func (m *meter) fill(r *Result) {
	window := m.endAt.Sub(m.beganAt)
	selfUsed := m.end.self - m.begin.self
	r.Machine.LoadgenCPUSeconds = selfUsed.Seconds()
	if r.Messages > 0 {
		r.Machine.LoadgenCPUMicrosPerMessage = float64(selfUsed.Microseconds()) / float64(r.Messages)
	}
	var serverUsed time.Duration
	if m.pid > 0 && m.begin.serverOK && m.end.serverOK {
		serverUsed = m.end.server - m.begin.server
		s := &ServerStats{PID: m.pid, CPUSeconds: serverUsed.Seconds()}
		if window > 0 {
			s.CPUPercent = 100 * serverUsed.Seconds() / window.Seconds()
		}
		if r.Messages > 0 {
			s.CPUMicrosPerMessage = float64(serverUsed.Microseconds()) / float64(r.Messages)
		}
		s.RSSBytes, s.PeakRSSBytes = m.end.serverRSS, m.end.serverPeakRSS
		r.Server = s
	}
	if m.begin.machineOK && m.end.machineOK && m.end.machineAll > m.begin.machineAll {
		other := (m.end.machineBusy - m.begin.machineBusy) - serverUsed - selfUsed
		if other < 0 {
			other = 0
		}
		r.Machine.OtherBusyPercent = 100 * float64(other) / float64(m.end.machineAll-m.begin.machineAll)
		r.Machine.Measured = true
	}
}
