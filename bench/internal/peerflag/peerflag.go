// Package peerflag reads the one flag every Go peer server takes, the
// address to listen on, and tells the runner when the server is ready.
package peerflag

import (
	"flag"
	"fmt"
	"os"
)

// Addr parses the command line and returns the -addr value
// (default 127.0.0.1:8080).
func Addr() string {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	return *addr
}

// Fail reports a server that could not start and exits with status 1.
func Fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
