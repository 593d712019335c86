package conform

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"
)

const usage = `usage:
  rally conform server [options] URL          test the echo server at URL (ws://host:port/path)
  rally conform client --addr HOST:PORT [options]
                                              serve the cases to clients on the fuzzing-server
                                              paths (/getCaseCount, /runCase, /updateReports)
  rally conform list [options]                list the selected cases

options:
`

// Main runs the conform command with args (everything after "conform"),
// writing results to stdout and diagnostics to stderr. It returns the exit
// status: 0 when every case is OK or INFORMATIONAL, 1 when a case is not,
// 2 on a usage or run error. The last line printed is the verdict count,
// "N cases: a OK, b NON-STRICT, c INFORMATIONAL, d UNIMPLEMENTED, e FAILED".
// In client mode it serves until a client asks for /updateReports, or until
// an interrupt signal.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		newFlags(stderr, &Options{}, new(string), new(string), new(bool)).PrintDefaults()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	mode := args[0]
	var (
		o         Options
		reportDir string
		addr      string
		verbose   bool
	)
	fs := newFlags(stderr, &o, &reportDir, &addr, &verbose)
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
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
		if len(pos) != 1 {
			fmt.Fprintln(stderr, "conform server: want exactly one URL")
			return 2
		}
		rep, err = RunServer(ctx, pos[0], &o)
	case "client":
		if addr == "" || len(pos) != 0 {
			fmt.Fprintln(stderr, "conform client: want --addr HOST:PORT and no other arguments")
			return 2
		}
		ln, lerr := net.Listen("tcp", addr)
		if lerr != nil {
			fmt.Fprintf(stderr, "conform client: %v\n", lerr)
			return 2
		}
		fmt.Fprintf(stderr, "serving %d cases to WebSocket clients on ws://%s (fuzzing-server paths); waiting for /updateReports\n",
			len(Select(&o)), ln.Addr())
		rep, err = ServeClients(ctx, ln, &o)
	default:
		fmt.Fprintf(stderr, "conform: unknown mode %q\n%s", mode, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "conform %s: %v\n", mode, err)
		if rep == nil {
			return 2
		}
	}
	if reportDir != "" {
		if werr := rep.Write(reportDir); werr != nil {
			fmt.Fprintln(stderr, werr)
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

func newFlags(stderr io.Writer, o *Options, reportDir, addr *string, verbose *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Func("cases", "comma-separated case patterns to run, e.g. 1.*,6.4.* (default: all but 12.* and 13.*)", func(v string) error {
		o.Cases = append(o.Cases, splitList(v)...)
		return nil
	})
	fs.Func("exclude", "comma-separated case patterns to leave out, e.g. 9.*", func(v string) error {
		o.Exclude = append(o.Exclude, splitList(v)...)
		return nil
	})
	fs.StringVar(reportDir, "report", "", "write index.json, cases/*.json and index.html into `DIR`")
	fs.StringVar(&o.Agent, "agent", "", "name of the implementation under test, for the report")
	fs.StringVar(addr, "addr", "", "client mode: listen on `HOST:PORT`")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Second, "how long to wait for each answer of the peer")
	fs.DurationVar(&o.CloseTimeout, "close-timeout", 2*time.Second, "how long to wait for each step of the close handshake")
	fs.DurationVar(&o.FailFastWait, "fail-fast-wait", time.Second, "how long 6.4.3 and 6.4.4 wait for the peer to fail at the invalid byte")
	fs.Float64Var(&o.Scale, "scale", 1, "factor for the message sizes of section 9 (1/64 = 0.015625 for a quick run)")
	fs.BoolVar(verbose, "v", false, "print each case's verdict as it finishes")
	fs.BoolVar(&o.HTTP2, "http2", false, "server mode: run every case on a stream of one HTTP/2 connection (RFC 8441;\nh2c for ws://, h2 for wss://)")
	return fs
}

// parseInterspersed parses flags placed before, between or after the
// positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
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
