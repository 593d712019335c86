package examples_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// bin holds the examples, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rally-examples")
	if err != nil {
		panic(err)
	}
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./...")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("go build ./examples/...: " + err.Error())
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bound is how long any step of these tests may take.
const bound = 30 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// lines is a program's stdout, line by line, shared with the test.
type lines struct {
	mu   sync.Mutex
	all  []string
	more chan struct{}
}

// waitFor returns the first line matching re, failing the test after bound.
func (l *lines) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(bound)
	for {
		l.mu.Lock()
		for _, s := range l.all {
			if m := re.FindStringSubmatch(s); m != nil {
				l.mu.Unlock()
				return m
			}
		}
		l.mu.Unlock()
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("no line matching %s in %q", re, l.text())
		}
	}
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// start runs example name with args; it is killed when the test ends.
// done is closed when it has exited.
func start(t *testing.T, name string, args ...string) (out *lines, cmd *exec.Cmd, done chan struct{}) {
	t.Helper()
	cmd = exec.Command(filepath.Join(bin, name), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out = &lines{more: make(chan struct{}, 1)}
	done = make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.mu.Lock()
			out.all = append(out.all, sc.Text())
			out.mu.Unlock()
			select {
			case out.more <- struct{}{}:
			default:
			}
		}
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return out, cmd, done
}

var listening = regexp.MustCompile(`^listening on http://(\S+)`)

// startServer runs a server example on addr and returns the address it
// announced.
func startServer(t *testing.T, name, addr string) (string, *exec.Cmd, chan struct{}) {
	t.Helper()
	out, cmd, done := start(t, name, "--addr", addr)
	return out.waitFor(t, listening)[1], cmd, done
}

func dial(t *testing.T, url string) *rally.Conn {
	t.Helper()
	c, _, err := rally.Dial(testContext(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func say(t *testing.T, c *rally.Conn, msg string) {
	t.Helper()
	if err := c.Write(testContext(t), rally.Text, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, c *rally.Conn) string {
	t.Helper()
	_, p, err := c.Read(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return string(p)
}

func TestEchoClientGetsItsMessagesBackFromEchoServer(t *testing.T) {
	addr, _, _ := startServer(t, "echo-server", "127.0.0.1:0")
	ctx := testContext(t)
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "echo-client"), "--url", "ws://"+addr+"/echo", "hello", "world").Output()
	if err != nil || string(out) != "text: hello\ntext: world\n" {
		t.Fatalf("echo-client: %v, stdout %q", err, out)
	}
}

func TestChatServesItsPageAndGivesEveryMessageToEveryone(t *testing.T) {
	addr, _, _ := startServer(t, "chat", "127.0.0.1:0")
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "new WebSocket(") {
		t.Fatalf("/ is not the chat page: %.200s", page)
	}
	// Each is in the room once their own message comes back to them.
	alice := dial(t, "ws://"+addr+"/ws")
	say(t, alice, "alice here")
	if got := read(t, alice); got != "alice here" {
		t.Fatalf("alice read %q", got)
	}
	bob := dial(t, "ws://"+addr+"/ws")
	say(t, bob, "bob here")
	if got := read(t, bob); got != "bob here" {
		t.Fatalf("bob read %q", got)
	}
	if got := read(t, alice); got != "bob here" {
		t.Fatalf("alice read %q", got)
	}
	say(t, alice, "hi bob")
	if got := read(t, bob); got != "hi bob" {
		t.Fatalf("bob read %q", got)
	}
}

func publish(t *testing.T, addr, topic, body string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/publish/"+topic, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ans, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("publish: %d %s", resp.StatusCode, ans)
	}
	return strings.TrimSpace(string(ans))
}

func TestPubSubHubDeliversToTheTopicsSubscribersOnly(t *testing.T) {
	addr, _, _ := startServer(t, "pubsub-hub", "127.0.0.1:0")
	if _, resp, err := rally.Dial(testContext(t), "ws://"+addr+"/ws", nil); err == nil || resp == nil || resp.StatusCode != 400 {
		t.Fatalf("without a topic: %v, want 400", err)
	}
	a, b := dial(t, "ws://"+addr+"/ws?topic=news"), dial(t, "ws://"+addr+"/ws?topic=news&topic=sport")
	if wa, wb := read(t, a), read(t, b); wa != "subscribed to news" || wb != "subscribed to news, sport" {
		t.Fatalf("welcomes %q and %q", wa, wb)
	}
	// What one sends reaches the other.
	for _, pair := range [][2]*rally.Conn{{a, b}, {b, a}} {
		say(t, pair[0], "hi")
		if got := read(t, pair[1]); got != "hi" {
			t.Fatalf("read %q, want hi", got)
		}
	}
	if ans := publish(t, addr, "news", "extra, extra"); ans != "received by 2" {
		t.Fatalf("publish to news: %q", ans)
	}
	if ans := publish(t, addr, "sport", "goal"); ans != "received by 1" {
		t.Fatalf("publish to sport: %q", ans)
	}
	if ra, rb, rb2 := read(t, a), read(t, b), read(t, b); ra != "extra, extra" || rb != "extra, extra" || rb2 != "goal" {
		t.Fatalf("a read %q, b read %q then %q", ra, rb, rb2)
	}
}

func TestReconnectCarriesOnAfterItsServerRestarts(t *testing.T) {
	addr, server, serverDone := startServer(t, "echo-server", "127.0.0.1:0")
	out, client, clientDone := start(t, "reconnect", "--url", "ws://"+addr+"/echo", "--every", "20ms", "--messages", "6", "--max-backoff", "200ms")
	out.waitFor(t, regexp.MustCompile(`^reply: message 2$`))
	server.Process.Kill()
	<-serverDone
	startServer(t, "echo-server", addr) // the same port again
	select {
	case <-clientDone:
	case <-time.After(bound):
		t.Fatalf("reconnect did not end; stdout:\n%s", out.text())
	}
	text := out.text()
	if client.ProcessState.ExitCode() != 0 || !strings.Contains(text, "reconnected") || strings.Count(text, "reply: ") != 6 {
		t.Fatalf("exit %d, stdout:\n%s\nwant 6 replies across a reconnect", client.ProcessState.ExitCode(), text)
	}
}
