package rally

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// seenRequest is what a hub saw of one handshake request.
type seenRequest struct {
	path, authorization, cookie, host string
}

// hub is a test server that redirects or accepts: /to?code=N&loc=L
// answers N with Location L; /hop/K redirects to /hop/K-1 and /hop/0
// accepts; every other path accepts and echoes one message. It records
// each request.
type hub struct {
	srv  *httptest.Server
	ws   string // the ws:// or wss:// base URL
	mu   sync.Mutex
	seen []seenRequest
	locs map[string]string // /named/NAME answers 302 with Location locs[NAME]
}

// named makes /named/NAME answer 302 with Location loc, and returns that
// path: a Location that must not show in an error stays out of the URL.
func (h *hub) named(name, loc string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.locs[name] = loc
	return "/named/" + name
}

func newHub(t *testing.T, tlsServer bool) *hub {
	t.Helper()
	h := &hub{locs: map[string]string{}}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, seenRequest{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Host})
		h.mu.Unlock()
		if name, ok := strings.CutPrefix(r.URL.Path, "/named/"); ok {
			h.mu.Lock()
			w.Header().Set("Location", h.locs[name])
			h.mu.Unlock()
			w.WriteHeader(http.StatusFound)
			return
		}
		if r.URL.Path == "/to" {
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			if loc := r.URL.Query().Get("loc"); loc != "" {
				w.Header().Set("Location", loc)
			}
			w.WriteHeader(code)
			return
		}
		if k, ok := strings.CutPrefix(r.URL.Path, "/hop/"); ok && k != "0" {
			n, _ := strconv.Atoi(k)
			http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusFound)
			return
		}
		c, err := Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if typ, p, err := c.Read(ctx); err == nil {
			c.Write(ctx, typ, p)
		}
		c.Read(ctx)
	}))
	if tlsServer {
		h.srv.StartTLS()
		h.ws = "wss://" + h.srv.Listener.Addr().String()
	} else {
		h.srv.Start()
		h.ws = "ws://" + h.srv.Listener.Addr().String()
	}
	t.Cleanup(h.srv.Close)
	return h
}

// last returns the last request the hub saw.
func (h *hub) last() seenRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		return seenRequest{}
	}
	return h.seen[len(h.seen)-1]
}

// count returns how many requests the hub saw.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// to returns the path that makes the hub answer code with Location loc.
func to(code int, loc string) string {
	return "/to?code=" + strconv.Itoa(code) + "&loc=" + url.QueryEscape(loc)
}

func TestDialFollowsRedirectsInEveryLocationForm(t *testing.T) {
	plain := newHub(t, false)
	secure := newHub(t, true)
	httpForm := "http" + strings.TrimPrefix(plain.ws, "ws")
	httpsForm := "https" + strings.TrimPrefix(secure.ws, "wss")
	for _, tc := range []struct {
		name  string
		code  int
		loc   string
		final *hub
		path  string
	}{
		{"301 absolute ws", 301, plain.ws + "/final", plain, "/final"},
		{"302 absolute http", 302, httpForm + "/final", plain, "/final"},
		{"303 absolute wss", 303, secure.ws + "/final", secure, "/final"},
		{"307 absolute https", 307, httpsForm + "/final", secure, "/final"},
		{"308 absolute path", 308, "/final?x=1", plain, "/final"},
		{"relative path", 302, "final", plain, "/final"},
		{"scheme-relative", 302, "//" + plain.srv.Listener.Addr().String() + "/final", plain, "/final"},
		{"with a fragment, which is dropped", 302, "/final#frag", plain, "/final"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := &DialOptions{FollowRedirects: true, TLSConfig: secure.srv.Client().Transport.(*http.Transport).TLSClientConfig}
			c, resp := dialOK(t, plain.ws+to(tc.code, tc.loc), opts)
			if resp.StatusCode != 101 {
				t.Fatalf("final response %d, want 101", resp.StatusCode)
			}
			if got := tc.final.last().path; got != tc.path {
				t.Fatalf("final server saw %q, want %q", got, tc.path)
			}
			echoOnce(t, c, "after "+tc.name)
		})
	}
}

func TestDialFollowsARejectionThatRedirects(t *testing.T) {
	final := newHub(t, false)
	addr, results := upgradeServer(t, &AcceptOptions{Authorize: func(*http.Request) (any, *Rejection) {
		return nil, &Rejection{Status: http.StatusTemporaryRedirect, Header: http.Header{"Location": {final.ws + "/moved"}}}
	}})
	c, _ := dialOK(t, "ws://"+addr+"/old", &DialOptions{FollowRedirects: true})
	if got := <-results; got.err == nil {
		t.Fatal("the rejecting server accepted")
	}
	if final.last().path != "/moved" {
		t.Fatalf("final server saw %q", final.last().path)
	}
	echoOnce(t, c, "moved")
}

func TestDialKeepsCredentialsOnlyWithinTheOrigin(t *testing.T) {
	a := newHub(t, false)
	b := newHub(t, false)
	aAddr := a.srv.Listener.Addr().String()
	_, aPort, _ := net.SplitHostPort(aAddr)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:pw"))
	for _, tc := range []struct {
		name      string
		start     string // path on a
		final     *hub
		wantCreds bool
	}{
		{"same origin, relative", to(302, "/final"), a, true},
		{"same origin, absolute", to(302, a.ws+"/final"), a, true},
		{"same origin, host in other case", to(302, "ws://127.0.0.1:"+aPort+"/final"), a, true},
		{"other port", to(302, b.ws+"/final"), b, false},
		{"other host name, same port", to(302, "ws://localhost:"+aPort+"/final"), a, false},
		{"away and back: dropped for good", to(302, b.ws+to(302, a.ws+"/final")), a, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := strings.Replace(a.ws, "ws://", "ws://u:pw@", 1) + tc.start
			header := http.Header{"Cookie": {"session=1"}, "X-Other": {"kept"}}
			c, _ := dialOK(t, u, &DialOptions{FollowRedirects: true, Header: header})
			defer c.CloseNow()
			got := tc.final.last()
			if tc.wantCreds && (got.authorization != basic || got.cookie != "session=1") {
				t.Fatalf("final request had Authorization %q and Cookie %q, want both kept", got.authorization, got.cookie)
			}
			if !tc.wantCreds && (got.authorization != "" || got.cookie != "") {
				t.Fatalf("final request had Authorization %q and Cookie %q, want both dropped", got.authorization, got.cookie)
			}
		})
	}
	t.Run("explicit Authorization and Host", func(t *testing.T) {
		header := http.Header{"Authorization": {"Bearer t"}, "Host": {"app.rally.test"}}
		c, _ := dialOK(t, a.ws+to(302, b.ws+"/final"), &DialOptions{FollowRedirects: true, Header: header})
		defer c.CloseNow()
		if first := a.last(); first.authorization != "Bearer t" || first.host != "app.rally.test" {
			t.Fatalf("first request had %+v, want the caller's Authorization and Host", first)
		}
		if got := b.last(); got.authorization != "" || got.host != b.srv.Listener.Addr().String() {
			t.Fatalf("request to the other origin had %+v, want no Authorization and its own Host", got)
		}
	})
	if header := (http.Header{"Cookie": {"session=1"}}); len(withoutCredentials(header)) != 0 || header.Get("Cookie") == "" {
		t.Fatal("withoutCredentials changed the caller's header")
	}
}

func TestSameOriginComparesSecurityHostAndPort(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"ws://h/a", "ws://h/b", true},
		{"ws://h/", "http://h:80/", true},
		{"wss://h/", "https://H:443/", true},
		{"ws://h/", "wss://h/", false},
		{"ws://h:8080/", "wss://h:8080/", false},
		{"ws://h/", "ws://h:81/", false},
		{"ws://h/", "ws://g/", false},
		{"ws://h/", "ws://h.example/", false},
	} {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		as, _ := checkDialURL(a)
		bs, _ := checkDialURL(b)
		if got := sameOrigin(a, as, b, bs); got != tc.same {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

func TestDialFollowsAtMostTenRedirects(t *testing.T) {
	h := newHub(t, false)
	c, _ := dialOK(t, h.ws+"/hop/10", &DialOptions{FollowRedirects: true})
	echoOnce(t, c, "ten")

	_, resp, err := Dial(context.Background(), h.ws+"/hop/11", &DialOptions{FollowRedirects: true, HandshakeTimeout: testTimeout})
	var he *HandshakeError
	if !errors.As(err, &he) || he.Reason != "stopped after 10 redirects" || resp == nil || resp.StatusCode != 302 || he.URL != h.ws+"/hop/1" {
		t.Fatalf("Dial = %v, %v, want the 11th redirect refused", resp, err)
	}
	if n := h.count(); n != 11+11 {
		t.Fatalf("the server saw %d requests, want 22 (a chain of ten redirects, then the first eleven of eleven)", n)
	}
}

func TestDialReturnsARedirectAsAFailedHandshakeWhenNotFollowing(t *testing.T) {
	h := newHub(t, false)
	_, resp, err := Dial(context.Background(), h.ws+to(307, "/next?token=SECRET"), &DialOptions{HandshakeTimeout: testTimeout})
	if strings.Contains(err.Error(), "token=SECRET") {
		t.Errorf("error %q shows the Location's token", err)
	}
	var he *HandshakeError
	if !errors.As(err, &he) || resp == nil || resp.StatusCode != 307 || resp.Header.Get("Location") != "/next?token=SECRET" {
		t.Fatalf("Dial = %v, %v, want the 307 and its response", resp, err)
	}
	want := "server answered 307 Temporary Redirect redirecting to " + h.ws + "/next?token=xxxxx (DialOptions.FollowRedirects is off)"
	if he.Reason != want {
		t.Fatalf("reason %q, want %q", he.Reason, want)
	}
	if n := h.count(); n != 1 {
		t.Fatalf("the server saw %d requests, want 1", n)
	}
}

func TestDialFailsARedirectItCannotFollow(t *testing.T) {
	h := newHub(t, false)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"no Location", "/to?code=302", "server answered 302 Found without a Location"},
		{"other scheme", h.named("ftp", "ftp://u:SECRET@rally.test/?token=SECRET"), "redirected to ftp://xxxxx@rally.test/?token=xxxxx, where scheme must be ws, wss, http or https"},
		{"no host", to(302, "ws:///x"), "where URL has no host"},
		{"unparseable", h.named("bad", "ws://u:SECRET@rally.test/%zz"), "redirected to a Location that is not a valid URL (not shown, it may hold credentials): it has an invalid %-escape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := Dial(context.Background(), h.ws+tc.path, &DialOptions{FollowRedirects: true, HandshakeTimeout: testTimeout})
			var he *HandshakeError
			if !errors.As(err, &he) || resp == nil || resp.StatusCode != 302 || !strings.Contains(he.Reason, tc.want) {
				t.Fatalf("Dial = %v, %v, want the 302 and %q", resp, err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("error %q shows a secret", err)
			}
		})
	}
}

func TestDialHandshakeTimeoutCoversTheWholeRedirectChain(t *testing.T) {
	h := newHub(t, false)
	var deadlines []time.Time
	var d net.Dialer
	opts := &DialOptions{
		FollowRedirects:  true,
		HandshakeTimeout: time.Hour,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			deadlines = append(deadlines, dl)
			return d.DialContext(ctx, network, addr)
		},
	}
	c, _ := dialOK(t, h.ws+"/hop/3", opts)
	c.CloseNow()
	if len(deadlines) != 4 {
		t.Fatalf("%d dials, want 4", len(deadlines))
	}
	for _, dl := range deadlines[1:] {
		if !dl.Equal(deadlines[0]) {
			t.Fatalf("deadlines %v, want one deadline for the whole chain", deadlines)
		}
	}
}
