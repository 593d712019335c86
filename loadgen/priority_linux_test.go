package loadgen_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
	"github.com/rallyws/rally/loadgen"
)

// lowerPriorityChild, set in the environment of this test binary, makes
// it lower its priority to 7, start threads, and print the niceness of
// each of its threads.
const lowerPriorityChild = "LOADGEN_TEST_LOWER_PRIORITY"

func reportNiceness() int {
	if err := loadgen.LowerPriority(7); err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Threads started after it: each goroutine locked to a thread of its
	// own while the others are.
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for range 4 {
		started.Add(1)
		done.Go(func() {
			runtime.LockOSThread()
			started.Done()
			<-release
		})
	}
	started.Wait()
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		stat, err := os.ReadFile("/proc/self/task/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis; niceness
		// is the 19th field of the line, the 17th of these.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		fmt.Println(t.Name(), f[16])
	}
	close(release)
	done.Wait()
	return 0
}

// lowerPriority sets every thread of the process, and the threads it
// starts afterwards inherit it.
func TestLowerPrioritySetsEveryThreadOfTheProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), lowerPriorityChild+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 5 {
		t.Fatalf("%d threads reported, want at least 5:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 2 || f[1] != "7" {
			t.Errorf("thread %q, want niceness 7", l)
		}
	}
}

// A hostile run lowers its own priority once its probe runs in a process
// of its own, which keeps the priority it started with; the result says
// so.
func TestAHostileRunYieldsTheCPUToItsProbe(t *testing.T) {
	echo := startServer(t, echoReply)
	defer echo.stop()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "garbage", echo.url("/"), "--conns", "4", "--nice", "7", "--json",
		"--duration", slowness.Scale(2*time.Second).String(), "--settle", "1ms", "--max-rss", "1TB", "--max-p99", "1h")
	cmd.Env = append(os.Environ(), asRallyBench+"=1")
	out, _ := cmd.Output() // the verdict's status does not matter here
	var res loadgen.HostileResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.AttackerNice != 7 || res.ProbeFrom != "its own process" || res.Probes == 0 || res.ProbeFailures == res.Probes {
		t.Errorf("attacker at nice %d, probe from %q, %d probes, %d failed: want nice 7 and probes from its own process, answered",
			res.AttackerNice, res.ProbeFrom, res.Probes, res.ProbeFailures)
	}
}
