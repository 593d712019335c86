// Command rally is the WebSocket toolbox built on the rally library:
//
//	rally serve    run the pub/sub server (WebSocket, HTTP publish, demo page)
//	rally cat      talk to a WebSocket server from the terminal
//	rally bench    load-test any WebSocket server
//	rally conform  test any WebSocket server or client against RFC 6455 / 7692
//	rally token    sign a token (JWT) that rally serve accepts
//	rally version  print the version, commit and Go version it was built from
//
// Install it with
//
//	go install github.com/rallyws/rally/cmd/rally@latest
//
// Every subcommand follows the same conventions: flags are written
// --name (single letters -x) and may come before or after the arguments,
// --help prints the command's help and exits 0, and a wrong command line
// is one line on standard error and exit status 2.
//
// Run `rally COMMAND --help` for the flags of each.
package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"

	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/loadgen"
)

const usage = `rally: the WebSocket toolbox

Usage:
  rally serve [flags]          run the pub/sub server: /ws, POST /publish, demo page at /
  rally cat URL [flags]        an interactive client: type lines to send, see what arrives
  rally bench SCENARIO URL     load-test a WebSocket server (echo, chat, throughput, connect, idle,
                               pusher: Pusher Channels fan-out of rally serve),
                               or attack it (slowloris, head-hold, partial, slow-read, garbage)
  rally conform server URL     run the conformance suite against a server's echo endpoint
  rally conform client --addr HOST:PORT
                               serve the suite to a client (the classic fuzzing-server paths)
  rally conform list           list the cases of the suite
  rally token --subscribe PATTERNS --publish PATTERNS
                               sign a token for rally serve --token-secret (secret from
                               RALLY_TOKEN_SECRET or --secret-file)
  rally version                print the version, commit and Go version of this binary

Run 'rally COMMAND --help' for the flags of a command.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		enableHTTP2WebSockets()
	}
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
		if len(args) > 1 && args[1] == "pusher" {
			return loadgen.PusherMain(args[1:], stdout, stderr)
		}
		if len(args) > 1 && loadgen.IsHostile(args[1]) {
			return loadgen.HostileMain(args[1:], stdout, stderr)
		}
		return loadgen.Main(args[1:], stdout, stderr)
	case "conform":
		return conform.Main(args[1:], stdout, stderr)
	case "cat":
		return cat(args[1:], os.Stdin, stdout, stderr)
	case "token":
		return token(args[1:], stdout, stderr)
	case "version", "--version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "rally version: unexpected argument %q (see rally --help)\n", args[1])
			return 2
		}
		fmt.Fprint(stdout, version())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rally: unknown command %q (see rally --help)\n", args[0])
	return 2
}

// Stamped by release builds (make release):
//
//	go build -ldflags "-X main.stampVersion=v1.2.3 -X main.stampCommit=abc123" ./cmd/rally
//
// When set, they win over what the Go toolchain recorded.
var stampVersion, stampCommit string

// pseudoCommit finds the commit in a pseudo-version such as
// v0.0.0-20261203022347-744e443e5b0c, which is all `go install
// module@version` records of it.
var pseudoCommit = regexp.MustCompile(`-(?:\d+\.)?\d{14}-([0-9a-f]{12})(?:\+.*)?$`)

// version says which rally this is: the module version, the commit it was
// built from (with a mark when the work tree had changes) and the Go
// version and platform.
func version() string {
	mod, commit, when, modified := "(unknown)", "(unknown)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		mod = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if m := pseudoCommit.FindStringSubmatch(mod); m != nil && commit == "(unknown)" {
			commit = m[1]
		}
	}
	if stampVersion != "" {
		mod = stampVersion
	}
	if stampCommit != "" {
		commit = stampCommit
	}
	if modified {
		commit += " (with local changes)"
	}
	if when != "" {
		commit += " of " + when
	}
	return fmt.Sprintf("rally %s\ncommit %s\n%s %s/%s\n", mod, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
