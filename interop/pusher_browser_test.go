package interop_test

import (
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/server"
)

// pusherPage is the page Chromium opens: pusher-js's dist/web bundle, and
// window.run(name, ...args) for the Go test to call.
const pusherPage = `<!doctype html><html><body>
<script src="/pusher.js"></script>
<script>
Pusher.logToConsole = false;
const seen = [];
let main;
function make(key, host, port) {
  return new Pusher(key, {cluster: 'mt1', wsHost: host, wsPort: port, forceTLS: false,
    enabledTransports: ['ws'], disableStats: true,
    channelAuthorization: {endpoint: '/auth', transport: 'ajax'}});
}
function state(p, want) {
  return new Promise((res) => {
    if (p.connection.state === want) return res(want);
    p.connection.bind('state_change', (s) => { if (s.current === want) res(want); });
  });
}
function subscribed(ch) {
  return new Promise((res, rej) => {
    ch.bind('pusher:subscription_succeeded', () => res('subscribed'));
    ch.bind('pusher:subscription_error', (e) => rej(new Error(JSON.stringify(e))));
  });
}
const cases = {
  async connect(key, host, port) {
    main = make(key, host, port);
    await state(main, 'connected');
    const pub = main.subscribe('news');
    const priv = main.subscribe('private-room');
    await Promise.all([subscribed(pub), subscribed(priv)]);
    for (const ch of [pub, priv]) ch.bind('update', (d) => seen.push(ch.name + ':' + d.n));
    return {socketId: main.connection.socket_id};
  },
  async seen(n) {
    while (seen.length < n) await new Promise((r) => setTimeout(r, 20));
    return seen;
  },
  async seenSoFar() { return seen; },
  async state(want) { return await state(main, want); },
  async overQuota(key, host, port) {
    const first = make(key, host, port);
    await state(first, 'connected');
    const second = make(key, host, port);
    const code = await new Promise((res) => second.connection.bind('error', (e) => res(e?.error?.data?.code ?? e?.data?.code)));
    second.disconnect(); first.disconnect();
    return code;
  },
};
window.run = async (name, ...args) => {
  try { return await cases[name](...args); } catch (e) { return {error: String(e)}; }
};
</script></body></html>`

// pusherTrigger triggers an event over rally's Pusher HTTP API, signed as
// Pusher's documentation says.
func pusherTrigger(t *testing.T, host string, app server.PusherApp, body string) {
	t.Helper()
	path := "/apps/" + app.ID + "/events"
	sum := md5.Sum([]byte(body))
	q := url.Values{"auth_key": {app.Key}, "auth_timestamp": {strconv.FormatInt(time.Now().Unix(), 10)},
		"auth_version": {"1.0"}, "body_md5": {hex.EncodeToString(sum[:])}}
	mac := hmac.New(sha256.New, []byte(app.Secret))
	io.WriteString(mac, "POST\n"+path+"\n"+q.Encode())
	q.Set("auth_signature", hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.Post("http://"+host+path+"?"+q.Encode(), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Fatalf("trigger: %d %s", resp.StatusCode, b)
	}
}

// servePusherPage serves pusherPage, pusher-js's browser bundle and the
// page's auth endpoint for pusherApp, and returns its URL.
func servePusherPage(t *testing.T) string {
	bundle := filepath.Join(nodeDir(t), "node_modules", "pusher-js", "dist", "web", "pusher.js")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pusher.js":
			http.ServeFile(w, r, bundle)
		case "/auth":
			r.ParseForm()
			mac := hmac.New(sha256.New, []byte(pusherApp.Secret))
			io.WriteString(mac, r.Form.Get("socket_id")+":"+r.Form.Get("channel_name"))
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"auth":"`+pusherApp.Key+`:`+hex.EncodeToString(mac.Sum(nil))+`"}`)
		default:
			io.WriteString(w, pusherPage)
		}
	}))
	t.Cleanup(page.Close)
	return page.URL
}

// pusher-js's browser bundle in headless Chromium, on both engines: public
// and private channels (signed by the page's own auth endpoint), events
// triggered over the HTTP API, the app's connection quota (4004), and
// pusher-js reconnecting by its own backoff when the server is stopped and
// started again, its subscriptions restored.
func TestPusherJSChromium(t *testing.T) {
	for _, eventLoop := range []bool{false, true} {
		t.Run(map[bool]string{false: "goroutines", true: "event-loop"}[eventLoop], func(t *testing.T) {
			small := server.PusherApp{ID: "small", Key: "small-key", Secret: "small-secret", MaxConnections: 1}
			cfg := server.Config{EventLoop: eventLoop, PusherApps: []server.PusherApp{pusherApp, small}}
			host, stop := startPusherServerAt(t, "127.0.0.1:0", cfg)
			ctx := startBrowser(t, servePusherPage(t)+"/")
			pageSeesAnEventTriggered(t, ctx, host, host)
			wsHost, wsPort, _ := strings.Cut(host, ":")
			port, _ := strconv.Atoi(wsPort)

			var code int
			run(t, ctx, &code, "overQuota", small.Key, wsHost, port)
			if code != 4004 {
				t.Errorf("second connection of an app limited to one: code %d, want 4004", code)
			}

			// Stop the server and start it again on the same port.
			stop()
			var st string
			run(t, ctx, &st, "state", "connecting")
			host, _ = startPusherServerAt(t, host, cfg)
			run(t, ctx, &st, "state", "connected")
			// pusher-js subscribes again by itself; the event may race its
			// resubscription, so trigger until the page has seen it.
			deadline := time.Now().Add(waitFor)
			for {
				pusherTrigger(t, host, pusherApp, `{"name":"update","channel":"private-room","data":"{\"n\":2}"}`)
				var again []string
				run(t, ctx, &again, "seenSoFar")
				if strings.Contains(strings.Join(again, ","), "private-room:2") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the restart the page saw only %v", again)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// pusher-js in headless Chromium on node A of two joined by NATS: an event
// triggered over node B's HTTP API, once, right after the page's
// subscriptions succeeded, reaches the page on both channels.
func TestPusherJSChromiumTwoNodes(t *testing.T) {
	natsPort := freePort(t)
	secret := "interop-cluster-secret-0123456789abcdef"
	a := startPusherServer(t, server.Config{Node: "a", PusherApps: []server.PusherApp{pusherApp},
		NATS: server.NATSConfig{Embedded: "127.0.0.1:" + strconv.Itoa(natsPort), ClusterSecret: secret}})
	b := startPusherServer(t, server.Config{Node: "b", PusherApps: []server.PusherApp{pusherApp},
		NATS: server.NATSConfig{URL: "nats://127.0.0.1:" + strconv.Itoa(natsPort), ClusterSecret: secret}})
	ctx := startBrowser(t, servePusherPage(t)+"/")
	pageSeesAnEventTriggered(t, ctx, a, b)
}

// pageSeesAnEventTriggered connects the page's pusher-js to the server at
// connectTo, subscribed to news and private-room, triggers one event on
// both channels through the HTTP API of the server at triggerOn (the same
// or another node), and checks that the page saw it once on each.
func pageSeesAnEventTriggered(t *testing.T, ctx context.Context, connectTo, triggerOn string) {
	t.Helper()
	wsHost, wsPort, _ := strings.Cut(connectTo, ":")
	port, _ := strconv.Atoi(wsPort)
	var conn struct {
		SocketID string `json:"socketId"`
		Error    string `json:"error"`
	}
	run(t, ctx, &conn, "connect", pusherApp.Key, wsHost, port)
	if conn.Error != "" || conn.SocketID == "" {
		t.Fatalf("connect to %s: %+v", connectTo, conn)
	}
	pusherTrigger(t, triggerOn, pusherApp, `{"name":"update","channels":["news","private-room"],"data":"{\"n\":1}"}`)
	var seen []string
	run(t, ctx, &seen, "seen", 2)
	if strings.Join(seen, ",") != "news:1,private-room:1" && strings.Join(seen, ",") != "private-room:1,news:1" {
		t.Fatalf("the page connected to %s saw %v of the event triggered on %s", connectTo, seen, triggerOn)
	}
}
