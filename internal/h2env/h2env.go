// Package h2env lets a test binary serve WebSockets over HTTP/2: net/http
// reads GODEBUG=http2xconnect=1 from the environment once, when it
// initialises, so a test package that needs it re-executes itself with it
// from an init function. It is for rally's tests only.
package h2env

import (
	"os"
	"strings"
	"syscall"
)

// Reexec re-executes the running binary with http2xconnect=1 added to
// GODEBUG, unless the setting is there already or the environment
// variable named off is set (a child started on purpose without it). It
// returns only when it did not re-execute.
func Reexec(off string) {
	godebug := os.Getenv("GODEBUG")
	if strings.Contains(godebug, "http2xconnect=1") || (off != "" && os.Getenv(off) != "") {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env := append(os.Environ(), "GODEBUG="+strings.TrimPrefix(godebug+",http2xconnect=1", ","))
	syscall.Exec(exe, os.Args, env)
}
