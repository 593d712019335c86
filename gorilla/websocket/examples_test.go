package websocket_test

// gorilla's examples, written for this package, built and driven end to
// end: the echo server with the echo client, and the chat server with
// clients of this package.

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

var (
	buildOnce sync.Once
	builtDir  string
	buildErr  error
)

// buildExamples builds every example program once, into a directory that
// lives as long as the test binary's run.
func buildExamples(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example programs; run without -short")
	}
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "gorilla-examples")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", builtDir+string(filepath.Separator), "./examples/...")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = err
			builtDir = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("building the examples: %v\n%s", buildErr, builtDir)
	}
	return builtDir
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startExample runs an example program until the test ends and waits
// until addr accepts connections.
func startExample(t *testing.T, name, addr string, args ...string) *lockedBuffer {
	t.Helper()
	dir := buildExamples(t)
	out := &lockedBuffer{}
	cmd := exec.Command(filepath.Join(dir, name), append([]string{"-addr", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen on %s: %v\n%s", name, addr, err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The echo example: the client sends three messages, gets each back, and
// closes cleanly; the server saw them and the close.
func TestEchoExampleServerWithEchoExampleClient(t *testing.T) {
	addr := freeAddr(t)
	serverOut := startExample(t, "server", addr)
	dir := buildExamples(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "client"), "-addr", addr, "-n", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "recv: "); n != 3 {
		t.Fatalf("the client got %d echoes, want 3:\n%s", n, out)
	}
	if !strings.Contains(string(out), "read: websocket: close 1000 (normal)") {
		t.Fatalf("the client's close was not answered with 1000:\n%s", out)
	}
	deadline := time.Now().Add(wait)
	for !strings.Contains(serverOut.String(), "read: websocket: close 1000 (normal)") {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not see the client's close:\n%s", serverOut)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(serverOut.String(), "recv: "); n != 3 {
		t.Fatalf("the server got %d messages, want 3:\n%s", n, serverOut)
	}
}

// The chat example: what one client sends reaches every client, the page
// is served, and a message over the example's 512-byte limit ends its
// sender's connection with 1009.
func TestChatExampleBroadcastsToEveryClient(t *testing.T) {
	addr := freeAddr(t)
	startExample(t, "chat", addr)
	var clients []*websocket.Conn
	for i := 0; i < 3; i++ {
		clients = append(clients, dial(t, "ws://"+addr+"/ws", nil))
	}
	// Every client is registered once its own message comes back.
	for i, c := range clients {
		want := "hello from " + string(rune('a'+i))
		if err := c.WriteMessage(websocket.TextMessage, []byte("  "+want+"\n")); err != nil {
			t.Fatal(err)
		}
		for {
			_, p, err := c.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(p), want) {
				break
			}
		}
	}
	if err := clients[0].WriteMessage(websocket.TextMessage, []byte("to all")); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		for {
			_, p, err := c.ReadMessage()
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			if strings.Contains(string(p), "to all") {
				break
			}
		}
	}
	big := clients[1]
	big.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte("x"), 513))
	for {
		if _, _, err := big.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
				t.Fatalf("over the limit: %v, want close 1009", err)
			}
			break
		}
	}
}
