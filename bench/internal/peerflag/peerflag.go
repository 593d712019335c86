// Package peerflag reads the flags the Go peer servers take: the address
// to listen on and, for the peers that support permessage-deflate, whether
// to switch it on. It is not a general configuration package: a peer's
// other settings are fixed in its source, the way its README recommends.
package peerflag

import (
	"flag"
	"fmt"
	"os"
)

// Addr parses the command line of a peer that has no permessage-deflate
// and returns the -addr value (default 127.0.0.1:8080). Such a peer
// rejects -compress, as an unknown flag.
func Addr() string {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	return *addr
}

// Parse parses the command line of a peer that supports permessage-deflate
// and returns the -addr value (default 127.0.0.1:8080) and whether
// -compress was given, in which case the peer negotiates permessage-deflate
// with clients that offer it.
func Parse() (addr string, compress bool) {
	a := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	c := flag.Bool("compress", false, "negotiate permessage-deflate with clients that offer it")
	flag.Parse()
	return *a, *c
}

// Fail reports a server that could not start and exits with status 1.
func Fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
