package interop_test

// gorilla's chat and echo examples, written against the gorilla/websocket
// drop-in (only the import path changed), driven by peers nobody here
// wrote: headless Chromium on the chat example's own page, and npm ws.

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// startExample builds the example program under gorilla/websocket/examples
// (dir, e.g. "chat" or "echo/server"), starts it listening on a free
// loopback address and returns that address once it accepts connections.
func startExample(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(goBin, "build", "-o", bin, "./"+filepath.Join("gorilla/websocket/examples", dir))
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the %s example: %v\n%s", dir, err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "-addr", addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the %s example's output:\n%s", dir, out.String())
		}
	})
	// The program listens once it has parsed its flags: wait for that, or
	// for it to exit.
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("the %s example exited before listening:\n%s", dir, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// examplePeerResult is what the script prints.
type examplePeerResult struct {
	Got   [][]string `json:"got"`
	Codes []int      `json:"codes"`
}

// runExamplePeer runs node/gorilla-example-peer.mjs with the given steps.
func runExamplePeer(t *testing.T, steps map[string]any) examplePeerResult {
	t.Helper()
	dir := nodeDir(t)
	arg, _ := json.Marshal(steps)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath(t), "gorilla-example-peer.mjs", string(arg))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("npm ws peer: %v\n%s%s", err, out, stderr)
	}
	var r examplePeerResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("npm ws peer printed %q: %v", out, err)
	}
	return r
}

// TestNpmWsTalksToGorillasEchoExample: npm ws sends text and binary
// messages to gorilla's echo server example built on the drop-in and
// gets each back, then closes cleanly (1000 seen by ws).
func TestNpmWsTalksToGorillasEchoExample(t *testing.T) {
	addr := startExample(t, "echo/server")
	text := []string{"hello", "héllo wörld ✓", strings.Repeat("x", 70000)}
	r := runExamplePeer(t, map[string]any{"url": "ws://" + addr + "/echo", "clients": 1, "send": text, "expect": len(text)})
	if len(r.Got) != 1 || strings.Join(r.Got[0], "|") != strings.Join(text, "|") {
		t.Errorf("text echoed as %.200q, want %.200q", r.Got, text)
	}
	if r.Codes[0] != 1000 {
		t.Errorf("close code seen by ws: %d, want 1000", r.Codes[0])
	}
	bin := []string{"00ff10", "deadbeef"}
	r = runExamplePeer(t, map[string]any{"url": "ws://" + addr + "/echo", "clients": 1, "send": bin, "binary": true, "expect": len(bin)})
	if want := "bin:00ff10|bin:deadbeef"; len(r.Got) != 1 || strings.Join(r.Got[0], "|") != want {
		t.Errorf("binary echoed as %q, want %q", r.Got, want)
	}
}

// TestNpmWsClientsChatThroughGorillasChatExample: three npm ws clients on
// gorilla's chat example; every message one sends reaches all three
// (the example's hub may join queued messages with newlines, as
// gorilla's does).
func TestNpmWsClientsChatThroughGorillasChatExample(t *testing.T) {
	addr := startExample(t, "chat")
	// The chat example delivers a message to the clients registered when
	// it arrives; each client here is open before the first send.
	r := runExamplePeer(t, map[string]any{"url": "ws://" + addr + "/ws", "clients": 3, "send": []string{"one"}, "expect": 1})
	for i, got := range r.Got {
		if strings.Join(got, "\n") != "one" {
			t.Errorf("client %d got %q, want [one]", i, got)
		}
	}
	for i, code := range r.Codes {
		if code != 1000 {
			t.Errorf("client %d: close code %d, want 1000", i, code)
		}
	}
}

// TestChromiumChatsThroughGorillasChatExample opens the chat example's own
// page in two headless Chromium tabs, types a line in one, and sees it in
// both logs.
func TestChromiumChatsThroughGorillasChatExample(t *testing.T) {
	addr := startExample(t, "chat")
	first := startBrowser(t, "http://"+addr+"/")
	second, cancel := chromedp.NewContext(first) // a second tab of the same browser
	defer cancel()
	if err := chromedp.Do(second, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitReady(chromedp.CSS("#msg"))); err != nil {
		t.Fatalf("opening the second tab: %v", err)
	}
	logged := func(ctx context.Context, text string) bool {
		expr := `Array.from(document.querySelectorAll("#log div")).some(d => d.textContent === ` + jsString(text) + `)`
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		return err == nil && ok
	}
	// The pages connect on load and show no sign of it: an npm ws client
	// says "ready" in the room until both pages show that they are in it.
	for i := 0; !logged(first, "ready") || !logged(second, "ready"); i++ {
		if i == 100 {
			t.Fatal("the pages never joined the chat room")
		}
		runExamplePeer(t, map[string]any{"url": "ws://" + addr + "/ws", "clients": 1, "send": []string{"ready"}, "expect": 1})
	}
	line := "from the first tab: héllo ✓"
	if err := chromedp.Do(first, chromedp.SendKeys(chromedp.CSS("#msg"), line), chromedp.Click(chromedp.CSS(`input[type="submit"]`))); err != nil {
		t.Fatalf("typing in the first tab: %v", err)
	}
	for _, tab := range []context.Context{first, second} {
		step, stop := context.WithTimeout(tab, 30*time.Second)
		expr := `Array.from(document.querySelectorAll("#log div")).some(d => d.textContent === ` + jsString(line) + `)`
		_, err := chromedp.Run(step, chromedp.Poll[chromedp.Void](expr))
		stop()
		if err != nil {
			text, _ := chromedp.Run(tab, chromedp.Text(chromedp.CSS("#log")))
			t.Fatalf("%q never appeared in a tab's log (log: %q): %v", line, text, err)
		}
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
