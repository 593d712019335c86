package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rallyws/rally"
)

// permessage-deflate (RFC 7692) against real peers: npm ws both ways,
// headless Chromium's own offer, Python websockets both ways. Every
// exchange goes through a wireTap, so the tests also state that compressed
// frames (RSV1) flowed in each direction.

// deflateMessages are the messages of every exchange: text and binary,
// below and above the usual 1 KiB threshold, one over 64 KiB, repeats
// (which context takeover shortens) and one that does not compress.
func deflateMessages() []struct {
	binary bool
	data   []byte
} {
	var msgs []struct {
		binary bool
		data   []byte
	}
	add := func(binary bool, b []byte) {
		msgs = append(msgs, struct {
			binary bool
			data   []byte
		}{binary, b})
	}
	for i, n := range []int{5, 100, 1500, 5000, 5000, 70000} {
		add(false, jsonText(i, n))
	}
	add(true, bytes.Repeat([]byte{0, 1, 2, 3, 0xff}, 2000))
	noise := make([]byte, 3000)
	x := uint32(7)
	for i := range noise {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		noise[i] = byte(x)
	}
	add(true, noise)
	add(false, []byte(strings.Repeat("héllo wörld € 😀 ", 200)))
	return msgs
}

// jsonText returns n bytes of JSON-like text.
func jsonText(seed, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"seq":%d,"user":"u%d","text":"message %d"},`, seed*100+i, (seed+i)%13, i)
	}
	return b.Bytes()[:n]
}

// compressedFrames counts the frames of l so far whose RSV1 bit is set,
// and all its frames.
func compressedFrames(l *wireLog) (compressed, all int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.frames {
		var b0 byte
		if _, err := fmt.Sscanf(f, "%02x", &b0); err != nil {
			continue
		}
		all++
		if b0&0x40 != 0 {
			compressed++
		}
	}
	return compressed, all
}

// checkBothWaysCompressed fails unless compressed frames went both ways
// through tap.
func checkBothWaysCompressed(t *testing.T, tap *wireTap) {
	t.Helper()
	for _, d := range []struct {
		name string
		log  *wireLog
	}{{"client to server", tap.c2s}, {"server to client", tap.s2c}} {
		if z, all := compressedFrames(d.log); z == 0 {
			t.Errorf("%s: %d frames, none compressed (RSV1)", d.name, all)
		}
	}
}

// rallyDeflateEcho serves a rally echo server in mode with compression
// opts and returns its address.
func rallyDeflateEcho(t *testing.T, mode serverMode, opts *rally.CompressionOptions) string {
	t.Helper()
	ws := &rally.Server{
		Options: &rally.AcceptOptions{Compression: opts, InsecureSkipOriginCheck: true},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := writeMessage(ctx, c, typ, p); err != nil {
				t.Logf("echo: %v", err)
			}
		},
		Close: func(c *rally.Conn, ce *rally.CloseError) {
			if ce.Code != rally.CloseNormal {
				t.Logf("the rally server's connection ended with %v", ce)
			}
		},
	}
	return serveRally(t, mode, ws, nil).Listener.Addr().String()
}

// writeMessage sends p as one message: with Write, or, above the
// streaming Writer's 32 KiB buffer, with a Writer in three pieces, so that
// the peer gets a compressed message in several fragments (RSV1 on the
// first only).
func writeMessage(ctx context.Context, c *rally.Conn, typ rally.MessageType, p []byte) error {
	if len(p) <= 32<<10 {
		return c.Write(ctx, typ, p)
	}
	w, err := c.Writer(ctx, typ)
	if err != nil {
		return err
	}
	third := len(p) / 3
	for _, part := range [][]byte{p[:third], p[third : 2*third], p[2*third:]} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return w.Close()
}

// checkCompressedFragments fails unless l carried a compressed message in
// fragments: a first frame with RSV1 and without FIN.
func checkCompressedFragments(t *testing.T, name string, l *wireLog) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.frames {
		var b0 byte
		if _, err := fmt.Sscanf(f, "%02x", &b0); err == nil && b0&0xc0 == 0x40 && b0&0x0f != 0 {
			return
		}
	}
	t.Errorf("%s: no compressed message in fragments (RSV1 without FIN on a first frame)", name)
}

// rallyClientEchoes dials url with opts, checks the negotiated extension
// starts with want, and sends every message expecting it back.
func rallyClientEchoes(t *testing.T, url string, opts *rally.DialOptions, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, resp, err := rally.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.CloseNow()
	if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != want {
		t.Errorf("negotiated %q, want %q", got, want)
	}
	for i, m := range deflateMessages() {
		typ := rally.Text
		if m.binary {
			typ = rally.Binary
		}
		if err := writeMessage(ctx, c, typ, m.data); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		gotType, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if gotType != typ || !bytes.Equal(got, m.data) {
			t.Fatalf("message %d (%d bytes) came back as %v of %d bytes that differ", i, len(m.data), gotType, len(got))
		}
	}
	if err := c.Close(rally.CloseNormal, ""); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestRallyClientTalksCompressedToNpmWsServer(t *testing.T) {
	node := startNode(t, "interop-deflate.mjs")
	cases := []struct {
		name   string
		ws     map[string]any
		client *rally.CompressionOptions
		answer string
	}{
		{"Defaults", map[string]any{"threshold": 0}, nil, "permessage-deflate"},
		{"NoContextTakeoverBothWays", map[string]any{"serverNoContextTakeover": true, "clientNoContextTakeover": true, "threshold": 0}, nil, "permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
		{"ClientAsksNoServerContext", map[string]any{"threshold": 0}, &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: -1}, "permessage-deflate; server_no_context_takeover"},
		{"Windows9", map[string]any{"serverMaxWindowBits": 9, "clientMaxWindowBits": 9, "threshold": 0}, nil, "permessage-deflate; client_max_window_bits=9; server_max_window_bits=9"},
		{"Windows12AskedByTheClient", map[string]any{"threshold": 0}, &rally.CompressionOptions{ServerMaxWindowBits: 12, ClientMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"},
		{"Windows15AndWsThreshold", map[string]any{"serverMaxWindowBits": 15, "clientMaxWindowBits": 15}, &rally.CompressionOptions{ClientNoContextTakeover: true}, "permessage-deflate; client_no_context_takeover; client_max_window_bits=15; server_max_window_bits=15"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := node.call(t, "listen", map[string]any{"deflate": tc.ws})
			tap := newWireTap(t, fmt.Sprintf("127.0.0.1:%d", m.Port))
			rallyClientEchoes(t, "ws://"+tap.Addr()+"/", &rally.DialOptions{Compression: tc.client}, tc.answer)
			checkBothWaysCompressed(t, tap)
			checkCompressedFragments(t, "rally client to npm ws", tap.c2s)
		})
	}
}

func TestNpmWsClientTalksCompressedToRallyServer(t *testing.T) {
	node := startNode(t, "interop-deflate.mjs")
	cases := []struct {
		name   string
		server *rally.CompressionOptions
		ws     map[string]any
		answer string
	}{
		{"Defaults", &rally.CompressionOptions{}, map[string]any{"threshold": 0}, "permessage-deflate"},
		{"ServerNoContextTakeover", &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: 100}, map[string]any{"threshold": 0}, "permessage-deflate; server_no_context_takeover"},
		{"ClientNoContextTakeover", &rally.CompressionOptions{ClientNoContextTakeover: true}, map[string]any{"threshold": 0}, "permessage-deflate; client_no_context_takeover"},
		{"WsAsksNoContextBothWays", &rally.CompressionOptions{}, map[string]any{"serverNoContextTakeover": true, "clientNoContextTakeover": true, "threshold": 0}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
		{"Windows9", &rally.CompressionOptions{ServerMaxWindowBits: 9, ClientMaxWindowBits: 9}, map[string]any{"threshold": 0}, "permessage-deflate; server_max_window_bits=9; client_max_window_bits=9"},
		{"Windows12AskedByWs", &rally.CompressionOptions{}, map[string]any{"serverMaxWindowBits": 12, "clientMaxWindowBits": 12, "threshold": 0}, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"},
		{"WsDefaultThreshold", &rally.CompressionOptions{Level: 6}, map[string]any{"serverMaxWindowBits": 15}, "permessage-deflate; server_max_window_bits=15"},
	}
	inModes(t, func(t *testing.T, mode serverMode) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tap := newWireTap(t, rallyDeflateEcho(t, mode, tc.server))
				conn := node.call(t, "connect", map[string]any{"url": "ws://" + tap.Addr() + "/", "deflate": tc.ws}).Conn
				events := node.events(conn)
				next := func() nodeMsg {
					select {
					case m := <-events:
						return m
					case <-time.After(waitFor):
						t.Fatal("npm ws client: no event")
						return nodeMsg{}
					}
				}
				if m := next(); m.Ev != "open" || m.Message != tc.answer {
					t.Fatalf("npm ws client: %+v, want open with %q", m, tc.answer)
				}
				for i, msg := range deflateMessages() {
					parts := 1
					if len(msg.data) > 32<<10 {
						parts = 3 // a compressed message in fragments, from ws to rally
					}
					if r := node.call(t, "send", map[string]any{"conn": conn, "data": hex.EncodeToString(msg.data), "binary": msg.binary, "parts": parts}); r.Error != "" {
						t.Fatalf("message %d: send: %s", i, r.Error)
					}
					m := next()
					got, _ := hex.DecodeString(m.Data)
					if m.Ev != "message" || m.Binary != msg.binary || !bytes.Equal(got, msg.data) {
						t.Fatalf("message %d (%d bytes): npm ws got %s", i, len(msg.data), renderNode(m))
					}
				}
				node.call(t, "close", map[string]any{"conn": conn})
				if m := next(); m.Ev != "close" || m.Code != 1000 {
					t.Errorf("npm ws client: %s, want close 1000", renderNode(m))
				}
				checkBothWaysCompressed(t, tap)
				checkCompressedFragments(t, "rally server to npm ws", tap.s2c)
				checkCompressedFragments(t, "npm ws to rally server", tap.c2s)
			})
		}
	})
}

// deflatePage echoes messages with the rally server at the URL it is
// given, as the browser compresses them.
const deflatePage = `<!doctype html>
<meta charset="utf-8">
<title>rally deflate interop</title>
<script>
function json(n) {
  let s = "";
  for (let i = 0; s.length < n; i++) s += '{"seq":' + i + ',"user":"u' + (i % 13) + '","text":"hello"},';
  return s.slice(0, n);
}
window.echo = async (url) => {
  try {
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error("the connection failed")); });
    const sent = [json(10), json(3000), json(3000), json(200000), new Uint8Array(5000).fill(7).buffer];
    const r = { extensions: ws.extensions, equal: [] };
    for (const m of sent) {
      const got = new Promise((resolve) => {
        ws.onmessage = (e) => resolve(e.data);
        ws.onclose = (e) => resolve({ closed: e.code, reason: e.reason });
      });
      ws.send(m);
      const g = await got;
      if (g && g.closed) return { error: "closed " + g.closed + " " + g.reason, extensions: ws.extensions, equal: r.equal };
      if (typeof m === "string") r.equal.push(g === m);
      else { const a = new Uint8Array(m), b = new Uint8Array(g); r.equal.push(a.length === b.length && a.every((v, i) => v === b[i])); }
    }
    const closed = new Promise((resolve) => { ws.onclose = (e) => resolve({ code: e.code, wasClean: e.wasClean }); });
    ws.close(1000);
    r.close = await closed;
    return r;
  } catch (e) {
    return { error: String(e) };
  }
};
</script>
`

func TestChromiumNegotiatesCompressionWithRallyServer(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(deflatePage))
	}))
	t.Cleanup(page.Close)
	ctx := startBrowser(t, page.URL+"/")
	inModes(t, func(t *testing.T, mode serverMode) {
		for _, tc := range []struct {
			name   string
			opts   *rally.CompressionOptions
			answer string
		}{
			{"ContextTakeover", &rally.CompressionOptions{}, "permessage-deflate"},
			{"ServerNoContextTakeoverAsRallyServe", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate; server_no_context_takeover"},
			{"SmallWindows", &rally.CompressionOptions{ServerMaxWindowBits: 10, ClientMaxWindowBits: 9, Threshold: -1}, "permessage-deflate; server_max_window_bits=10; client_max_window_bits=9"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tap := newWireTap(t, rallyDeflateEcho(t, mode, tc.opts))
				var r struct {
					Extensions string `json:"extensions"`
					Equal      []bool `json:"equal"`
					Close      struct {
						Code     int  `json:"code"`
						WasClean bool `json:"wasClean"`
					} `json:"close"`
					Error string `json:"error"`
				}
				evalPage(t, ctx, &r, fmt.Sprintf("echo(%q)", "ws://"+tap.Addr()+"/"))
				if r.Error != "" || r.Extensions != tc.answer {
					t.Fatalf("page saw %+v, want extensions %q", r, tc.answer)
				}
				if len(r.Equal) != 5 || strings.Contains(fmt.Sprint(r.Equal), "false") {
					t.Errorf("echoes equal: %v, want 5 true", r.Equal)
				}
				if r.Close.Code != 1000 || !r.Close.WasClean {
					t.Errorf("close %+v, want 1000, clean", r.Close)
				}
				checkBothWaysCompressed(t, tap)
			})
		}
	})
}

// pythonDeflate is Python websockets (compression on by default) as a
// client of an echo server (argv: client URL, prints one JSON object) or
// as an echo server (argv: server, prints {"port": N}, serves until stdin
// closes).
const pythonDeflate = `
import asyncio, json, sys
import websockets

def messages():
    out = []
    for i, n in enumerate([5, 100, 1500, 5000, 5000, 70000]):
        s = ""
        j = 0
        while len(s) < n:
            s += '{"seq":%d,"user":"u%d","text":"message %d"},' % (i * 100 + j, (i + j) % 13, j)
            j += 1
        out.append(s[:n])
    out.append(bytes([0, 1, 2, 3, 255]) * 2000)
    out.append("héllo wörld € 😀 " * 200)
    return out

async def client(url):
    async with websockets.connect(url, open_timeout=10, close_timeout=5, max_size=None) as ws:
        r = {"extensions": ws.response_headers.get("Sec-WebSocket-Extensions", ""), "equal": []}
        for m in messages():
            await ws.send(m)
            got = await asyncio.wait_for(ws.recv(), 10)
            r["equal"].append(got == m)
    r["close_code"] = ws.close_code
    print(json.dumps(r), flush=True)

async def echo(ws, path=None):
    try:
        async for m in ws:
            await ws.send(m)
    except websockets.ConnectionClosed:
        pass

async def server():
    async with websockets.serve(echo, "127.0.0.1", 0, max_size=None) as s:
        print(json.dumps({"port": s.sockets[0].getsockname()[1]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

if sys.argv[1] == "client":
    asyncio.run(client(sys.argv[2]))
else:
    asyncio.run(server())
`

func TestPythonWebsocketsClientTalksCompressedToRallyServer(t *testing.T) {
	checkPython(t)
	inModes(t, func(t *testing.T, mode serverMode) {
		for _, tc := range []struct {
			name   string
			opts   *rally.CompressionOptions
			answer string
		}{
			// websockets offers "permessage-deflate; client_max_window_bits".
			{"ContextTakeover", &rally.CompressionOptions{Threshold: -1}, "permessage-deflate"},
			{"NoContextTakeoverBothWays", &rally.CompressionOptions{ServerNoContextTakeover: true, ClientNoContextTakeover: true}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
			{"Windows11", &rally.CompressionOptions{ServerMaxWindowBits: 11, ClientMaxWindowBits: 11}, "permessage-deflate; server_max_window_bits=11; client_max_window_bits=11"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tap := newWireTap(t, rallyDeflateEcho(t, mode, tc.opts))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, pythonPath, "-c", pythonDeflate, "client", "ws://"+tap.Addr()+"/").CombinedOutput()
				if err != nil {
					t.Fatalf("python client: %v\n%s", err, out)
				}
				var r struct {
					Extensions string `json:"extensions"`
					Equal      []bool `json:"equal"`
					CloseCode  int    `json:"close_code"`
				}
				if err := json.Unmarshal(out, &r); err != nil {
					t.Fatalf("python client printed %q: %v", out, err)
				}
				if r.Extensions != tc.answer || len(r.Equal) != 8 || strings.Contains(fmt.Sprint(r.Equal), "false") || r.CloseCode != 1000 {
					t.Errorf("python client saw %+v, want %q, 8 equal echoes, close 1000", r, tc.answer)
				}
				checkBothWaysCompressed(t, tap)
			})
		}
	})
}

func TestRallyClientTalksCompressedToPythonWebsocketsServer(t *testing.T) {
	checkPython(t)
	cmd := exec.Command(pythonPath, "-c", pythonDeflate, "server")
	stdin, stdout, stderr := startPiped(t, cmd)
	t.Cleanup(func() {
		stdin.Close() // the server ends when stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitFor):
			cmd.Process.Kill()
			<-done
		}
	})
	ports := make(chan int, 1)
	go func() {
		var m struct {
			Port int `json:"port"`
		}
		sc := bufio.NewScanner(stdout)
		if sc.Scan() && json.Unmarshal(sc.Bytes(), &m) == nil {
			ports <- m.Port
		}
		close(ports)
		for sc.Scan() {
		}
	}()
	var port int
	select {
	case port = <-ports:
	case <-time.After(30 * time.Second):
	}
	if port == 0 {
		t.Fatalf("the python server did not say its port (stderr: %s)", stderr.String())
	}
	for _, tc := range []struct {
		name   string
		opts   *rally.CompressionOptions
		answer string
	}{
		// websockets answers with 12-bit windows unless asked for less.
		{"Defaults", nil, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"},
		{"ServerNoContextTakeover", &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: -1}, "permessage-deflate; server_no_context_takeover; server_max_window_bits=12; client_max_window_bits=12"},
		{"Windows10", &rally.CompressionOptions{ServerMaxWindowBits: 10, ClientMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=10; client_max_window_bits=10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap := newWireTap(t, net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
			rallyClientEchoes(t, "ws://"+tap.Addr()+"/", &rally.DialOptions{Compression: tc.opts}, tc.answer)
			checkBothWaysCompressed(t, tap)
		})
	}
}

// evalPage evaluates expr (a promise) in the page and decodes its result.
func evalPage(t *testing.T, ctx context.Context, out any, expr string) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(step, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", expr, raw, err)
	}
}
