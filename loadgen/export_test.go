package loadgen

import (
	"context"
	"os/exec"
)

// SetMainContext makes Main run under ctx until restore is called.
func SetMainContext(ctx context.Context) (restore func()) {
	mainContext = func() context.Context { return ctx }
	return func() { mainContext = context.Background }
}

// SetWorkerCommand makes --procs start its workers with command (args are
// those after "bench") until restore is called.
func SetWorkerCommand(command func(args []string) (*exec.Cmd, error)) (restore func()) {
	old := workerCommand
	workerCommand = command
	return func() { workerCommand = old }
}

// ParseSourceAddrs is parseSourceAddrs.
var ParseSourceAddrs = parseSourceAddrs

// DrawAdversary returns the behaviour of each client seed picks.
func DrawAdversary(seed uint64, conns int) []string {
	var out []string
	for _, c := range drawAdversary(seed, conns, 0) {
		out = append(out, c.behaviour)
	}
	return out
}

// FastRateVerdict returns the verdict's reasons for a run whose fast
// subscriber had these rates (0: not measured), every other bound met.
func FastRateVerdict(solo, peers, attack float64) []string {
	h := &hostileRun{cfg: HostileConfig{MaxRSS: 1 << 40, MaxProbeP99: 1 << 62}, res: &HostileResult{
		FastSoloRate: solo, FastPeersRate: peers, FastAttackRate: attack,
	}}
	h.verdict()
	return h.res.Reasons
}

// MemoryAfterVerdict returns the verdict's reasons for a run whose server
// had these RSS before, at its peak and after, every other bound met.
func MemoryAfterVerdict(before, peak, after int64) []string {
	h := &hostileRun{cfg: HostileConfig{MaxRSS: 1 << 40, MaxProbeP99: 1 << 62}, res: &HostileResult{
		RSSSource: "pid 1", RSSBefore: before, RSSPeak: peak, RSSAfter: after, Settle: "30s",
	}}
	h.verdict()
	return h.res.Reasons
}

// LowerPriority is lowerPriority.
var LowerPriority = lowerPriority
