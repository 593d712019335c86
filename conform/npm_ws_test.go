package conform

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
)

// nodeProject returns the interop Node project with npm ws installed. The
// npm ws tests skip under -short (make check); otherwise a missing peer is
// an error, not a silent skip (make test installs it).
func nodeProject(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Node.js and npm ws (interop/node); runs without -short")
	}
	dir, err := filepath.Abs(filepath.Join("..", "interop", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not installed: install Node.js, then cd interop/node && npm ci (make setup)")
	}
	cmd := exec.Command("node", "-e", "require.resolve('ws')")
	cmd.Dir = dir
	if err := cmd.Run(); err != nil {
		t.Fatal("npm ws is not installed: cd interop/node && npm ci (make setup)")
	}
	return dir
}

// startNpmWsServer starts interop/node/conform-server.mjs and returns its
// echo URL; the process is killed when the test ends.
func startNpmWsServer(t *testing.T, env ...string) string {
	dir := nodeProject(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", "conform-server.mjs")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("npm ws server did not start: %v", err)
	}
	return "ws://127.0.0.1:" + strings.TrimSpace(line) + "/"
}

// quick is the options of the tests: small messages in section 9. A
// strict peer's verdict must not depend on the machine's load, so every
// wait for its answer scales with the measured load, the wait for a peer
// to fail fast at an invalid byte (6.4.3, 6.4.4) included; each ends at
// the answer, so only peers that never give it pay the wait, and the tests
// of such peers shorten it (neverFailsFast).
func quick() *Options {
	return &Options{Scale: 1.0 / 64, Timeout: slowness.Scale(5 * time.Second),
		CloseTimeout: slowness.Scale(2 * time.Second), FailFastWait: slowness.Scale(2 * time.Second)}
}

// neverFailsFast is quick for a peer that does not fail at the first
// invalid byte of a message: it gets the same verdict however short the
// wait for it to do so.
func neverFailsFast() *Options {
	o := quick()
	o.FailFastWait = 50 * time.Millisecond
	return o
}

func logReport(t *testing.T, rep *Report) {
	t.Helper()
	for _, f := range rep.Failures() {
		t.Log(f)
	}
	t.Log(rep.Counts())
}

// npmWsClient drives interop/node/conform-client.mjs against addr.
func npmWsClient(t *testing.T, env ...string) func(ctx context.Context, addr string) error {
	dir := nodeProject(t)
	return func(ctx context.Context, addr string) error {
		cmd := exec.CommandContext(ctx, "node", "conform-client.mjs", "ws://"+addr, "npm-ws")
		cmd.Dir = dir
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("npm ws client output:\n%s", out)
		}
		return err
	}
}
