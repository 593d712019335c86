package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rallyBin is the rally binary built for these tests.
var rallyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rally-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rallyBin = filepath.Join(dir, "rally")
	build := exec.Command("go", "build", "-o", rallyBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building rally:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// rally runs the built binary with args and the environment env (added to
// this process's), and returns its exit status, stdout and stderr.
func runRally(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rallyBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("rally %q did not end; stderr:\n%s", args, stderr.String())
	}
	status := 0
	if ee, ok := err.(*exec.ExitError); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("rally %q: %v", args, err)
	}
	return status, stdout.String(), stderr.String()
}

// startRally starts `rally serve` with args on a free loopback port and
// returns its base URL (http://127.0.0.1:PORT) once it listens; the server
// is stopped with SIGTERM when the test ends, which must make it exit 0.
func startRally(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(rallyBin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := bufio.NewScanner(out)
	var base string
	for lines.Scan() {
		if m := regexp.MustCompile(`demo: +(http://\S+)/$`).FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
			break
		}
	}
	go func() {
		io.Copy(io.Discard, out)
		exited <- cmd.Wait()
	}()
	if base == "" {
		cmd.Process.Kill()
		<-exited
		t.Fatalf("rally serve announced no demo URL; stderr:\n%s", stderr.String())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("rally serve after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	})
	return base
}

// oneLine checks that a usage error is one line naming its command.
func oneLine(t *testing.T, args []string, status int, stdout, stderr, cmd string) {
	t.Helper()
	if status != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, cmd+": ") {
		t.Errorf("rally %q: exit %d, stdout %q, stderr %q; want exit 2 and one line starting %q", args, status, stdout, stderr, cmd+":")
	}
}

func TestEveryCommandReportsAWrongCommandLineInOneLineWithStatus2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		cmd  string
		says string
	}{
		{[]string{"serve", "--bogus"}, "rally serve", "unknown flag --bogus"},
		{[]string{"serve", "--max-connections", "many"}, "rally serve", `invalid value "many" for --max-connections`},
		{[]string{"serve", "--max-message-bytes", "-5"}, "rally serve", "--max-message-bytes is -5"},
		{[]string{"serve", "--header-timeout", "0s"}, "rally serve", "--header-timeout"},
		{[]string{"serve", "--max-subscriptions", "0"}, "rally serve", "--max-subscriptions is 0"},
		{[]string{"serve", "--log-format", "xml"}, "rally serve", "--log-format"},
		{[]string{"serve", "extra"}, "rally serve", `unexpected argument "extra"`},
		{[]string{"serve", "--token-secret", "short"}, "rally serve", "--token-secret is 5 bytes"},
		{[]string{"serve", "--addr", "localhost"}, "rally serve", `--addr "localhost" is not HOST:PORT`},
		{[]string{"serve", "--addr", "127.0.0.1:99999"}, "rally serve", `--addr "127.0.0.1:99999": the port must be`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--history", "bad topic*"}, "rally serve", `pattern "bad topic*" can never match`},
		{[]string{"cat", "-x", "hi", "not-a-url"}, "rally cat", "not a URL"},
		{[]string{"cat", "--bogus", "ws://127.0.0.1:1/"}, "rally cat", "unknown flag --bogus"},
		{[]string{"cat", "ws://127.0.0.1:1/", "-w"}, "rally cat", "-w needs a value"},
		{[]string{"bench", "echo", "ws://127.0.0.1:1/", "--bogus"}, "rally bench", "unknown flag --bogus"},
		{[]string{"bench", "echo", "ws://127.0.0.1:1/", "--conns", "-3"}, "rally bench", "--conns is -3"},
		{[]string{"bench", "ping", "ws://127.0.0.1:1/"}, "rally bench", `unknown scenario "ping" (want echo, chat, throughput, connect, idle, pusher, or a hostile one: slowloris, head-hold, partial, h2-partial, slow-read, h2-slow-read, garbage, ping-flood, many-subs, reconnect-old, bomb, adversary)`},
		{[]string{"bench", "slowloris"}, "rally bench", "want a hostile scenario (slowloris, head-hold, partial, h2-partial, slow-read, h2-slow-read, garbage, ping-flood, many-subs, reconnect-old, bomb, adversary) and a URL"},
		{[]string{"bench", "slowloris", "ftp://127.0.0.1:1/"}, "rally bench", `URL scheme "ftp" is not ws, wss, http or https`},
		{[]string{"bench", "garbage", "ws://127.0.0.1:1/", "--bogus"}, "rally bench", "unknown flag --bogus"},
		{[]string{"bench", "idle", "ws://127.0.0.1:1/", "--server-pid", "-1"}, "rally bench", "--server-pid is -1"},
		{[]string{"bench", "echo", "ws://127.0.0.1:1/", "--duration", "0s"}, "rally bench", "duration"},
		{[]string{"bench", "pusher", "ws://127.0.0.1:1/"}, "rally bench", "--app ID:KEY:SECRET is required"},
		{[]string{"bench", "pusher", "ws://127.0.0.1:1/", "--app", "id:key"}, "rally bench", `--app "id:key" is not ID:KEY:SECRET`},
		{[]string{"conform", "server"}, "rally conform server", "want exactly one URL"},
		{[]string{"conform", "server", "ws://127.0.0.1:1/", "--timeout", "-1s"}, "rally conform server", "--timeout"},
		{[]string{"conform", "client"}, "rally conform client", "--addr"},
		{[]string{"conform", "list", "--bogus"}, "rally conform list", "unknown flag --bogus"},
		{[]string{"conform", "fuzz"}, "rally conform", `unknown mode "fuzz"`},
		{[]string{"version", "extra"}, "rally version", `unexpected argument "extra"`},
		{[]string{"token", "--subscribe", "a", "extra"}, "rally token", `unexpected argument "extra"`},
		{[]string{"--bogus"}, "rally", `unknown command "--bogus"`},
	} {
		status, stdout, stderr := runRally(t, nil, tc.args...)
		oneLine(t, tc.args, status, stdout, stderr, tc.cmd)
		if n := strings.Count(stderr, "--help"); n != 1 {
			t.Errorf("rally %q: stderr %q points to --help %d times, want once", tc.args, stderr, n)
		}
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("rally %q: stderr %q, want it to say %q", tc.args, stderr, tc.says)
		}
	}
}

func TestEveryCommandPrintsItsHelpOnStdoutWithFlagsWrittenWithTwoDashes(t *testing.T) {
	singleDashLong := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+`)
	for _, args := range [][]string{
		{"--help"},
		{"serve", "--help"},
		{"cat", "--help"},
		{"bench", "--help"},
		{"bench", "-h"},
		{"bench", "slowloris", "--help"},
		{"bench", "pusher", "--help"},
		{"token", "--help"},
		{"conform", "--help"},
		{"conform", "server", "--help"},
		{"conform", "client", "--help"},
		{"conform", "list", "-h"},
	} {
		status, stdout, stderr := runRally(t, nil, args...)
		if status != 0 || stderr != "" || !strings.Contains(stdout, "Usage") {
			t.Errorf("rally %q: exit %d, stderr %q, stdout %q; want exit 0 and the help on stdout", args, status, stderr, stdout)
		}
		if strings.Contains(stdout, "Usage of") || singleDashLong.MatchString(stdout) {
			t.Errorf("rally %q: help shows a flag with one dash or Go's raw usage:\n%s", args, stdout)
		}
	}
	// The top-level help lists every command.
	_, top, _ := runRally(t, nil, "--help")
	for _, c := range []string{"rally serve", "rally cat", "rally bench", "rally conform server", "rally conform client", "rally conform list", "rally token", "rally version"} {
		if !strings.Contains(top, c) {
			t.Errorf("rally --help does not list %q", c)
		}
	}
}

func TestVersionPrintsTheModuleVersionCommitAndGoVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		status, stdout, _ := runRally(t, nil, args...)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if status != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "rally ") || !strings.HasPrefix(lines[1], "commit ") ||
			lines[2] != runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
			t.Errorf("rally %q: exit %d\n%s", args, status, stdout)
		}
	}
}

func TestServeRefusesTLSFilesItCannotReadBeforeAnnouncingAnything(t *testing.T) {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"}
	status, stdout, stderr := runRally(t, nil, args...)
	if status != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
		!strings.HasPrefix(stderr, "rally serve: ") || !strings.Contains(stderr, "/nonexistent.pem") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1, nothing announced, one rally serve: line", status, stdout, stderr)
	}
}

func TestServeStopsOnSIGTERMAndFreesItsPort(t *testing.T) {
	cmd := exec.Command(rallyBin, "serve", "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	addr := ""
	for addr == "" && lines.Scan() {
		if m := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+) `).FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	go io.Copy(io.Discard, out)
	if addr == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("rally serve did not say where it listens")
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rally serve after SIGTERM: %v, want exit 0", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port is still taken after rally serve exited: %v", err)
	}
	ln.Close()
}

func TestConformServerAgainstNothingIsOneLineAndStatus2(t *testing.T) {
	args := []string{"conform", "server", "ws://127.0.0.1:1/"}
	status, stdout, stderr := runRally(t, nil, args...)
	oneLine(t, args, status, stdout, stderr, "rally conform server")
	if !strings.Contains(stderr, "cannot reach ws://127.0.0.1:1/") {
		t.Errorf("stderr %q, want it to say the server cannot be reached", stderr)
	}
}

func TestCatToAWebPageSaysSoInsteadOfPrintingIt(t *testing.T) {
	base := startRally(t)
	status, stdout, stderr := runRally(t, nil, "cat", "-x", "hi", base+"/")
	if status != 1 || stdout != "" || strings.Contains(stderr, "<") || !strings.Contains(stderr, "a web page, not a WebSocket endpoint") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and a line saying it is a web page", status, stdout, stderr)
	}
}

func TestBenchTakesHTTPURLsAndChatRunsAgainstRallyServesChat(t *testing.T) {
	base := startRally(t)
	// An observer in the room sees every message of the bench's 2 clients
	// (1 per round each). A third message means round 2 has begun, so
	// round 1 was complete for both; then the bench is interrupted, which
	// ends its window and prints what it measured.
	observer := exec.Command(rallyBin, "cat", strings.Replace(base, "http", "ws", 1)+"/chat")
	stdin, err := observer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	seen, err := observer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	events, err := observer.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := observer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the observer closes with 1000 and exits
		observer.Wait()
	}()
	if line, err := bufio.NewReader(events).ReadString('\n'); err != nil || line != "connected\n" {
		t.Fatalf("observer: %q, %v", line, err)
	}
	go io.Copy(io.Discard, events)

	bench := exec.Command(rallyBin, "bench", "chat", base+"/chat", "--conns", "2", "--inflight", "1", "--duration", "1h", "--warmup", "0")
	var stdout, stderr syncBuffer
	bench.Stdout, bench.Stderr = &stdout, &stderr
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(seen)
	for n := 0; n < 3; n++ {
		if !lines.Scan() {
			bench.Process.Kill()
			bench.Wait()
			t.Fatalf("the observer saw %d messages of the bench, then its output ended; bench stderr:\n%s", n, stderr.String())
		}
	}
	go io.Copy(io.Discard, seen)
	bench.Process.Signal(os.Interrupt)
	err = bench.Wait()
	if err != nil || !strings.Contains(stdout.String(), "deliveries/s") || !strings.Contains(stdout.String(), "errors    0") {
		t.Fatalf("rally bench chat %s/chat: %v\nstdout:\n%s\nstderr:\n%s", base, err, stdout.String(), stderr.String())
	}
}
