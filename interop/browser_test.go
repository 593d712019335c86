package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserPage is the test page: window.run(name, ...args) runs one case
// against the rally server at /ws and resolves to what the page saw.
const browserPage = `<!doctype html>
<meta charset="utf-8">
<title>rally interop</title>
<script>
const url = "ws://" + location.host + "/ws";

function connect(binaryType) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = binaryType || "arraybuffer";
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("the connection failed"));
  });
}

// next resolves to the next message's data, or to the close if it comes first.
function next(ws) {
  return new Promise((resolve) => {
    ws.onmessage = (e) => resolve(e.data);
    ws.onclose = (e) => resolve({ code: e.code, reason: e.reason, wasClean: e.wasClean });
  });
}

function closed(ws) {
  return new Promise((resolve) => {
    ws.onclose = (e) => resolve({ code: e.code, reason: e.reason, wasClean: e.wasClean });
  });
}

async function bytesOf(data) {
  if (data instanceof Blob) data = await data.arrayBuffer();
  return Array.from(new Uint8Array(data));
}

function pattern(n) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7) & 0xff;
  return b;
}

const cases = {
  async connect() {
    const ws = await connect();
    const r = { readyState: ws.readyState, protocol: ws.protocol, extensions: ws.extensions };
    const c = closed(ws);
    ws.close(1000);
    r.close = await c;
    return r;
  },
  async echo(kind) {
    const ws = await connect(kind === "blob" ? "blob" : "arraybuffer");
    let sent;
    switch (kind) {
      case "text": sent = "héllo wörld € 😀 ✓"; break;
      case "text-1MiB": sent = "ab€".repeat(349525) + "x"; break;
      case "arraybuffer": sent = pattern(256).buffer; break;
      case "arraybuffer-1MiB": sent = pattern(1 << 20).buffer; break;
      case "blob": sent = new Blob([pattern(300)]); break;
    }
    const p = next(ws);
    ws.send(sent);
    const got = await p;
    const r = { type: Object.prototype.toString.call(got) };
    if (typeof sent === "string") {
      r.equal = got === sent;
      r.length = got.length;
      r.utf8Bytes = new TextEncoder().encode(got).length;
    } else {
      const a = await bytesOf(sent), b = await bytesOf(got);
      r.equal = a.length === b.length && a.every((v, i) => v === b[i]);
      r.length = b.length;
    }
    const c = closed(ws);
    ws.close(1000);
    r.close = await c;
    return r;
  },
  async close(code, reason) {
    const ws = await connect();
    const c = closed(ws);
    if (code === 0) ws.close(); else ws.close(code, reason);
    return await c;
  },
  async serverClose(command) {
    const ws = await connect();
    const c = next(ws);
    ws.send(command);
    return await c;
  },
};

window.run = async (name, ...args) => {
  try {
    return await cases[name](...args);
  } catch (e) {
    return { error: String(e) };
  }
};
</script>
`

// chromiumBinary is the Chromium the tests run: $CHROMIUM, else
// /usr/bin/chromium.
func chromiumBinary() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// chromiumPath returns the Chromium binary, failing t when it is missing.
func chromiumPath(t *testing.T) string {
	p := chromiumBinary()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Chromium not found at %s: install Debian's chromium (`bash interop/setup.sh`) or set $CHROMIUM", p)
	}
	return p
}

// chromiumOptions are how the tests start Chromium: headless, quiet, with
// its profile in dir, and the extra flags given.
func chromiumOptions(path, dir string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	return append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
	}, extra...)
}

// browser is the headless Chromium the tests share. TestMain starts it
// before the tests and stops it after them: starting one per test cost
// some 2.7 s (1.6 s of CPU) each time, more than most of the tests
// themselves, and a browser there before every test and after it is
// outside what the leak checks count. Each test gets a tab in a browser
// context of its own (startBrowser): no cookies, storage or cache of
// another test.
var browser struct {
	ctx  context.Context // the first tab, which holds the browser; nil when it did not start
	err  error           // why it did not start
	stop func()
}

// startSharedBrowser starts the shared Chromium (when there is one: a
// missing binary fails the tests that need it, in startBrowser).
func startSharedBrowser() {
	path := chromiumBinary()
	if _, err := os.Stat(path); err != nil {
		return
	}
	dir, err := os.MkdirTemp("", "rally-interop-chromium-")
	if err != nil {
		browser.err = err
		return
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromiumOptions(path, dir)...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	browser.stop = func() {
		cancelCtx()
		cancelAlloc() // waits for the browser process to exit
		os.RemoveAll(dir)
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser and its first tab
		browser.err = err
		return
	}
	browser.ctx = ctx
}

// stopSharedBrowser stops the shared Chromium, if it was started.
func stopSharedBrowser() {
	if browser.stop != nil {
		browser.stop()
	}
}

// startBrowser opens the page at url in a new tab of the shared Chromium,
// in a browser context of its own, and closes both when t ends.
func startBrowser(t *testing.T, url string) context.Context {
	t.Helper()
	chromiumPath(t)
	if browser.ctx == nil {
		t.Fatalf("chromium: starting the browser: %v", browser.err)
	}
	limit, cancelLimit := context.WithTimeout(browser.ctx, 90*time.Second)
	ctx, cancelCtx := chromedp.NewContext(limit, chromedp.WithNewBrowserContext())
	t.Cleanup(func() {
		cancelCtx() // closes the tab and its browser context
		cancelLimit()
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatalf("chromium: opening the test page: %v", err)
	}
	return ctx
}

// run calls window.run(name, args...) in the page and decodes its result.
func run(t *testing.T, ctx context.Context, out any, name string, args ...any) {
	t.Helper()
	call := []string{strconv.Quote(name)}
	for _, a := range args {
		b, _ := json.Marshal(a)
		call = append(call, string(b))
	}
	expr := "run(" + strings.Join(call, ", ") + ")"
	step, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(step, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: the page did not answer within 30s", expr)
		}
		t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", expr, raw, err)
	}
}

type closeEvent struct {
	Code     int    `json:"code"`
	Reason   string `json:"reason"`
	WasClean bool   `json:"wasClean"`
	Error    string `json:"error"`
}

// TestChromiumTalksToRallyServer drives headless Chromium on a page that
// rally serves: connect, echo of text (outside ASCII too), ArrayBuffer,
// Blob and 1 MiB messages, close codes and reasons from both sides as the
// page's CloseEvent reports them; with the server in each mode.
func TestChromiumTalksToRallyServer(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		url, ends := echoServer(t, mode)
		ctx := startBrowser(t, url+"/")

		t.Run("connects without extensions or subprotocol", func(t *testing.T) {
			var r struct {
				ReadyState int        `json:"readyState"`
				Protocol   string     `json:"protocol"`
				Extensions string     `json:"extensions"`
				Close      closeEvent `json:"close"`
				Error      string     `json:"error"`
			}
			run(t, ctx, &r, "connect")
			// The browser offers permessage-deflate; this Server declines it (no
			// AcceptOptions.Compression: off by default, as npm ws; see deflate_test.go).
			if r.Error != "" || r.ReadyState != 1 || r.Protocol != "" || r.Extensions != "" {
				t.Errorf("page saw %+v, want open (1) with no protocol and no extensions", r)
			}
			if r.Close != (closeEvent{Code: 1000, WasClean: true}) {
				t.Errorf("CloseEvent %+v, want 1000, clean", r.Close)
			}
			if ce := serverEnd(t, ends); ce.Code != 1000 {
				t.Errorf("server saw %v, want 1000", ce)
			}
		})

		for _, c := range []struct {
			kind      string
			wantType  string
			wantLen   int
			wantBytes int // UTF-8 length, for text
		}{
			{"text", "[object String]", 18, 26},
			{"text-1MiB", "[object String]", 3*349525 + 1, 5*349525 + 1},
			{"arraybuffer", "[object ArrayBuffer]", 256, 0},
			{"arraybuffer-1MiB", "[object ArrayBuffer]", 1 << 20, 0},
			{"blob", "[object Blob]", 300, 0},
		} {
			t.Run("echoes "+c.kind, func(t *testing.T) {
				var r struct {
					Type      string     `json:"type"`
					Equal     bool       `json:"equal"`
					Length    int        `json:"length"`
					UTF8Bytes int        `json:"utf8Bytes"`
					Close     closeEvent `json:"close"`
					Error     string     `json:"error"`
				}
				run(t, ctx, &r, "echo", c.kind)
				if r.Error != "" || r.Type != c.wantType || !r.Equal || r.Length != c.wantLen || r.UTF8Bytes != c.wantBytes {
					t.Errorf("page saw %+v, want %s of length %d (%d UTF-8 bytes), equal to what it sent", r, c.wantType, c.wantLen, c.wantBytes)
				}
				if r.Close.Code != 1000 || !r.Close.WasClean {
					t.Errorf("CloseEvent %+v, want 1000, clean", r.Close)
				}
				serverEnd(t, ends)
			})
		}

		for _, c := range []struct {
			code   int
			reason string
			server uint16 // what the server reports
		}{
			{1000, "", 1000},
			{1000, "done ✓", 1000},
			{3000, "registered", 3000},
			{4999, strings.Repeat("r", 123), 4999},
			{0, "", 1005}, // close() with no code sends an empty body
		} {
			t.Run(fmt.Sprintf("page closes with %d and a reason of %d bytes", c.code, len(c.reason)), func(t *testing.T) {
				var r closeEvent
				run(t, ctx, &r, "close", c.code, c.reason)
				// rally echoes the page's code and reason.
				want := closeEvent{Code: c.code, Reason: c.reason, WasClean: true}
				if c.code == 0 {
					want.Code = 1005
				}
				if r != want {
					t.Errorf("CloseEvent %+v, want %+v", r, want)
				}
				if ce := serverEnd(t, ends); ce.Code != c.server || ce.Reason != c.reason {
					t.Errorf("server saw %d %q, want %d %q", ce.Code, ce.Reason, c.server, c.reason)
				}
			})
		}

		for _, c := range []struct {
			name    string
			command string
			want    closeEvent
			server  uint16
			reason  string // the server's reason, when it checks one
		}{
			{"server closes with 1000", "close 1000 bye", closeEvent{Code: 1000, Reason: "bye", WasClean: true}, 1000, ""},
			{"server closes with 1001", "close 1001 going away", closeEvent{Code: 1001, Reason: "going away", WasClean: true}, 1001, ""},
			{"server closes with 4000 and a reason outside ASCII", "close 4000 adiós €", closeEvent{Code: 4000, Reason: "adiós €", WasClean: true}, 4000, ""},
			// Chromium fails the connection with a close frame of 1002 (not
			// 1007, as ws and rally would) and reports 1006 to the page.
			{"server sends text that is not UTF-8", "bad-utf8", closeEvent{Code: 1006}, 1002, "Invalid UTF-8 in text frame"},
		} {
			t.Run(c.name, func(t *testing.T) {
				var r closeEvent
				run(t, ctx, &r, "serverClose", c.command)
				if r != c.want {
					t.Errorf("CloseEvent %+v, want %+v", r, c.want)
				}
				if ce := serverEnd(t, ends); ce.Code != c.server || (c.reason != "" && ce.Reason != c.reason) {
					t.Errorf("server saw %v, want %d %q", ce, c.server, c.reason)
				}
			})
		}
	})
}
