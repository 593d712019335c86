package interop_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/server"
)

// pusherApp is the Pusher app the real clients and SDK are pointed at.
var pusherApp = server.PusherApp{ID: "interop-app", Key: "interop-key", Secret: "interop-secret"}

// startPusherServer runs rally's server with the Pusher app on a port of its
// own and returns its host:port.
func startPusherServer(t *testing.T, cfg server.Config) string {
	t.Helper()
	host, _ := startPusherServerAt(t, "127.0.0.1:0", cfg)
	return host
}

// startPusherServerAt runs rally's server on addr and returns its host:port
// and a func that stops it (also called when t ends).
func startPusherServerAt(t *testing.T, addr string, cfg server.Config) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = ln.Addr().String()
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := server.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runPusherScenario runs pusher-scenario.mjs (pusher-js 8, Laravel Echo and
// the pusher server SDK) against hostA and hostB and fails t with its output
// when a check fails. fullHost, if not "", is a server with room for one
// connection.
func runPusherScenario(t *testing.T, hostA, hostB string, webhookPort int, fullHost string) {
	t.Helper()
	arg, _ := json.Marshal(map[string]any{
		"hostA": hostA, "hostB": hostB, "appId": pusherApp.ID, "key": pusherApp.Key, "secret": pusherApp.Secret,
		"webhookPort": webhookPort, "waitMs": waitFor.Milliseconds(), "fullHost": fullHost,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath(t), "pusher-scenario.mjs", string(arg))
	cmd.Dir = nodeDir(t)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\ndone") {
		t.Fatalf("pusher scenario: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// pusher-js 8, Laravel Echo and the pusher server SDK against one node, on
// both engines: every channel type (end-to-end encrypted ones with the SDK's
// master key), client events, signin and terminating a user's connections,
// the HTTP API, every webhook verified by the SDK, and the errors a user
// meets (4001, 4009, 4100, 4301, 4302) with what pusher-js does on each.
func TestPusherJSOneNode(t *testing.T) {
	for _, eventLoop := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutines", true: "event-loop"}[eventLoop], func(t *testing.T) {
			port := freePort(t)
			app := pusherApp
			app.Webhooks = []string{"http://127.0.0.1:" + strconv.Itoa(port) + "/hook"}
			host := startPusherServer(t, server.Config{EventLoop: eventLoop, PusherApps: []server.PusherApp{app}})
			full := startPusherServer(t, server.Config{EventLoop: eventLoop, MaxConnections: 1, PusherApps: []server.PusherApp{pusherApp}})
			runPusherScenario(t, host, host, port, full)
		})
	}
}

// The same scenario with the clients split over two nodes joined by NATS:
// events, presence and the HTTP API answer for the cluster, each event is
// triggered once (a client that has subscription_succeeded gets what
// either node triggers after), and both nodes send webhooks to the same
// URL, each once per cluster.
func TestPusherJSTwoNodes(t *testing.T) {
	for _, eventLoop := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutines", true: "event-loop"}[eventLoop], func(t *testing.T) {
			natsPort, hookPort := freePort(t), freePort(t)
			secret := "interop-cluster-secret-0123456789abcdef"
			app := pusherApp
			app.Webhooks = []string{"http://127.0.0.1:" + strconv.Itoa(hookPort) + "/hook"}
			a := startPusherServer(t, server.Config{Node: "a", EventLoop: eventLoop, PusherApps: []server.PusherApp{app},
				NATS: server.NATSConfig{Embedded: "127.0.0.1:" + strconv.Itoa(natsPort), ClusterSecret: secret}})
			b := startPusherServer(t, server.Config{Node: "b", EventLoop: eventLoop, PusherApps: []server.PusherApp{app},
				NATS: server.NATSConfig{URL: "nats://127.0.0.1:" + strconv.Itoa(natsPort), ClusterSecret: secret}})
			runPusherScenario(t, a, b, hookPort, "")
		})
	}
}
