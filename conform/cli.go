package conform

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/rallyws/rally/internal/cli"
)

const usage = `Usage:
  rally conform server [flags] URL          test the echo server at URL (ws://host:port/path;
                                            http:// is the same)
  rally conform client --addr HOST:PORT [flags]
                                            serve the cases to clients on the fuzzing-server
                                            paths (/getCaseCount, /runCase, /updateReports)
  rally conform list [flags]                list the selected cases

Run 'rally conform MODE --help' for the flags of a mode.
`

// modeUsage is the help of each mode, before its flags.
var modeUsage = map[string]string{
	"server": `Usage: rally conform server [flags] URL

Runs every selected case against the WebSocket server at URL (ws://, or
http:// for the same; wss:// and https:// with --http2), which must echo
each message back with its own frame type. The last line is the count of
verdicts; each case not OK is listed above it.

Exit status: 0 when every case is OK or INFORMATIONAL, 1 when one is not,
2 for a usage error or when the server cannot be reached (at the start, or
any more during the run: one line says so and the run stops).

Flags:
`,
	"client": `Usage: rally conform client --addr HOST:PORT [flags]

Serves the selected cases to WebSocket clients on the fuzzing-server paths
(/getCaseCount, /runCase?case=N&agent=A, /updateReports?agent=A) until a
client asks for /updateReports or an interrupt. The last line is the count
of verdicts.

Exit status: 0 when every case is OK or INFORMATIONAL, 1 when one is not,
2 for a usage error or when the address cannot be listened on.

Flags:
`,
	"list": `Usage: rally conform list [flags]

Lists the selected cases, one per line: its id and what it checks.

Flags:
`,
}

// Main runs the conform command with args (everything after "conform"),
// writing results to stdout and diagnostics to stderr. It returns the exit
// status: 0 when every case is OK or INFORMATIONAL, 1 when a case is not,
// 2 on a usage error or when the run could not start (the server cannot
// be reached, the address cannot be listened on): one line on stderr.
// The last line printed is the verdict count, "N cases: a OK, b
// NON-STRICT, c INFORMATIONAL, d UNIMPLEMENTED, e FAILED". In client mode
// it serves until a client asks for /updateReports, or until an interrupt
// signal.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	mode := args[0]
	switch mode {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "server", "client", "list":
	default:
		fmt.Fprintf(stderr, "rally conform: unknown mode %q, want server, client or list (see rally conform --help)\n", mode)
		return 2
	}
	cmd := "rally conform " + mode
	var (
		o         Options
		reportDir string
		addr      string
		verbose   bool
	)
	fs := newFlags(&o, &reportDir, &addr, &verbose)
	pos, err := cli.Parse(fs, args[1:])
	if err == nil {
		err = checkArgs(mode, pos, addr, &o)
	}
	help := func(w io.Writer) {
		fmt.Fprint(w, modeUsage[mode])
		cli.PrintFlags(w, fs)
	}
	if status := cli.Exit(cmd, err, stdout, stderr, help); status >= 0 {
		return status
	}
	if verbose {
		o.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var rep *Report
	switch mode {
	case "list":
		for _, c := range Select(&o) {
			fmt.Fprintf(stdout, "%-9s %s\n", c.ID, c.Description)
		}
		return 0
	case "server":
		rep, err = RunServer(ctx, pos[0], &o)
	case "client":
		ln, lerr := net.Listen("tcp", addr)
		if lerr != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, lerr)
			return 2
		}
		fmt.Fprintf(stderr, "serving %d cases to WebSocket clients on ws://%s (fuzzing-server paths); waiting for /updateReports\n",
			len(Select(&o)), ln.Addr())
		rep, err = ServeClients(ctx, ln, &o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, strings.TrimPrefix(err.Error(), "conform: "))
		var gone *peerGoneError
		if rep == nil || errors.As(err, &gone) {
			return 2
		}
	}
	if reportDir != "" {
		if werr := rep.Write(reportDir); werr != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, werr)
			return 2
		}
		fmt.Fprintf(stderr, "report written to %s/index.html\n", strings.TrimRight(reportDir, "/"))
	}
	for _, f := range rep.Failures() {
		fmt.Fprintln(stdout, f)
	}
	fmt.Fprintln(stdout, rep.Counts())
	switch {
	case err != nil:
		return 2
	case !rep.Passed():
		return 1
	}
	return 0
}

// checkArgs checks what the flag package cannot: the arguments of mode
// and the ranges of the numbers.
func checkArgs(mode string, pos []string, addr string, o *Options) error {
	switch {
	case mode == "server" && len(pos) != 1:
		return cli.Usagef("want exactly one URL, got %d arguments", len(pos))
	case mode == "client" && addr == "":
		return cli.Usagef("want --addr HOST:PORT")
	case mode != "server" && len(pos) != 0:
		return cli.Usagef("unexpected argument %q", pos[0])
	case o.Timeout <= 0:
		return cli.Usagef("--timeout must be more than 0")
	case o.CloseTimeout <= 0:
		return cli.Usagef("--close-timeout must be more than 0")
	case o.FailFastWait <= 0:
		return cli.Usagef("--fail-fast-wait must be more than 0")
	case !(o.Scale > 0 && o.Scale < math.Inf(1)):
		return cli.Usagef("--scale must be a number more than 0")
	}
	return nil
}

func newFlags(o *Options, reportDir, addr *string, verbose *bool) *flag.FlagSet {
	fs := cli.NewFlagSet("rally conform")
	fs.Func("cases", "comma-separated case `PATTERNS` to run, e.g. 1.*,6.4.* (default: all but 12.*, 13.* and 106.*)", func(v string) error {
		o.Cases = append(o.Cases, splitList(v)...)
		return nil
	})
	fs.Func("exclude", "comma-separated case `PATTERNS` to leave out, e.g. 9.*", func(v string) error {
		o.Exclude = append(o.Exclude, splitList(v)...)
		return nil
	})
	fs.StringVar(reportDir, "report", "", "write index.json, cases/*.json and index.html into `DIR`")
	fs.StringVar(&o.Agent, "agent", "", "`NAME` of the implementation under test, for the report")
	fs.StringVar(addr, "addr", "", "client mode: listen on `HOST:PORT`")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "how long to wait for each answer of the peer")
	fs.DurationVar(&o.CloseTimeout, "close-timeout", 2*time.Second, "how long to wait for each step of the close handshake")
	fs.DurationVar(&o.FailFastWait, "fail-fast-wait", time.Second, "how long 6.4.3, 6.4.4, 106.x.3 and 106.x.4 wait for the peer to fail at the invalid byte")
	fs.Float64Var(&o.Scale, "scale", 1, "`FACTOR` for the message sizes of section 9 (1/64 = 0.015625 for a quick run)")
	fs.BoolVar(verbose, "v", false, "print each case's verdict as it finishes")
	fs.BoolVar(&o.HTTP2, "http2", false, "server mode: run every case on a stream of one HTTP/2 connection (RFC 8441;\nh2c for ws://, h2 for wss://)")
	return fs
}

func splitList(v string) []string {
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
