package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/rallyws/rally/internal/cli"
)

const hostileUsage = `Usage: rally bench SCENARIO URL [flags]   (a hostile SCENARIO)

Hostile scenarios: what a few clients do to make a server hold memory or
stop answering. Each samples the server's RSS before, at its peak and after,
probes it with a fresh echo client every 250 ms, and ends with a verdict
(exit status 0 for PASS, 1 for FAIL). URL is ws://, wss://, or http:// and
https:// for the same.

%s
Flags:
`

// hostileList lists the hostile scenarios, one a line, for the helps.
func hostileList() string {
	var b strings.Builder
	for _, s := range hostileScenarios {
		fmt.Fprintf(&b, "  %-11s %s\n", s.name, s.what)
	}
	return b.String()
}

// wsURL is raw with http:// and https:// read as ws:// and wss://, the
// one URL rule of every rally command; any other scheme is a usage error.
func wsURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", cli.Usagef("%q is not a URL such as ws://host:port/path", redactURL(raw))
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", cli.Usagef("URL scheme %q is not ws, wss, http or https", u.Scheme)
	}
	return u.String(), nil
}

// HostileMain runs `rally bench SCENARIO URL [flags]` for a hostile
// scenario (see IsHostile) and returns the exit status: 0 for a PASS, 1
// for a FAIL or a run that could not start, 2 for a usage error.
func HostileMain(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rally bench")
	var cfg HostileConfig
	fs.IntVar(&cfg.Conns, "conns", 0, "attacking connections (default: the scenario's)")
	cli.BytesVar(fs, &cfg.Size, "size", 0, "bytes of a held head (head-hold, default 1MiB) or message (partial, default 16MiB - 1),\nor what a bomb inflates to (bomb, default 2GiB, a multiple of 1MiB); h2-slow-read: streams\nper connection (default 1000); many-subs: topics per connection (default 100);\nreconnect-old: messages each client recovers (default 999)")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long the attack is held")
	fs.DurationVar(&cfg.Settle, "settle", 30*time.Second, "how long after the attack the server's memory is read again")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "process id of the server on this machine, to read its memory")
	fs.StringVar(&cfg.MetricsURL, "metrics", "", "the server's Prometheus metrics `URL`, to read its memory (process_resident_memory_bytes)")
	fs.StringVar(&cfg.ProbeURL, "probe", "", "echo endpoint `URL` probed by a fresh client (default: /echo on the attacked host)")
	fs.BoolVar(&cfg.ProbeProcess, "probe-process", true, "probe from a process of its own, and run adversary's and h2-slow-read's fast publisher and\nsubscriber in another, so that the attack's goroutines do not delay them\n(--probe-process=false: from the attacking process)")
	fs.BoolVar(&cfg.H2, "h2", false, "slow-read: the subscribers that never read are WebSocket streams over HTTP/2\n(h2c for ws://), 100 to a connection")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "adversary: the seed of the draw (the same seed, the same clients)")
	fs.IntVar(&cfg.Nice, "nice", 19, "the attacking process's niceness once the probe's and the measured pair's processes run\n(Linux; 0: unchanged): on one machine its own work would otherwise take the CPU\nfrom the server, which a remote attacker's does not")
	fs.IntVar(&cfg.AttackerAddresses, "attacker-addresses", 0, "adversary: the attackers come from this many client addresses, named in\nX-Forwarded-For as by a reverse proxy on loopback, which rally serve trusts\nand rate-limits by (0: as local clients, which it does not rate-limit)")
	var maxRSS int64
	cli.BytesVar(fs, &maxRSS, "max-rss", 600e6, "verdict: the server's peak RSS at most")
	fs.DurationVar(&cfg.MaxProbeP99, "max-p99", 100*time.Millisecond, "verdict: the probe's p99 at most")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	jsonFile := fs.String("json-file", "", "also write the result as JSON to this `FILE`")

	positional, err := cli.Parse(fs, args)
	switch {
	case err != nil:
	case len(positional) != 2 || !IsHostile(positional[0]):
		err = cli.Usagef("want a hostile scenario (%s) and a URL", hostileNames())
	case cfg.Conns < 0 || cfg.Size < 0 || cfg.Duration <= 0 || cfg.Settle < 0 || maxRSS <= 0:
		err = cli.Usagef("--conns, --size, --duration, --settle and --max-rss must be positive")
	default:
		cfg.Scenario, cfg.MaxRSS = positional[0], maxRSS
		cfg.URL, err = wsURL(positional[1])
	}
	help := func(w io.Writer) {
		fmt.Fprintf(w, hostileUsage, hostileList())
		cli.PrintFlags(w, fs)
	}
	if status := cli.Exit("rally bench", err, stdout, stderr, help); status >= 0 {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if os.Getenv(probeEnv) != "" {
		return runProbe(ctx, cfg, stdout)
	}
	if os.Getenv(pairEnv) != "" {
		return runPair(ctx, cfg, stdout)
	}
	res, err := RunHostile(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rally bench: %v\n", strings.TrimPrefix(err.Error(), "loadgen: "))
		return 1
	}
	printResult(stdout, *asJSON, res)
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
