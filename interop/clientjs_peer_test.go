package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdpnetwork "github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rallyws/rally/server"
)

// clientWait bounds every wait for an event of the JavaScript client. It
// is generous: it covers backoff delays and a loaded machine, and it is a
// bound, not a measurement.
const clientWait = 30 * time.Second

// jsEvent is one event of rally's JavaScript client, as
// interop/node/client-js-harness.mjs reports it.
type jsEvent struct {
	Ev           string          `json:"ev"`
	Attempt      int             `json:"attempt"`
	Delay        float64         `json:"delay"`
	Code         int             `json:"code"`
	Reason       string          `json:"reason"`
	Reconnect    bool            `json:"reconnect"`
	Topic        string          `json:"topic"`
	Recovering   bool            `json:"recovering"`
	Recovered    bool            `json:"recovered"`
	Resubscribed bool            `json:"resubscribed"`
	Replayed     int             `json:"replayed"`
	Position     *jsPosition     `json:"position"`
	Data         json.RawMessage `json:"data"`
	Ref          int             `json:"ref"`
	ErrCode      string          `json:"errcode"`
	Message      string          `json:"message"`
	Ack          json.RawMessage `json:"ack"`
	Answer       json.RawMessage `json:"answer"`
	Client       string          `json:"client"`
	Type         string          `json:"type"`
}

type jsPosition struct {
	Offset uint64 `json:"offset"`
	Epoch  string `json:"epoch"`
}

func (e jsEvent) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// jsClient is the JavaScript client running in one runtime (Node with npm
// ws, Node's own WebSocket, Chromium): commands go in, events come out in
// the order the client emitted them.
type jsClient struct {
	t      *testing.T
	name   string
	send   func(cmd map[string]any)
	events chan jsEvent
	// network takes the browser offline or back online, as DevTools does
	// (navigator.onLine and the window's events); Chromium only.
	network func(online bool)
	seen    []string // every event so far, for failure messages
}

// jsRuntimes are the places the client is tested in.
var jsRuntimes = []string{"node-ws", "node-websocket", "chromium"}

// inRuntimes runs test once per runtime, as parallel subtests named after
// the runtime. Each starts its own client, server and proxy: they share
// only what the caller set up for all of them. Most of a run is spent
// waiting on other processes (Node, Chromium, backoff delays), so the
// runtimes wait together; the parent (a server mode, with its leak check)
// ends after all of them.
func inRuntimes(t *testing.T, runtimes []string, test func(t *testing.T, rt string)) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			test(t, rt)
		})
	}
}

// startJSClientThroughProxy starts the client in runtime against the
// server at addr, through a proxy that can cut or stall the network
// between them.
func startJSClientThroughProxy(t *testing.T, runtime, addr string) (*cutProxy, *jsClient) {
	proxy := newCutProxy(t, addr)
	base := "http://" + proxy.Addr()
	return proxy, startJSClient(t, runtime, base, base+"/ws", fastBackoff)
}

// startJSClient loads base/client.js into runtime and creates a Client on
// url with options.
func startJSClient(t *testing.T, runtime, base, url string, options map[string]any) *jsClient {
	t.Helper()
	c := &jsClient{t: t, name: runtime, events: make(chan jsEvent, 1<<16)}
	switch runtime {
	case "node-ws":
		c.send = startClientNode(t, base, "ws", c.deliver)
	case "node-websocket":
		c.send = startClientNode(t, base, "global", c.deliver)
	case "chromium":
		c.send, c.network = startClientPage(t, base, c.deliver)
	default:
		t.Fatalf("no runtime %q", runtime)
	}
	c.do("new", map[string]any{"url": url, "options": options})
	return c
}

// deliver takes one event line from the runtime. It never blocks (the
// Chromium listener must not): the channel has room for every event a test
// makes.
func (c *jsClient) deliver(line []byte) {
	var e jsEvent
	if err := json.Unmarshal(line, &e); err != nil {
		return
	}
	select {
	case c.events <- e:
	default:
	}
}

func (c *jsClient) do(cmd string, args map[string]any) {
	if args == nil {
		args = map[string]any{}
	}
	args["cmd"] = cmd
	c.send(args)
}

// next returns the client's next event; a "fatal" from the harness or no
// event within clientWait fails the test.
func (c *jsClient) next() jsEvent {
	c.t.Helper()
	select {
	case e := <-c.events:
		c.seen = append(c.seen, e.String())
		if e.Ev == "fatal" {
			c.t.Fatalf("%s: the harness failed: %s", c.name, e.Message)
		}
		return e
	case <-time.After(clientWait):
		c.t.Fatalf("%s: no event within %v; events so far:\n%s", c.name, clientWait, strings.Join(c.seen, "\n"))
	}
	return jsEvent{}
}

// until returns the next event named ev, passing over the others
// (returned too, in order).
func (c *jsClient) until(ev string) (jsEvent, []jsEvent) {
	c.t.Helper()
	var skipped []jsEvent
	for {
		e := c.next()
		if e.Ev == ev {
			return e, skipped
		}
		skipped = append(skipped, e)
	}
}

// expect returns the next event, failing the test unless it is named ev.
func (c *jsClient) expect(ev string) jsEvent {
	c.t.Helper()
	e := c.next()
	if e.Ev != ev {
		c.t.Fatalf("%s: got %s, want a %q event; events so far:\n%s", c.name, e, ev, strings.Join(c.seen, "\n"))
	}
	return e
}

// startClientNode runs interop/node/client-js-peer.mjs against base with
// npm ws ("ws") or Node's WebSocket ("global"); it returns how to send it
// commands.
func startClientNode(t *testing.T, base, impl string, deliver func([]byte)) func(map[string]any) {
	t.Helper()
	dir := nodeDir(t)
	var args []string
	if impl == "global" {
		out, err := exec.Command(nodePath(t), "-p", "process.versions.node").Output()
		if err != nil {
			t.Fatal(err)
		}
		if major, _, _ := strings.Cut(strings.TrimSpace(string(out)), "."); major == "20" || major == "21" {
			args = append(args, "--experimental-websocket") // Node 20: the WebSocket global is behind a flag
		}
	}
	args = append(args, "client-js-peer.mjs", base, impl)
	cmd := exec.Command(nodePath(t), args...)
	cmd.Dir = dir
	stdin, stdout, stderr := startPiped(t, cmd)
	ready := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		first := true
		for sc.Scan() {
			if first {
				first = false
				close(ready)
				continue
			}
			deliver(append([]byte(nil), sc.Bytes()...))
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // the peer closes its client and exits when stdin closes
		select {
		case <-exited:
		case <-time.After(waitFor):
			cmd.Process.Kill()
		}
		cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Logf("node client-js-peer.mjs stderr:\n%s", s)
		}
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("node client-js-peer.mjs exited before loading /client.js: %s", stderr.String())
	case <-time.After(clientWait):
		t.Fatalf("node client-js-peer.mjs did not load /client.js within %v", clientWait)
	}
	var mu sync.Mutex
	return func(cmd map[string]any) {
		line, err := json.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			t.Fatalf("node client-js-peer.mjs: writing a command: %v (stderr: %s)", err, stderr.String())
		}
	}
}

// startClientPage opens base/healthz (a page of the server's origin) in
// headless Chromium, imports base/client.js there as a page would, and
// loads the harness; events come back as console messages.
func startClientPage(t *testing.T, base string, deliver func([]byte)) (send func(map[string]any), network func(online bool)) {
	t.Helper()
	harness, err := os.ReadFile(filepath.Join("node", "client-js-harness.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := startBrowser(t, base+"/healthz")
	const prefix = "rally-client "
	chromedp.Listen(ctx, func(ev any) {
		e, ok := ev.(*runtime.EventConsoleAPICalled)
		if !ok || len(e.Args) == 0 {
			return
		}
		var s string
		if json.Unmarshal([]byte(e.Args[0].Value), &s) != nil {
			return
		}
		if line, ok := strings.CutPrefix(s, prefix); ok {
			deliver([]byte(line))
		}
	})
	load := `(async () => {
  const { Client } = await import("/client.js");
  const { harness } = await import("data:text/javascript;base64,` + base64.StdEncoding.EncodeToString(harness) + `");
  window.rallyHarness = harness(Client, (o) => console.log(` + strconv.Quote(prefix) + ` + JSON.stringify(o)));
  return true;
})()`
	step, cancel := context.WithTimeout(ctx, clientWait)
	defer cancel()
	if _, err := chromedp.Run(step, chromedp.Evaluate[bool](load, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("chromium: loading /client.js: %v", err)
	}
	send = func(cmd map[string]any) {
		line, err := json.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		step, cancel := context.WithTimeout(ctx, clientWait)
		defer cancel()
		if _, err := chromedp.Run(step, chromedp.Evaluate[bool]("rallyHarness("+string(line)+")")); err != nil {
			t.Fatalf("chromium: %s: %v", line, err)
		}
	}
	network = func(online bool) {
		step, cancel := context.WithTimeout(ctx, clientWait)
		defer cancel()
		if _, err := chromedp.Call(step, cdpnetwork.OverrideNetworkState, cdpnetwork.OverrideNetworkStateParams{
			Offline: !online, DownloadThroughput: -1, UploadThroughput: -1,
		}); err != nil {
			t.Fatalf("chromium: taking the network %s: %v", map[bool]string{true: "online", false: "offline"}[online], err)
		}
	}
	return send, network
}

// rallyServe is one `rally serve` in the test process.
type rallyServe struct {
	addr string
	stop func()
}

// startRallyServe serves cfg, in mode, on a loopback port until stop or
// the end of t. Once stop returns, the server has shut down: its
// connections were reported closed, or cut.
func startRallyServe(t *testing.T, mode serverMode, cfg server.Config) *rallyServe {
	t.Helper()
	cfg.EventLoop = mode.eventLoop
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.HandshakeRate = -1 // a reconnecting client makes many handshakes
	srv, err := server.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	var once sync.Once
	s := &rallyServe{addr: ln.Addr().String()}
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("rally serve: %v", err)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// publishHTTP publishes data (JSON) on topic through the server's HTTP
// API, as a backend would, and returns the answer's body.
func publishHTTP(t *testing.T, addr, topic string, data any) string {
	t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	status, body := httpPost(addr, "/publish/"+topic, b)
	if status != 200 {
		t.Fatalf("POST /publish/%s: %d %s", topic, status, body)
	}
	return body
}

// testAPIKey is the API key of test servers that need one.
const testAPIKey = "interop-api-key"

// httpPost posts a JSON body (with the test API key); it is safe to call
// from any goroutine.
func httpPost(addr, path string, body []byte) (int, string) {
	req, err := http.NewRequest("POST", "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
