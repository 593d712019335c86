package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// startMicrosocks runs microsocks, a SOCKS5 server, with user/password
// authentication on a free loopback port until the test ends, and returns
// its address. It fails the test when microsocks is not installed (make
// test installs it), except under -short, where it skips.
func startMicrosocks(t *testing.T, user, password string) string {
	t.Helper()
	bin, err := exec.LookPath("microsocks")
	if err != nil {
		msg := "microsocks is not installed: run `apt-get install -y microsocks` (make test installs it through interop/setup.sh)"
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	for range 3 { // another process may take the free port first
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "-i", "127.0.0.1", "-p", port, "-u", user, "-P", password)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			cmd.Wait()
			close(exited)
		}()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		// microsocks says nothing when it listens: its port accepting a
		// connection is the event (a refused attempt fails at once).
		deadline := time.Now().Add(catTimeout)
		for {
			c, err := net.DialTimeout("tcp", addr, catTimeout)
			if err == nil {
				c.Close()
				t.Cleanup(stop)
				return addr
			}
			select {
			case <-exited:
			default:
				if time.Now().Before(deadline) {
					runtime.Gosched()
					continue
				}
				stop()
			}
			break
		}
	}
	t.Fatal("microsocks could not listen on a free port")
	return ""
}

func TestCatGoesThroughASOCKS5ProxyAndKeepsItsPasswordOutOfErrors(t *testing.T) {
	socks := startMicrosocks(t, "alice", "s3cr3t-pw")
	url := startEcho(t, nil, echoBehaviour{closeAfter: 1})
	for _, scheme := range []string{"socks5", "socks5h"} {
		status, out, errs := runCat(t, "", "--proxy", scheme+"://alice:s3cr3t-pw@"+socks, "-x", "via "+scheme, "-w", "30", url)
		if status != 0 || out != fmt.Sprintf("via %s\n", scheme) {
			t.Fatalf("through microsocks with %s: %d, %q, %q", scheme, status, out, errs)
		}
	}
	status, out, errs := runCat(t, "", "--proxy", "socks5://alice:wrong-SECRET@"+socks, "-x", "no", url)
	want := "proxy socks5://xxxxx@" + socks + ": refused the user and password"
	if status != 1 || out != "" || !strings.Contains(errs, want) || strings.Contains(errs, "SECRET") {
		t.Fatalf("with a wrong password: %d, %q, %q; want status 1 and %q without the password", status, out, errs, want)
	}
}
