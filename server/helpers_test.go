package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/slowness"
)

// testServer is a server on a loopback port, shut down when the test ends.
type testServer struct {
	*Server
	http string // http://127.0.0.1:PORT
	ws   string // ws://127.0.0.1:PORT
	stop func()
}

// testClusterSecret signs the messages between the nodes of tests that
// give none of their own.
const testClusterSecret = "test cluster secret, 32 bytes..."

func serve(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.NATS.enabled() && cfg.NATS.ClusterSecret == "" {
		cfg.NATS.ClusterSecret = testClusterSecret
	}
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
	if cfg.Addr == "" {
		cfg.Addr = ln.Addr().String()
	}
	cfg.EventLoop = cfg.EventLoop || eventLoopUnderTest
	s, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	ts := &testServer{Server: s, http: "http://" + ln.Addr().String(), ws: "ws://" + ln.Addr().String()}
	stopped := false
	ts.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(ts.stop)
	return ts
}

// client is a /ws client for tests.
type client struct {
	t testing.TB
	c *rally.Conn
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), slowness.Scale(20*time.Second))
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, url string, opts *rally.DialOptions) *client {
	t.Helper()
	c, _, err := rally.Dial(testContext(t), url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", strings.SplitN(url, "?", 2)[0], err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &client{t: t, c: c}
}

// send writes one text message: a string as it is, anything else as JSON.
func (c *client) send(v any) {
	c.t.Helper()
	var b []byte
	if s, ok := v.(string); ok {
		b = []byte(s)
	} else {
		b, _ = json.Marshal(v)
	}
	if err := c.c.Write(testContext(c.t), rally.Text, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next reads the next message as raw JSON text.
func (c *client) next() string {
	c.t.Helper()
	typ, p, err := c.c.Read(testContext(c.t))
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if typ != rally.Text {
		c.t.Fatalf("read a %v message, want text", typ)
	}
	return string(p)
}

// expect reads the next message and compares it with want, both as JSON
// values.
func (c *client) expect(want string) {
	c.t.Helper()
	got := c.next()
	if !sameJSON(got, want) {
		c.t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// closed reads until the connection ends and returns the close code the
// server sent.
func (c *client) closed() uint16 {
	c.t.Helper()
	for {
		_, _, err := c.c.Read(testContext(c.t))
		if err == nil {
			continue
		}
		var ce *rally.CloseError
		if !errors.As(err, &ce) {
			c.t.Fatalf("read ended with %v, not a close", err)
		}
		return ce.Code
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// metric returns the value of the sample named by series (name and
// labels as the text format writes them, e.g. `rally_publishes_total{source="ws"}`),
// or -1 if there is none.
func metric(t testing.TB, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			json.Unmarshal([]byte(v), &f)
			return f
		}
	}
	return -1
}

func post(t testing.TB, url, contentType, auth string, body []byte) (int, string) {
	t.Helper()
	return httpDo(t, "POST", url, contentType, auth, body)
}

// httpDo makes an HTTP request and returns its status and body.
func httpDo(t testing.TB, method, url, contentType, auth string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(string(body)))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pollUntil asks done until it holds, for what only a poll can ask (a
// metric, the budget's charge, another node's answer), failing with what
// done last described after 20 s scaled by the machine's measured load.
func pollUntil(t testing.TB, done func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(slowness.Scale(20 * time.Second))
	for {
		ok, what := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
