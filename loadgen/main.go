package loadgen

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/rallyws/rally/internal/cli"
)

const usage = `Usage: rally bench SCENARIO URL [flags]

Drives load against any WebSocket server at URL (ws://, wss://, or http://
and https:// for the same) and prints the rate, latency percentiles and
errors it measured; or attacks it (the hostile scenarios, below) and
gives a verdict.

  echo        --conns connections, each keeping --inflight messages of
              --size bytes outstanding; counts replies
  chat        --conns clients of one room: the server must deliver every
              message to every client, the sender included (rally serve's
              /chat does); each round, every client sends --inflight
              messages; counts deliveries
  throughput  one connection, --size (default 256 KiB) binary messages
  connect     --conns workers opening and closing connections; counts
              opening handshakes
  idle        opens --conns connections and holds them for --duration;
              with --server-pid (or --server-pids), reports the server's
              memory per connection; --procs spreads the connections over
              processes, --source-addrs over local addresses;
              --ping-interval sends pings; --subscribe and --broadcast
              time one message to every connection of rally serve's /ws
  pusher      --conns Pusher Channels subscribers of rally serve
              --pusher-app, events triggered through the signed HTTP API;
              --compare runs the same fan-out over rally's /ws (its flags:
              rally bench pusher --help)

Hostile scenarios (their flags: rally bench SCENARIO --help):
%s
Flags of the load scenarios:
`

// Main runs `rally bench` with args (the words after "bench") and returns
// the exit status: 0 when the run ended without errors, 1 when it counted
// errors or could not run, 2 for a usage error. The summary (or JSON with
// --json) goes to stdout; live progress goes to stderr when stderr is a
// terminal. Interrupting the process cuts the window short and still
// prints what was measured.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rally bench")
	var cfg Config
	fs.IntVar(&cfg.Conns, "conns", 0, "connections, clients or workers (default: echo 64, chat 32, connect 16, idle 1000)")
	cli.BytesVar(fs, &cfg.Size, "size", 0, "payload bytes of each message (default 16; throughput 262144)")
	fs.BoolVar(&cfg.Text, "text", false, "send text (non-ASCII UTF-8) messages (default: true for echo and chat, false for throughput)")
	fs.IntVar(&cfg.InFlight, "inflight", 0, "messages outstanding per connection, or sent per round in chat (default: echo 1, chat 8)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured window (idle: how long connections are held)")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "load before the window opens, not counted (0 for none)")
	fs.BoolVar(&cfg.Compress, "compress", false, "offer permessage-deflate and send every message compressed where the server accepts it")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "process id of a server on this machine: report its CPU per message and memory")
	fs.BoolVar(&cfg.InsecureTLS, "insecure", false, "do not verify a wss:// server's certificate")
	procs := 1
	idleChecked := idleFlags(fs, &cfg, &procs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	htmlPath := fs.String("html", "", "also write a self-contained HTML report to this file")

	positional, err := cli.Parse(fs, args)
	if err == nil && len(positional) != 2 {
		err = cli.Usagef("want a scenario (%s) and a URL, got %d arguments", scenarioNames(), len(positional))
	}
	if err == nil {
		cfg.Scenario = Scenario(positional[0])
		cfg.URL = positional[1]
		if ierr := idleChecked(); ierr != nil {
			err = cli.Usagef("%v", ierr)
		}
	}
	if err == nil {
		err = checkFlags(fs, &cfg)
	}
	help := func(w io.Writer) {
		fmt.Fprintf(w, usage, hostileList())
		cli.PrintFlags(w, fs)
	}
	if status := cli.Exit("rally bench", err, stdout, stderr, help); status >= 0 {
		return status
	}

	ctx, stop := signal.NotifyContext(mainContext(), os.Interrupt)
	defer stop()
	live := isTerminal(stderr)
	if live {
		cfg.Progress = func(p Progress) { writeProgress(stderr, cfg.Scenario, p) }
	}
	if os.Getenv(workerEnv) != "" {
		return runWorker(ctx, cfg, os.Stdin, stdout)
	}
	var res *Result
	if procs > 1 {
		res, err = runProcs(ctx, cfg, procs, stderr)
	} else {
		res, err = Run(ctx, cfg)
	}
	if live {
		fmt.Fprint(stderr, "\r\x1b[K")
	}
	if err != nil {
		fmt.Fprintf(stderr, "rally bench: %v\n", strings.TrimPrefix(err.Error(), "loadgen: "))
		return 1
	}
	printResult(stdout, *asJSON, res)
	if *htmlPath != "" {
		if err := os.WriteFile(*htmlPath, []byte(HTMLReport(res)), 0o644); err != nil {
			fmt.Fprintf(stderr, "rally bench: %v\n", err)
			return 1
		}
	}
	if res.Errors > 0 {
		return 1
	}
	return 0
}

// checkFlags fills in what the command line left to defaults and checks
// the result; its error is a usage error.
func checkFlags(fs *flag.FlagSet, cfg *Config) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range []string{"conns", "size", "inflight", "server-pid"} {
		if v := fs.Lookup(name).Value.(flag.Getter).Get().(int); given[name] && v <= 0 && (name != "size" || v < 0) {
			return cli.Usagef("--%s is %d; it must be more than 0", name, v)
		}
	}
	if given["duration"] && cfg.Duration <= 0 {
		return cli.Usagef("--duration is %v; it must be more than 0", cfg.Duration)
	}
	if cfg.Warmup < 0 {
		return cli.Usagef("--warmup must not be negative")
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = -1
	}
	if !given["text"] {
		cfg.Text = cfg.Scenario == Echo || cfg.Scenario == Chat
	}
	d := Defaults(*cfg)
	if err := d.validate(); err != nil {
		return cli.Usagef("%s", strings.TrimPrefix(err.Error(), "loadgen: "))
	}
	return nil
}

// mainContext is the context Main runs under until an interrupt; tests
// replace it to end a run on an event instead of a clock.
var mainContext = context.Background

// writeProgress draws one line of live progress: a bar over the window,
// the rate of the last second, the errors so far.
func writeProgress(w io.Writer, s Scenario, p Progress) {
	const width = 20
	done := 0
	if p.Duration > 0 {
		done = int(float64(width) * float64(p.Elapsed) / float64(p.Duration))
	}
	done = min(max(done, 0), width)
	bar := strings.Repeat("#", done) + strings.Repeat(".", width-done)
	if s == Idle {
		fmt.Fprintf(w, "\r\x1b[K%-9s [%s] %5.1fs  %s connections open  errors %d", p.Phase, bar, p.Elapsed.Seconds(), Count(float64(p.Messages)), p.Errors)
		return
	}
	fmt.Fprintf(w, "\r\x1b[K%-9s [%s] %5.1fs  %s/s  errors %d", p.Phase, bar, p.Elapsed.Seconds(), Count(p.Rate), p.Errors)
}

// printResult writes res to w as indented JSON, or as its summary.
func printResult(w io.Writer, asJSON bool, res interface{ WriteSummary(io.Writer) }) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(res)
		return
	}
	res.WriteSummary(w)
}
