package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpsListenerAnswersWhenClientsTookEveryDescriptor runs a server in a
// child process with few file descriptors, takes them all with idle
// connections, and checks that accept errors are logged at warn and
// counted, and that the ops listener still serves /healthz and /metrics.
func TestOpsListenerAnswersWhenClientsTookEveryDescriptor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("lowers RLIMIT_NOFILE and counts descriptors in /proc")
	}
	if os.Getenv("RALLY_FD_CHILD") == "1" {
		fdLimitChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpsListenerAnswersWhenClientsTookEveryDescriptor$")
	cmd.Env = append(os.Environ(), "RALLY_FD_CHILD=1")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child exits when its stdin closes
		cmd.Wait()
	}()
	var main, ops string
	if _, err := fmt.Fscan(stdout, &main, &ops); err != nil {
		t.Fatalf("reading the child's addresses: %v", err)
	}
	warned := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "accepting connections failed") {
				select {
				case warned <- sc.Text():
				default:
				}
			}
		}
	}()
	// More connections than the child has descriptors left.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 64 {
		c, err := net.Dial("tcp", main)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	select {
	case line := <-warned:
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "fd_limit") {
			t.Errorf("accept error logged as %q, want a warning with reason fd_limit", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no accept error logged with every descriptor taken")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + ops + "/healthz")
	if err != nil {
		t.Fatalf("/healthz on the ops listener at the descriptor limit: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	resp, err = client.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatalf("/metrics on the ops listener at the descriptor limit: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `rally_accept_errors_total{reason="fd_limit"}`) {
		t.Errorf("/metrics does not count accept errors at the descriptor limit")
	}
}

// fdLimitChild serves with RLIMIT_NOFILE a few descriptors above what is
// open, prints its main and ops addresses, and serves until stdin closes.
func fdLimitChild() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s, err := New(Config{
		Addr:       ln.Addr().String(),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Protection: Protection{OpsAddr: "127.0.0.1:0"},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	// Serve has started its ops listener once /healthz answers there.
	for {
		resp, err := http.Get("http://" + s.OpsAddr() + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	entries, _ := os.ReadDir("/proc/self/fd")
	lim := uint64(len(entries) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().String(), s.OpsAddr())
	io.Copy(io.Discard, os.Stdin)
	cancel()
	<-done
}
