package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/rallyws/rally"
)

// reexecEnv marks a rally that re-executed itself, so that it never does
// so twice.
const reexecEnv = "RALLY_REEXECUTED"

// enableHTTP2WebSockets makes `rally serve` accept WebSockets over HTTP/2.
// net/http advertises extended CONNECT (RFC 8441) only when the process
// starts with GODEBUG=http2xconnect=1 in its environment: read once when
// it initialises, before main, and not settable with a //go:debug line.
// So rally re-executes itself, same binary and arguments, with the
// setting appended to GODEBUG. If that fails, it says so and serves
// without (the server logs that WebSockets over HTTP/2 are off).
func enableHTTP2WebSockets() {
	if rally.CheckHTTP2() == nil || os.Getenv(reexecEnv) != "" {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, withXConnect(os.Environ()))
	}
	fmt.Fprintf(os.Stderr, "rally serve: could not restart with GODEBUG=http2xconnect=1 (%v); WebSockets over HTTP/2 are off\n", err)
}

// withXConnect returns env with http2xconnect=1 appended to GODEBUG (a
// later setting wins in GODEBUG) and the re-execution marked.
func withXConnect(env []string) []string {
	out := make([]string, 0, len(env)+2)
	godebug := "http2xconnect=1"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if v != "" {
				godebug = v + ",http2xconnect=1"
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GODEBUG="+godebug, reexecEnv+"=1")
}

// http2Flag is rally cat's --http2: alone it requires HTTP/2;
// --http2=prefer, =require and =never (or =false) say which.
type http2Flag rally.HTTP2Mode

func (f *http2Flag) String() string {
	if f == nil || *f == 0 {
		return ""
	}
	return rally.HTTP2Mode(*f).String()
}

func (f *http2Flag) Set(v string) error {
	switch v {
	case "true", "require":
		*f = http2Flag(rally.HTTP2Require)
	case "prefer":
		*f = http2Flag(rally.HTTP2Prefer)
	case "false", "never":
		*f = http2Flag(rally.HTTP2Never)
	default:
		return fmt.Errorf("%q is not require, prefer or never", v)
	}
	return nil
}

func (f *http2Flag) IsBoolFlag() bool { return true }
