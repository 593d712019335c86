package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

// HostileMain runs `rally bench SCENARIO URL [flags]` for a hostile
// scenario (see IsHostile) and returns the exit status: 0 for a PASS, 1
// for a FAIL or a run that could not start, 2 for a usage error.
func HostileMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rally bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rally bench SCENARIO URL [flags]\n\nHostile scenarios: what a few clients do to make a server hold memory or\nstop answering. Each samples the server's RSS before, at its peak and after,\nprobes it with a fresh echo client every 250 ms, and ends with a verdict.\n\n")
		for _, s := range hostileScenarios {
			fmt.Fprintf(stderr, "  %-11s %s\n", s.name, s.what)
		}
		fmt.Fprint(stderr, "\nFlags:\n")
		fs.PrintDefaults()
	}
	var cfg HostileConfig
	fs.IntVar(&cfg.Conns, "conns", 0, "attacking connections (default: the scenario's)")
	fs.IntVar(&cfg.Size, "size", 0, "bytes of a held head (head-hold, default 1 MiB) or message (partial, default 16 MiB - 1)")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long the attack is held")
	fs.DurationVar(&cfg.Settle, "settle", 30*time.Second, "how long after the attack the server's memory is read again")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "process id of the server on this machine, to read its memory")
	fs.StringVar(&cfg.MetricsURL, "metrics", "", "the server's Prometheus metrics URL, to read its memory (process_resident_memory_bytes)")
	fs.StringVar(&cfg.ProbeURL, "probe", "", "echo endpoint probed by a fresh client (default: /echo on the attacked host)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "adversary: the seed of the draw (the same seed, the same clients)")
	maxRSS := fs.Int64("max-rss", 600e6, "verdict: the server's peak RSS in bytes at most")
	fs.DurationVar(&cfg.MaxProbeP99, "max-p99", 100*time.Millisecond, "verdict: the probe's p99 at most")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	jsonFile := fs.String("json-file", "", "also write the result as JSON to this file")
	var positional []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 2 || !IsHostile(positional[0]) {
		fmt.Fprintf(stderr, "rally bench: want a hostile scenario and a URL\n\n")
		fs.Usage()
		return 2
	}
	cfg.Scenario, cfg.URL, cfg.MaxRSS = positional[0], positional[1], *maxRSS
	if cfg.Conns < 0 || cfg.Size < 0 || cfg.Duration <= 0 || cfg.Settle < 0 || cfg.MaxRSS <= 0 {
		fmt.Fprintln(stderr, "rally bench: --conns, --size, --duration, --settle and --max-rss must be positive")
		return 2
	}
	if !strings.HasPrefix(cfg.URL, "ws://") && !strings.HasPrefix(cfg.URL, "wss://") {
		fmt.Fprintf(stderr, "rally bench: URL %q is not ws:// or wss://\n", redactURL(cfg.URL))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := RunHostile(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rally bench: %v\n", strings.TrimPrefix(err.Error(), "loadgen: "))
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else {
		res.WriteSummary(stdout)
	}
	if *jsonFile != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "rally bench: %v\n", err)
			return 1
		}
	}
	if res.Verdict != "PASS" {
		return 1
	}
	return 0
}
