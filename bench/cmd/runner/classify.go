package main

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// cpuClasses sorts a profile's flat samples into the kinds of work the
// large-message table of docs/BENCHMARKS.md names, by the function that
// was running (first match wins; the rest is "rally and other").
var cpuClasses = []struct {
	name string
	re   *regexp.Regexp
}{
	{"syscalls", regexp.MustCompile(`^(internal/runtime/syscall|syscall\.|runtime\.(entersyscall|exitsyscall|reentersyscall))`)},
	{"copy", regexp.MustCompile(`^runtime\.memmove$`)},
	{"mask", regexp.MustCompile(`/frame\.(Mask|maskRef|keyWord)`)},
	{"validate", regexp.MustCompile(`/frame\.(unmaskLookup|lookup|scanDFA|scanSIMD|afterLookup|\(\*UTF8\))`)},
	{"inflate", regexp.MustCompile(`(/deflate\.|compress/flate|klauspost)`)},
	{"runtime/GC", regexp.MustCompile(`^runtime\.(gc|scanobject|greyobject|findObject|markBits|mallocgc|memclr|heapBits|sweep|mspan|mheap|\(\*mheap\)|\(\*mspan\)|\(\*gcWork\)|\(\*pageAlloc\)|wbBuf|bulkBarrier|typePointers|nextFreeFast|\(\*mcache\)|\(\*mcentral\))`)},
	{"scheduler", regexp.MustCompile(`^(runtime\.|internal/runtime/)`)},
}

// classify sums the flat column of `go tool pprof -top` output by class
// and returns a line for the top file.
func classify(top []byte) string {
	sums := map[string]float64{}
	var total float64
	line := regexp.MustCompile(`^\s*([0-9.]+)(ms|s)\s+[0-9.]+%\s+[0-9.]+%\s+[0-9.]+m?s\s+[0-9.]+%\s+(.+)$`)
	sc := bufio.NewScanner(bytes.NewReader(top))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if m[2] == "ms" {
			v /= 1000
		}
		total += v
		name := strings.TrimSpace(m[3])
		class := "rally and other"
		for _, c := range cpuClasses {
			if c.re.MatchString(name) {
				class = c.name
				break
			}
		}
		sums[class] += v
	}
	if total == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Where the CPU goes (flat samples by function):")
	for _, name := range []string{"syscalls", "copy", "mask", "validate", "inflate", "runtime/GC", "scheduler", "rally and other"} {
		fmt.Fprintf(&b, " %s %.0f%%,", name, 100*sums[name]/total)
	}
	return strings.TrimSuffix(b.String(), ",") + "\n"
}
