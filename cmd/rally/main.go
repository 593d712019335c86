// Command rally is the WebSocket toolbox built on the rally library:
//
//	rally serve    run the WebSocket server (echo today; pub/sub to come)
//	rally cat      talk to a WebSocket server from the terminal
//	rally bench    load-test any WebSocket server
//	rally conform  test any WebSocket server or client against RFC 6455 / 7692
//
// Run `rally COMMAND --help` for the flags of each.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

const usage = `rally: the WebSocket toolbox

Usage:
  rally serve [flags]          run the WebSocket server (echo at /echo)
  rally cat URL [flags]        an interactive client: type lines to send, see what arrives
  rally bench SCENARIO URL     load-test a WebSocket server (echo, chat, throughput, connect, idle)
  rally conform server URL     run the conformance suite against a server's echo endpoint
  rally conform client --addr HOST:PORT
                               serve the suite to a client (the classic fuzzing-server paths)

Run 'rally COMMAND --help' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "bench":
		return loadgen.Main(args[1:], stdout, stderr)
	case "conform":
		return conform.Main(args[1:], stdout, stderr)
	case "cat":
		return cat(args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rally: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rally serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	fs.StringVar(&cfg.Addr, "addr", envOr("RALLY_ADDR", "127.0.0.1:8080"), "address to listen on, HOST:PORT (env RALLY_ADDR)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "how long close handshakes may take on shutdown")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", 30*time.Second, "ping a quiet client this often (negative: never)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 90*time.Second, "close a client silent this long with 1001 (negative: never)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: rally serve [flags]\n\nServes WebSocket echo at /echo. On SIGINT or SIGTERM it closes every\nWebSocket with 1001 (going away) and exits.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rally serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := srv.ListenAndServe(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
