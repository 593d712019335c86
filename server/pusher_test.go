package server

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

var testApp = PusherApp{ID: "3", Key: "278d425bdf160c739803", Secret: "7ad3773142a6692b25b8"}

func pusherServe(t *testing.T, apps ...PusherApp) *testServer {
	t.Helper()
	if len(apps) == 0 {
		apps = []PusherApp{testApp}
	}
	return serve(t, Config{PusherApps: apps})
}

// pusherClient is a client of /app/{key}, connected, with its socket_id.
type pusherClient struct {
	*client
	socketID string
}

func pusherDial(t *testing.T, ts *testServer, key string) *pusherClient {
	t.Helper()
	return pusherDialWith(t, ts, key, nil)
}

func pusherDialWith(t *testing.T, ts *testServer, key string, opts *rally.DialOptions) *pusherClient {
	t.Helper()
	c := dial(t, ts.ws+"/app/"+key+"?protocol=7&client=js&version=8.4.0", opts)
	ev, _, data := pusherRead(t, c)
	if ev != "pusher:connection_established" {
		t.Fatalf("first event %q, want pusher:connection_established", ev)
	}
	var d struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}
	if err := json.Unmarshal([]byte(data), &d); err != nil || d.SocketID == "" || d.ActivityTimeout <= 0 {
		t.Fatalf("connection_established data %s", data)
	}
	return &pusherClient{c, d.SocketID}
}

// pusherRead reads one event: its name, channel and data (the JSON
// string's text when data is a string).
func pusherRead(t *testing.T, c *client) (event, channel, data string) {
	t.Helper()
	var m pusherMsg
	raw := c.next()
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("not an event: %s", raw)
	}
	data = string(m.Data)
	if len(m.Data) > 0 && m.Data[0] == '"' {
		json.Unmarshal(m.Data, &data)
	}
	return m.Event, m.Channel, data
}

func (c *pusherClient) expectEvent(event, channel string) string {
	c.t.Helper()
	ev, ch, data := pusherRead(c.t.(*testing.T), c.client)
	if ev != event || ch != channel {
		c.t.Fatalf("got %s on %q (%s), want %s on %q", ev, ch, data, event, channel)
	}
	return data
}

func (c *pusherClient) subscribe(app PusherApp, channel, channelData string) {
	c.t.Helper()
	d := map[string]string{"channel": channel}
	if isPrivate(channel) {
		msg := c.socketID + ":" + channel
		if isPresence(channel) {
			msg += ":" + channelData
			d["channel_data"] = channelData
		}
		d["auth"] = app.Key + ":" + app.sign(msg)
	}
	c.send(map[string]any{"event": "pusher:subscribe", "data": d})
}

// apiRequest makes a signed HTTP API request as the server SDKs do.
func apiRequest(t testing.TB, ts *testServer, app PusherApp, method, path string, query url.Values, body string) (int, string) {
	t.Helper()
	if query == nil {
		query = url.Values{}
	}
	query.Set("auth_key", app.Key)
	query.Set("auth_timestamp", strconv.FormatInt(time.Now().Unix(), 10))
	query.Set("auth_version", "1.0")
	if body != "" {
		sum := md5.Sum([]byte(body))
		query.Set("body_md5", hex.EncodeToString(sum[:]))
	}
	query.Set("auth_signature", app.sign(stringToSign(method, path, query)))
	return httpDo(t, method, ts.http+path+"?"+query.Encode(), "application/json", "", []byte(body))
}

// The signatures of the protocol, against values computed from Pusher's
// documented algorithm (HMAC-SHA256, hex) outside this code.
func TestPusherSignatureVectors(t *testing.T) {
	a := newPusherApp(testApp, nil)
	for _, c := range []struct{ msg, sig string }{
		{"1234.1234:private-foobar", "58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"},
		{`1234.1234:presence-foobar:{"user_id":10,"user_info":{"name":"Mr. Channels"}}`, "31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"},
		{`1234.1234::user::{"id":"12345"}`, "4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"},
	} {
		if !a.checkAuth(testApp.Key+":"+c.sig, c.msg) {
			t.Errorf("signature of %q refused", c.msg)
		}
		if a.checkAuth(testApp.Key+":"+"0"+c.sig[1:], c.msg) || a.checkAuth("otherkey:"+c.sig, c.msg) {
			t.Errorf("a wrong signature of %q accepted", c.msg)
		}
	}
	// The HTTP API's: POST /apps/3/events with this body at this time.
	body := `{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`
	q := url.Values{"auth_key": {testApp.Key}, "auth_timestamp": {"1353088179"}, "auth_version": {"1.0"},
		"body_md5":       {"ec365a775a4cd0599faeb73354201b6f"},
		"auth_signature": {"da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"}}
	r := httptest.NewRequest("POST", "/apps/3/events?"+q.Encode(), nil)
	if msg := a.checkRequest(r, []byte(body), time.Unix(1353088179+30, 0)); msg != "" {
		t.Errorf("documented request refused: %s", msg)
	}
	if msg := a.checkRequest(r, []byte(body), time.Unix(1353088179+601, 0)); !strings.Contains(msg, "Timestamp") {
		t.Errorf("request 601 s old: %q, want refused for its timestamp", msg)
	}
	if msg := a.checkRequest(r, []byte(body+" "), time.Unix(1353088179, 0)); !strings.Contains(msg, "body_md5") {
		t.Errorf("changed body: %q, want refused for body_md5", msg)
	}
}

func TestPusherConnect(t *testing.T) {
	ts := pusherServe(t)
	c := pusherDial(t, ts, testApp.Key)
	c.send(`{"event":"pusher:ping","data":{}}`)
	c.expectEvent("pusher:pong", "")

	// An unknown key: pusher:error 4001, then closed with 4001.
	u := dial(t, ts.ws+"/app/nokey?protocol=7", nil)
	ev, _, data := pusherRead(t, u)
	if ev != "pusher:error" || !strings.Contains(data, "4001") {
		t.Fatalf("unknown app: %s %s", ev, data)
	}
	if code := u.closed(); code != 4001 {
		t.Fatalf("unknown app closed with %d, want 4001", code)
	}
	// No protocol version.
	p := dial(t, ts.ws+"/app/"+testApp.Key, nil)
	if ev, _, data := pusherRead(t, p); ev != "pusher:error" || !strings.Contains(data, "4007") {
		t.Fatalf("no protocol: %s %s", ev, data)
	}
}

func TestPusherOverQuota(t *testing.T) {
	app := testApp
	app.MaxConnections = 1
	ts := pusherServe(t, app)
	pusherDial(t, ts, app.Key)
	c := dial(t, ts.ws+"/app/"+app.Key+"?protocol=7", nil)
	if ev, _, data := pusherRead(t, c); ev != "pusher:error" || !strings.Contains(data, "4004") {
		t.Fatalf("second connection: %s %s, want pusher:error 4004", ev, data)
	}
	if code := c.closed(); code != 4004 {
		t.Fatalf("closed with %d, want 4004", code)
	}
}

func TestPusherOverCapacity(t *testing.T) {
	ts := serve(t, Config{PusherApps: []PusherApp{testApp}, MaxConnections: 1})
	pusherDial(t, ts, testApp.Key)
	c := dial(t, ts.ws+"/app/"+testApp.Key+"?protocol=7", nil)
	if ev, _, data := pusherRead(t, c); ev != "pusher:error" || !strings.Contains(data, "4100") {
		t.Fatalf("past --max-connections: %s %s, want pusher:error 4100", ev, data)
	}
	if code := c.closed(); code != 4100 {
		t.Fatalf("closed with %d, want 4100", code)
	}
}

func TestPusherPublicAndPrivateChannels(t *testing.T) {
	ts := pusherServe(t)
	a := pusherDial(t, ts, testApp.Key)
	a.subscribe(testApp, "news", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "news")

	// A private channel with a wrong signature is refused.
	a.send(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": "private-x", "auth": testApp.Key + ":00"}})
	if data := a.expectEvent("pusher:subscription_error", "private-x"); !strings.Contains(data, "401") {
		t.Fatalf("subscription_error data %s", data)
	}
	a.expectEvent("pusher:error", "")
	a.subscribe(testApp, "private-x", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "private-x")

	// Events from the HTTP API reach subscribers, but for socket_id.
	b := pusherDial(t, ts, testApp.Key)
	b.subscribe(testApp, "news", "")
	b.expectEvent("pusher_internal:subscription_succeeded", "news")
	status, body := apiRequest(t, ts, testApp, "POST", "/apps/3/events", nil,
		`{"name":"e1","channels":["news","private-x"],"data":"{\"n\":1}","socket_id":"`+b.socketID+`","info":"subscription_count"}`)
	if status != 200 || !sameJSON(body, `{"channels":{"news":{"subscription_count":2},"private-x":{"subscription_count":1}}}`) {
		t.Fatalf("events: %d %s", status, body)
	}
	got := map[string]string{}
	for range 2 {
		ev, ch, data := pusherRead(t, a.client)
		got[ch] = ev + " " + data
	}
	if got["news"] != `e1 {"n":1}` || got["private-x"] != `e1 {"n":1}` {
		t.Fatalf("a got %v", got)
	}
	status, _ = apiRequest(t, ts, testApp, "POST", "/apps/3/batch_events", nil,
		`{"batch":[{"name":"e2","channel":"news","data":"two"}]}`)
	if status != 200 {
		t.Fatalf("batch_events: %d", status)
	}
	a.expectEvent("e2", "news")
	b.expectEvent("e2", "news") // b was left out of e1 only

	// Unsigned and badly signed requests are refused.
	if code, _ := post(t, ts.http+"/apps/3/events", "application/json", "", []byte(`{}`)); code != 401 {
		t.Fatalf("unsigned request: %d, want 401", code)
	}
	wrong := testApp
	wrong.Secret = "not the secret"
	if code, _ := apiRequest(t, ts, wrong, "POST", "/apps/3/events", nil, `{"name":"x","channel":"news","data":""}`); code != 401 {
		t.Fatalf("wrong secret: %d, want 401", code)
	}
	if code, _ := apiRequest(t, ts, testApp, "POST", "/apps/9/events", nil, `{}`); code != 404 {
		t.Fatalf("unknown app: %d, want 404", code)
	}

	// Channels and their counts.
	status, body = apiRequest(t, ts, testApp, "GET", "/apps/3/channels", url.Values{"filter_by_prefix": {"private-"}}, "")
	if status != 200 || !sameJSON(body, `{"channels":{"private-x":{}}}`) {
		t.Fatalf("channels: %d %s", status, body)
	}
	status, body = apiRequest(t, ts, testApp, "GET", "/apps/3/channels/news", url.Values{"info": {"subscription_count"}}, "")
	if status != 200 || !sameJSON(body, `{"occupied":true,"subscription_count":2}`) {
		t.Fatalf("channel: %d %s", status, body)
	}
}

func TestPusherPresence(t *testing.T) {
	ts := pusherServe(t)
	a := pusherDial(t, ts, testApp.Key)
	a.subscribe(testApp, "presence-room", `{"user_id":"alice","user_info":{"name":"Alice"}}`)
	data := a.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	if !sameJSON(data, `{"presence":{"ids":["alice"],"hash":{"alice":{"name":"Alice"}},"count":1}}`) {
		t.Fatalf("presence data %s", data)
	}
	b := pusherDial(t, ts, testApp.Key)
	b.subscribe(testApp, "presence-room", `{"user_id":"bob"}`)
	var p struct{ Presence struct{ Count int } }
	json.Unmarshal([]byte(b.expectEvent("pusher_internal:subscription_succeeded", "presence-room")), &p)
	if p.Presence.Count != 2 {
		t.Fatalf("bob sees %d members, want 2", p.Presence.Count)
	}
	if data := a.expectEvent("pusher_internal:member_added", "presence-room"); !sameJSON(data, `{"user_id":"bob","user_info":null}`) {
		t.Fatalf("member_added %s", data)
	}
	// A second connection of bob's adds no member.
	b2 := pusherDial(t, ts, testApp.Key)
	b2.subscribe(testApp, "presence-room", `{"user_id":"bob"}`)
	b2.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	status, body := apiRequest(t, ts, testApp, "GET", "/apps/3/channels/presence-room/users", nil, "")
	if status != 200 || !sameJSON(body, `{"users":[{"id":"alice"},{"id":"bob"}]}`) {
		t.Fatalf("users: %d %s", status, body)
	}
	status, body = apiRequest(t, ts, testApp, "GET", "/apps/3/channels", url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}}, "")
	if status != 200 || !sameJSON(body, `{"channels":{"presence-room":{"user_count":2}}}`) {
		t.Fatalf("channels: %d %s", status, body)
	}
	// Client events: relayed with the sender's user_id, not echoed.
	b.send(`{"event":"client-typing","channel":"presence-room","data":{"on":true}}`)
	m := a.next()
	if !sameJSON(m, `{"event":"client-typing","channel":"presence-room","data":{"on":true},"user_id":"bob"}`) {
		t.Fatalf("client event %s", m)
	}
	b2.expectEvent("client-typing", "presence-room")
	// bob leaves on one connection: still a member; on both: removed.
	b2.send(`{"event":"pusher:unsubscribe","data":{"channel":"presence-room"}}`)
	b.c.CloseNow()
	if data := a.expectEvent("pusher_internal:member_removed", "presence-room"); !sameJSON(data, `{"user_id":"bob"}`) {
		t.Fatalf("member_removed %s", data)
	}
}

func TestPusherClientEventRules(t *testing.T) {
	app := testApp
	app.ClientEventRate = 1
	ts := pusherServe(t, app)
	a := pusherDial(t, ts, app.Key)
	a.subscribe(app, "news", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "news")
	a.send(`{"event":"client-x","channel":"news","data":{}}`)
	a.expectEvent("pusher:error", "") // public channel
	a.send(`{"event":"client-x","channel":"private-y","data":{}}`)
	a.expectEvent("pusher:error", "") // not subscribed
	a.subscribe(app, "private-encrypted-z", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "private-encrypted-z")
	a.send(`{"event":"client-x","channel":"private-encrypted-z","data":{}}`)
	a.expectEvent("pusher:error", "") // encrypted
	a.subscribe(app, "private-y", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "private-y")
	a.send(`{"event":"client-x","channel":"private-y","data":{}}`)
	a.send(`{"event":"client-x","channel":"private-y","data":{}}`)
	if data := a.expectEvent("pusher:error", ""); !strings.Contains(data, "4301") {
		t.Fatalf("over the rate: %s", data)
	}
}

// A rate below one event a second still lets one event through, then one
// every 1/rate seconds: the burst is at least one event. (Before, a rate
// of 0.5 refused every client event: the bucket never held a whole one.)
func TestPusherClientEventRateBelowOneLetsAnEventThrough(t *testing.T) {
	app := testApp
	app.ClientEventRate = 0.5
	ts := pusherServe(t, app)
	a := pusherDial(t, ts, app.Key)
	b := pusherDial(t, ts, app.Key)
	for _, c := range []*pusherClient{a, b} {
		c.subscribe(app, "private-y", "")
		c.expectEvent("pusher_internal:subscription_succeeded", "private-y")
	}
	a.send(`{"event":"client-x","channel":"private-y","data":{"n":1}}`)
	if data := b.expectEvent("client-x", "private-y"); !sameJSON(data, `{"n":1}`) {
		t.Fatalf("the first client event reached the other subscriber as %s", data)
	}
	a.send(`{"event":"client-x","channel":"private-y","data":{"n":2}}`)
	if data := a.expectEvent("pusher:error", ""); !strings.Contains(data, "4301") {
		t.Fatalf("the second event at once: %s, want 4301", data)
	}
}

func TestPusherCacheChannel(t *testing.T) {
	ts := pusherServe(t)
	a := pusherDial(t, ts, testApp.Key)
	a.subscribe(testApp, "cache-price", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "cache-price")
	a.expectEvent("pusher:cache_miss", "cache-price")
	apiRequest(t, ts, testApp, "POST", "/apps/3/events", nil, `{"name":"price","channel":"cache-price","data":"42"}`)
	a.expectEvent("price", "cache-price")
	b := pusherDial(t, ts, testApp.Key)
	b.subscribe(testApp, "cache-price", "")
	b.expectEvent("pusher_internal:subscription_succeeded", "cache-price")
	if data := b.expectEvent("price", "cache-price"); data != "42" {
		t.Fatalf("cached event data %q", data)
	}
}

func TestPusherSigninAndTerminate(t *testing.T) {
	ts := pusherServe(t)
	a := pusherDial(t, ts, testApp.Key)
	a.send(map[string]any{"event": "pusher:signin", "data": map[string]string{"user_data": `{"id":"u1"}`, "auth": testApp.Key + ":bad"}})
	a.expectEvent("pusher:error", "")
	ud := `{"id":"u1","name":"U"}`
	a.send(map[string]any{"event": "pusher:signin", "data": map[string]string{"user_data": ud, "auth": testApp.Key + ":" + testApp.sign(a.socketID+"::user::"+ud)}})
	a.expectEvent("pusher:signin_success", "")
	// The user's own channel: events sent to the user reach it.
	a.subscribe(testApp, "#server-to-user-u2", "")
	a.expectEvent("pusher:subscription_error", "#server-to-user-u2")
	a.subscribe(testApp, "#server-to-user-u1", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "#server-to-user-u1")
	if status, body := apiRequest(t, ts, testApp, "POST", "/apps/3/events", nil, `{"name":"hi","channels":["#server-to-user-u1"],"data":"x"}`); status != 200 {
		t.Fatalf("send to user: %d %s", status, body)
	}
	a.expectEvent("hi", "#server-to-user-u1")
	if status, _ := apiRequest(t, ts, testApp, "POST", "/apps/3/users/u1/terminate_connections", nil, ""); status != 200 {
		t.Fatalf("terminate: %d", status)
	}
	a.expectEvent("pusher:error", "")
	if code := a.closed(); code != 4009 {
		t.Fatalf("terminated connection closed with %d, want 4009", code)
	}
}

func TestPusherWebhooks(t *testing.T) {
	got := make(chan string, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Pusher-Key") != testApp.Key || r.Header.Get("X-Pusher-Signature") != testApp.sign(string(b)) {
			t.Errorf("webhook not signed: %v", r.Header)
		}
		got <- string(b)
	}))
	defer hook.Close()
	app := testApp
	app.Webhooks = []string{hook.URL}
	ts := pusherServe(t, app)
	a := pusherDial(t, ts, app.Key)
	a.subscribe(app, "news", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "news")
	a.c.CloseNow()
	var names []string
	for len(names) < 2 {
		var body struct {
			Events []hookEvent `json:"events"`
		}
		json.Unmarshal([]byte(<-got), &body)
		for _, e := range body.Events {
			names = append(names, e.Name+" "+e.Channel)
		}
	}
	if names[0] != "channel_occupied news" || names[1] != "channel_vacated news" {
		t.Fatalf("webhook events %v", names)
	}
}

// Two nodes joined by NATS: an event triggered over node B's HTTP API
// reaches a subscriber on node A, and presence events cross too.
func TestPusherAcrossNodes(t *testing.T) {
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0"}, PusherApps: []PusherApp{testApp}})
	b := serve(t, Config{Node: "b", NATS: NATSConfig{URL: a.embeddedNATS.ClientURL()}, PusherApps: []PusherApp{testApp}})
	onA := pusherDial(t, a, testApp.Key)
	onA.subscribe(testApp, "presence-room", `{"user_id":"alice"}`)
	onA.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	onB := pusherDial(t, b, testApp.Key)
	// A's subscription_succeeded came once NATS knew of A's subscription:
	// an event triggered on B from now on reaches it.
	apiRequest(t, b, testApp, "POST", "/apps/3/events", nil, `{"name":"first","channel":"presence-room","data":"p"}`)
	onA.expectEvent("first", "presence-room")
	onB.subscribe(testApp, "presence-room", `{"user_id":"bob"}`)
	onB.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	if ev, _, data := pusherRead(t, onA.client); ev != "pusher_internal:member_added" || !strings.Contains(data, "bob") {
		t.Fatalf("on A: %s %s, want bob's member_added", ev, data)
	}
	// socket_id of a connection on A, given to B: left out on A.
	other := pusherDial(t, a, testApp.Key)
	other.subscribe(testApp, "presence-room", `{"user_id":"carol"}`)
	other.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	onA.expectEvent("pusher_internal:member_added", "presence-room")
	onB.expectEvent("pusher_internal:member_added", "presence-room")
	apiRequest(t, b, testApp, "POST", "/apps/3/events", nil, `{"name":"not-carol","channel":"presence-room","data":"1","socket_id":"`+other.socketID+`"}`)
	apiRequest(t, b, testApp, "POST", "/apps/3/events", nil, `{"name":"all","channel":"presence-room","data":"2"}`)
	// (The two travel apart between the nodes: either may come first.)
	seen := map[string]bool{}
	for range 2 {
		ev, _, _ := pusherRead(t, onA.client)
		seen[ev] = true
	}
	if !seen["not-carol"] || !seen["all"] {
		t.Fatalf("A's other subscriber got %v", seen)
	}
	other.expectEvent("all", "presence-room") // not not-carol first
	onB.send(`{"event":"client-hi","channel":"presence-room","data":{"x":1}}`)
	if m := onA.next(); !sameJSON(m, `{"event":"client-hi","channel":"presence-room","data":{"x":1},"user_id":"bob"}`) {
		t.Fatalf("client event on A: %s", m)
	}
}

// pusherAwait asks node ts's HTTP API for path until its answer holds
// want (the other nodes' notes take a moment to arrive).
func pusherAwait(t *testing.T, ts *testServer, path string, query url.Values, want string) {
	t.Helper()
	pollUntil(t, func() (bool, string) {
		status, body := apiRequest(t, ts, testApp, "GET", path, query, "")
		return status == 200 && strings.Contains(body, want), fmt.Sprintf("GET %s: %s, never with %s", path, body, want)
	})
}

// Presence, channel counts and webhooks speak for the cluster: a member
// on node A is listed on node B, a user is announced once, and a channel
// occupied on both nodes is occupied once.
func TestPusherClusterState(t *testing.T) {
	got := make(chan hookEvent, 100)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Events []hookEvent }
		json.NewDecoder(r.Body).Decode(&body)
		for _, e := range body.Events {
			got <- e
		}
	}))
	defer hook.Close()
	app := testApp
	app.Webhooks = []string{hook.URL}
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0"}, PusherApps: []PusherApp{app}})
	b := serve(t, Config{Node: "b", NATS: NATSConfig{URL: a.embeddedNATS.ClientURL()}, PusherApps: []PusherApp{app}})
	onA := pusherDial(t, a, app.Key)
	onA.subscribe(app, "presence-room", `{"user_id":"alice","user_info":{"n":1}}`)
	onA.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	pusherAwait(t, b, "/apps/3/channels/presence-room/users", nil, `"alice"`)

	onB := pusherDial(t, b, app.Key)
	onB.subscribe(app, "presence-room", `{"user_id":"bob"}`)
	data := onB.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	if !sameJSON(data, `{"presence":{"ids":["alice","bob"],"hash":{"alice":{"n":1},"bob":null},"count":2}}`) &&
		!sameJSON(data, `{"presence":{"ids":["bob","alice"],"hash":{"alice":{"n":1},"bob":null},"count":2}}`) {
		t.Fatalf("bob on B sees %s", data)
	}
	pusherAwait(t, a, "/apps/3/channels", url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count,subscription_count"}},
		`{"channels":{"presence-room":{"subscription_count":2,"user_count":2}}}`)
	// alice on B too: no second member, no second channel_occupied.
	alsoB := pusherDial(t, b, app.Key)
	alsoB.subscribe(app, "presence-room", `{"user_id":"alice","user_info":{"n":1}}`)
	alsoB.expectEvent("pusher_internal:subscription_succeeded", "presence-room")
	pusherAwait(t, a, "/apps/3/channels/presence-room", url.Values{"info": {"user_count,subscription_count"}}, `"subscription_count":3`)
	// A client event from B: its webhook (client_event) comes after any
	// webhook B sent before. A's (alice's member_added, channel_occupied)
	// come in their own requests, in any order with B's: wait for both
	// nodes', then nothing more may have come.
	alsoB.send(`{"event":"client-x","channel":"presence-room","data":{}}`)
	var names []string
	count := map[string]int{}
	ctx := testContext(t)
	for count["client_event"] == 0 || count["channel_occupied"] == 0 || count["member_added"] < 2 {
		select {
		case e := <-got:
			names = append(names, e.Name)
			count[e.Name]++
		case <-ctx.Done():
			t.Fatalf("webhooks %v: want channel_occupied, member_added for alice and bob, and the client event", names)
		}
	}
	if count["channel_occupied"] != 1 || count["member_added"] != 2 {
		t.Fatalf("webhooks %v: want channel_occupied once and member_added for alice and bob", names)
	}
}

// Pusher clients reach /app/{key} over HTTP/2 (RFC 8441) as over
// HTTP/1.1, like every other WebSocket endpoint of the server.
func TestPusherOverHTTP2(t *testing.T) {
	addr, stop := serveConfig(t, Config{PusherApps: []PusherApp{testApp}, H2C: true, HandshakeRate: -1})
	defer stop()
	rc, _, err := rally.Dial(testContext(t), "ws://"+addr+"/app/"+testApp.Key+"?protocol=7", &rally.DialOptions{HTTP2: rally.HTTP2Require})
	if err != nil {
		t.Fatalf("dial /app over HTTP/2: %v", err)
	}
	c := &client{t: t, c: rc}
	defer rc.CloseNow()
	if ev, _, _ := pusherRead(t, c); ev != "pusher:connection_established" {
		t.Fatalf("first event over HTTP/2: %q, want pusher:connection_established", ev)
	}
	c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": "h2"}})
	if ev, ch, _ := pusherRead(t, c); ev != "pusher_internal:subscription_succeeded" || ch != "h2" {
		t.Fatalf("subscribe over HTTP/2: %q %q", ev, ch)
	}
}

// Presence members and cache channels' last events are charged to the
// memory budget while they are held, once however many connections of a
// user are members, and given back.
func TestPusherMembersAndCachedEventsAreChargedAndGivenBack(t *testing.T) {
	ts := pusherServe(t)
	a := pusherDial(t, ts, testApp.Key)
	a.subscribe(testApp, "private-first", "") // a connection's first costs more
	a.expectEvent("pusher_internal:subscription_succeeded", "private-first")
	before := charged(ts, rally.MemorySubscriptions).Used
	a.subscribe(testApp, "private-plain", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "private-plain")
	plain := charged(ts, rally.MemorySubscriptions).Used - before
	before = charged(ts, rally.MemorySubscriptions).Used
	info := `{"name":"` + strings.Repeat("A", 1000) + `"}`
	a.subscribe(testApp, "presence-roomy", `{"user_id":"alice","user_info":`+info+`}`)
	a.expectEvent("pusher_internal:subscription_succeeded", "presence-roomy")
	member := charged(ts, rally.MemorySubscriptions).Used - before
	if member-plain < pusherMemberCost+1000 {
		t.Fatalf("a presence subscription charged %d bytes, a private one %d: the member (1 KB of user_info) is not charged", member, plain)
	}
	// alice's second connection adds a subscription, not a member.
	a2 := pusherDial(t, ts, testApp.Key)
	before = charged(ts, rally.MemorySubscriptions).Used
	a2.subscribe(testApp, "presence-roomy", `{"user_id":"alice","user_info":`+info+`}`)
	a2.expectEvent("pusher_internal:subscription_succeeded", "presence-roomy")
	if again := charged(ts, rally.MemorySubscriptions).Used - before; again >= member {
		t.Fatalf("alice's second connection charged %d bytes, her first %d: the member is charged twice", again, member)
	}

	cached := charged(ts, rally.MemoryRecovery).Used
	event := `{"name":"price","channel":"cache-price","data":"` + strings.Repeat("9", 2000) + `"}`
	for range 3 { // each replaces the last: charged once
		if status, body := apiRequest(t, ts, testApp, "POST", "/apps/3/events", nil, event); status != 200 {
			t.Fatalf("trigger: %d %s", status, body)
		}
	}
	if held := charged(ts, rally.MemoryRecovery).Used - cached; held < 2000 || held > 2*2000 {
		t.Fatalf("three 2 KB events on a cache channel charged %d bytes; the last one alone is held", held)
	}
	a.c.CloseNow()
	a2.c.CloseNow()
	awaitCharge(t, ts, rally.MemorySubscriptions)
}

// When the memory budget has no room, a presence member new to the node,
// a cache channel's event triggered over the API and a client event on a
// cache channel are refused in the protocol, and nothing is held; with
// room again they go through.
func TestPusherRefusesMembersAndCachedEventsPastTheBudget(t *testing.T) {
	budget := rally.NewMemoryBudget(64 << 20)
	ts := serve(t, Config{PusherApps: []PusherApp{testApp}, Protection: Protection{MemoryBudget: budget}})
	a := pusherDial(t, ts, testApp.Key)
	b := pusherDial(t, ts, testApp.Key)
	b.subscribe(testApp, "private-cache-feed", "")
	b.expectEvent("pusher_internal:subscription_succeeded", "private-cache-feed")
	b.expectEvent("pusher:cache_miss", "private-cache-feed")
	a.subscribe(testApp, "private-cache-feed", "")
	a.expectEvent("pusher_internal:subscription_succeeded", "private-cache-feed")
	a.expectEvent("pusher:cache_miss", "private-cache-feed")

	// What connections may hold stops at 75% of the limit (request heads
	// may go further): take the budget just past it.
	fill := budget.Limit()*78/100 - budget.Used()
	if !budget.Reserve(rally.MemoryHandshakes, fill) {
		t.Fatal("reserve refused")
	}
	a.subscribe(testApp, "presence-full", `{"user_id":"alice"}`)
	var se struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	json.Unmarshal([]byte(a.expectEvent("pusher:subscription_error", "presence-full")), &se)
	if se.Status != 503 || se.Type != "LimitReached" {
		t.Fatalf("presence member past the budget: %+v, want LimitReached 503", se)
	}
	status, body := apiRequest(t, ts, testApp, "POST", "/apps/3/events", nil, `{"name":"tick","channel":"private-cache-feed","data":"1"}`)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("trigger on a cache channel past the budget: %d %s, want 503", status, body)
	}
	status, body = apiRequest(t, ts, testApp, "POST", "/apps/3/batch_events", nil, `{"batch":[{"name":"tick","channel":"news","data":"1"},{"name":"tick","channel":"cache-x","data":"1"}]}`)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("batch with a cache channel past the budget: %d %s, want 503", status, body)
	}
	a.send(`{"event":"client-tick","channel":"private-cache-feed","data":{}}`)
	if data := a.expectEvent("pusher:error", ""); !strings.Contains(data, "4302") || !strings.Contains(data, "memory") {
		t.Fatalf("client event on a cache channel past the budget: %s", data)
	}
	if n := metric(t, ts.http, `rally_limit_refusals_total{limit="pusher_cache_memory"}`); n != 3 {
		t.Errorf("pusher_cache_memory refusals = %v, want 3", n)
	}

	budget.Release(rally.MemoryHandshakes, fill)
	a.subscribe(testApp, "presence-full", `{"user_id":"alice"}`)
	a.expectEvent("pusher_internal:subscription_succeeded", "presence-full")
	a.send(`{"event":"client-tick","channel":"private-cache-feed","data":{"n":1}}`)
	if m := b.next(); !strings.Contains(m, `"client-tick"`) {
		t.Fatalf("client event with room again: b got %s (nothing refused may have reached it)", m)
	}
	c := pusherDial(t, ts, testApp.Key)
	c.subscribe(testApp, "private-cache-feed", "")
	c.expectEvent("pusher_internal:subscription_succeeded", "private-cache-feed")
	c.expectEvent("client-tick", "private-cache-feed")
}

// hookLog records the webhook events one node sends.
type hookLog struct {
	mu     sync.Mutex
	events []hookEvent
}

func newHookLog(t *testing.T) (*hookLog, string) {
	h := &hookLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Events []hookEvent }
		json.NewDecoder(r.Body).Decode(&body)
		h.mu.Lock()
		h.events = append(h.events, body.Events...)
		h.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

// count is how many events so far are name on channel (with event, for
// client events).
func (h *hookLog) count(name, channel, event string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if e.Name == name && e.Channel == channel && e.Event == event {
			n++
		}
	}
	return n
}

// await waits until the node has sent an event name on channel.
func (h *hookLog) await(t *testing.T, name, channel, event string) {
	t.Helper()
	pollUntil(t, func() (bool, string) {
		return h.count(name, channel, event) > 0, fmt.Sprintf("no %s %s %s webhook", name, channel, event)
	})
}

// marker sends a client event from c and waits for its client_event
// webhook from c's node: a node sends its webhooks in order, so any it
// queued before (a duplicate, say) has arrived by then.
func (h *hookLog) marker(t *testing.T, c *pusherClient, channel, event string) {
	t.Helper()
	c.send(`{"event":"` + event + `","channel":"` + channel + `","data":{}}`)
	h.await(t, "client_event", channel, event)
}

// Two nodes, each with its own webhook URL: a client event's and a cache
// miss's webhooks are sent once in the cluster, by the node where they
// happened; a cache channel's last event triggered on one node is replayed
// to a subscriber on the other, with no cache_miss.
func TestPusherClientEventAndCacheMissWebhooksOncePerCluster(t *testing.T) {
	hooksA, urlA := newHookLog(t)
	hooksB, urlB := newHookLog(t)
	appA, appB := testApp, testApp
	appA.Webhooks, appB.Webhooks = []string{urlA}, []string{urlB}
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0"}, PusherApps: []PusherApp{appA}})
	b := serve(t, Config{Node: "b", NATS: NATSConfig{URL: a.embeddedNATS.ClientURL()}, PusherApps: []PusherApp{appB}})
	onA := pusherDial(t, a, testApp.Key)
	onB := pusherDial(t, b, testApp.Key)
	for _, c := range []*pusherClient{onA, onB} {
		c.subscribe(testApp, "private-chat", "")
		c.expectEvent("pusher_internal:subscription_succeeded", "private-chat")
	}
	// B's subscription is known on A once A's channel count has it (a
	// node's subscription reaches NATS before its note).
	pusherAwait(t, a, "/apps/3/channels/private-chat", url.Values{"info": {"subscription_count"}}, `"subscription_count":2`)

	onA.send(`{"event":"client-hi","channel":"private-chat","data":{}}`)
	onB.expectEvent("client-hi", "private-chat")
	hooksA.await(t, "client_event", "private-chat", "client-hi")
	hooksB.marker(t, onB, "private-chat", "client-mark-b")
	onA.expectEvent("client-mark-b", "private-chat")
	hooksA.marker(t, onA, "private-chat", "client-mark-a")
	onB.expectEvent("client-mark-a", "private-chat")
	if na, nb := hooksA.count("client_event", "private-chat", "client-hi"), hooksB.count("client_event", "private-chat", "client-hi"); na != 1 || nb != 0 {
		t.Fatalf("client_event webhooks: %d from A (where it was sent), %d from B; want 1 and 0", na, nb)
	}

	onB.subscribe(testApp, "cache-none", "")
	onB.expectEvent("pusher_internal:subscription_succeeded", "cache-none")
	onB.expectEvent("pusher:cache_miss", "cache-none")
	pusherAwait(t, a, "/apps/3/channels/cache-none", url.Values{"info": {"subscription_count"}}, `"subscription_count":1`)
	hooksA.marker(t, onA, "private-chat", "client-mark-a2")
	onB.expectEvent("client-mark-a2", "private-chat")
	hooksB.marker(t, onB, "private-chat", "client-mark-b2")
	if na, nb := hooksA.count("cache_miss", "cache-none", ""), hooksB.count("cache_miss", "cache-none", ""); na != 0 || nb != 1 {
		t.Fatalf("cache_miss webhooks: %d from A, %d from B (where it was missed); want 0 and 1", na, nb)
	}

	// A cache channel with no subscriber anywhere: triggered on A, its
	// event reaches B for B's first subscriber.
	if status, body := apiRequest(t, a, testApp, "POST", "/apps/3/events", nil, `{"name":"price","channel":"cache-price","data":"42"}`); status != 200 {
		t.Fatalf("trigger: %d %s", status, body)
	}
	// (The note that carries it may arrive after the trigger's answer.)
	c := pusherDial(t, b, testApp.Key)
	pollUntil(t, func() (bool, string) {
		c.subscribe(testApp, "cache-price", "")
		c.expectEvent("pusher_internal:subscription_succeeded", "cache-price")
		ev, _, data := pusherRead(t, c.client)
		c.send(`{"event":"pusher:unsubscribe","data":{"channel":"cache-price"}}`)
		return ev == "price" && data == "42", "a subscriber on B got " + ev + " " + data + ", not the event cached on A"
	})
}

// A Pusher client on node A that has its subscription_succeeded gets
// the event triggered over node B's API right after, every time: the
// answer waits until NATS knows of A's new subscription.
func TestPusherEventOnAnotherNodeRightAfterSubscriptionSucceeded(t *testing.T) {
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0"}, PusherApps: []PusherApp{testApp}})
	b := serve(t, Config{Node: "b", NATS: NATSConfig{URL: a.embeddedNATS.ClientURL()}, PusherApps: []PusherApp{testApp}})
	onA := pusherDial(t, a, testApp.Key)
	for i := range 200 {
		ch := "race-" + strconv.Itoa(i)
		onA.subscribe(testApp, ch, "")
		onA.expectEvent("pusher_internal:subscription_succeeded", ch)
		if status, body := apiRequest(t, b, testApp, "POST", "/apps/3/events", nil, `{"name":"now","channel":"`+ch+`","data":"x"}`); status != 200 {
			t.Fatalf("trigger on b: %d %s", status, body)
		}
		onA.expectEvent("now", ch)
		onA.send(`{"event":"pusher:unsubscribe","data":{"channel":"` + ch + `"}}`)
	}
}

// A cache channel keeps its last event for the app's CacheTTL: a
// subscriber after it gets pusher:cache_miss, and the event's memory
// goes back to the budget.
func TestPusherCacheChannelForgetsItsEventAfterTheTTL(t *testing.T) {
	app := testApp
	app.CacheTTL = time.Millisecond
	ts := serve(t, Config{PusherApps: []PusherApp{app}})
	before := charged(ts, rally.MemoryRecovery).Used
	if status, body := apiRequest(t, ts, app, "POST", "/apps/3/events", nil, `{"name":"price","channel":"cache-price","data":"`+strings.Repeat("9", 2000)+`"}`); status != 200 {
		t.Fatalf("trigger: %d %s", status, body)
	}
	for {
		c := pusherDial(t, ts, app.Key)
		c.subscribe(app, "cache-price", "")
		c.expectEvent("pusher_internal:subscription_succeeded", "cache-price")
		ev, _, _ := pusherRead(t, c.client)
		c.c.CloseNow()
		if ev == "pusher:cache_miss" {
			break
		}
		if ev != "price" {
			t.Fatalf("after subscription_succeeded on a cache channel: %s, want the cached event or cache_miss", ev)
		}
	}
	pollUntil(t, func() (bool, string) {
		held := charged(ts, rally.MemoryRecovery).Used - before
		return held == 0, fmt.Sprintf("%d bytes still charged for the expired event", held)
	})
}

func TestParsePusherAppCacheTTL(t *testing.T) {
	app, err := ParsePusherApp("a:k:s:cache-ttl=1.5")
	if err != nil || app.CacheTTL != 1500*time.Millisecond {
		t.Fatalf("cache-ttl=1.5: %v, %v, want 1.5s", app.CacheTTL, err)
	}
	for _, bad := range []string{"a:k:s:cache-ttl=0", "a:k:s:cache-ttl=-1", "a:k:s:cache-ttl=1e12"} {
		if _, err := ParsePusherApp(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if a := newPusherApp(PusherApp{ID: "a", Key: "k", Secret: "s"}, nil); a.CacheTTL != 30*time.Minute {
		t.Errorf("default cache TTL %v, want 30m", a.CacheTTL)
	}
}
