package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestServeHelpListsEveryFlagWithItsEnvironmentVariable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := out.String()
	listed := 0
	for _, g := range serveGroups {
		for _, f := range g.flags {
			listed++
			if !strings.Contains(help, "--"+f.name) || !strings.Contains(help, "env "+f.env) {
				t.Errorf("help does not show --%s with %s", f.name, f.env)
			}
		}
	}
	// Every flag the command defines is in a group.
	defined := strings.Count(help, "\n  --")
	if defined != listed {
		t.Errorf("help shows %d flags, the groups list %d", defined, listed)
	}
}

func TestServeRefusesABadEnvironmentValueWithoutRepeatingIt(t *testing.T) {
	t.Setenv("RALLY_MAX_CONNECTIONS", "s3cret-looking")
	var out, errOut bytes.Buffer
	if code := run([]string{"serve"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if msg := errOut.String(); !strings.Contains(msg, "RALLY_MAX_CONNECTIONS") || strings.Contains(msg, "s3cret-looking") {
		t.Fatalf("message %q, want one naming the variable but not its value", msg)
	}
}

func TestServeRefusesAPublicAddressWithoutAuth(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--addr", "0.0.0.0:0"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "--insecure-no-auth") {
		t.Fatalf("message %q does not say how to allow it", errOut.String())
	}
}
