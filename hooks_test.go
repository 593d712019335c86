package rally

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// servers are the two ways to take a handshake, which the hooks must treat
// alike.
var servers = []struct {
	name  string
	start startServer
}{
	{"Accept", startAcceptServer},
	{"Upgrade", startUpgradeServer},
}

func TestAuthorizeRejectsWithItsStatusHeadersAndBody(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			conns := watchNewConns(t)
			var told atomic.Int32
			opts := &AcceptOptions{
				Authorize: func(r *http.Request) (any, *Rejection) {
					if r.Header.Get("Authorization") == "" {
						return nil, &Rejection{
							Status: http.StatusUnauthorized,
							Header: http.Header{
								"Www-Authenticate": {`Bearer realm="rally"`},
								"Content-Type":     {"application/json"},
								"Connection":       {"keep-alive"},
								"Content-Length":   {"9999"},
							},
							Body: `{"error":"log in first"}`,
						}
					}
					return "alice", nil
				},
				OnHandshakeError: func(*http.Request, error) { told.Add(1) },
			}
			addr, results := via.start(t, opts)
			resp, body, _ := exchange(t, addr, handshakeBytes("GET"))
			got := <-results
			if resp.StatusCode != 401 || body != `{"error":"log in first"}` {
				t.Fatalf("answer %d %q, want 401 with the hook's body", resp.StatusCode, body)
			}
			if h := resp.Header; h.Get("WWW-Authenticate") != `Bearer realm="rally"` || h.Get("Content-Type") != "application/json" || !resp.Close || resp.ContentLength != int64(len(body)) {
				t.Errorf("answer headers %v (close %v, length %d), want the hook's, Connection: close and the true length", h, resp.Close, resp.ContentLength)
			}
			var he *HandshakeError
			if got.conn != nil || !errors.As(got.err, &he) || he.Status != 401 || !strings.Contains(he.Reason, "Authorize") {
				t.Fatalf("got %v, %v, want a *HandshakeError with 401 naming Authorize", got.conn, got.err)
			}
			if n := told.Load(); n != 0 {
				t.Errorf("OnHandshakeError told %d times about the application's own rejection", n)
			}
			select {
			case <-conns:
				t.Fatal("a rejected request opened a connection")
			default:
			}
		})
	}
}

func TestAuthorizeRejectionStatusIsCheckedAndDefaultsTo403(t *testing.T) {
	for _, tc := range []struct {
		status, want int
		told         bool
	}{
		{0, 403, false},
		{302, 302, false},
		{503, 503, false},
		{200, 500, true},
		{101, 500, true},
		{600, 500, true},
	} {
		for _, via := range servers {
			t.Run(via.name, func(t *testing.T) {
				var told []error
				opts := &AcceptOptions{
					Authorize:        func(*http.Request) (any, *Rejection) { return nil, &Rejection{Status: tc.status} },
					OnHandshakeError: func(_ *http.Request, err error) { told = append(told, err) },
				}
				addr, results := via.start(t, opts)
				resp, _, _ := exchange(t, addr, handshakeBytes("GET"))
				got := <-results
				if resp.StatusCode != tc.want {
					t.Fatalf("Rejection.Status %d answered %d, want %d", tc.status, resp.StatusCode, tc.want)
				}
				if tc.told != (len(told) == 1) || len(told) > 1 || tc.told && told[0] != got.err {
					t.Errorf("Rejection.Status %d: OnHandshakeError told %v, want told: %v", tc.status, told, tc.told)
				}
			})
		}
	}
}

func TestAuthorizeRunsOnlyOnRequestsThatPassTheRules(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			var calls atomic.Int32
			opts := &AcceptOptions{Authorize: func(*http.Request) (any, *Rejection) { calls.Add(1); return nil, nil }}
			addr, results := via.start(t, opts)
			resp, _, _ := exchange(t, addr, handshakeBytes("GET", "Sec-WebSocket-Version: 8"))
			<-results
			if resp.StatusCode != 426 || calls.Load() != 0 {
				t.Fatalf("answer %d after %d Authorize calls, want 426 and none", resp.StatusCode, calls.Load())
			}
		})
	}
}

func TestAuthorizeDataIsTheConnectionsData(t *testing.T) {
	type user struct{ name string }
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			watchNewConns(t)
			opts := &AcceptOptions{
				Authorize: func(r *http.Request) (any, *Rejection) {
					return &user{strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")}, nil
				},
			}
			addr, results := via.start(t, opts)
			c, _ := dialOK(t, "ws://"+addr+"/", &DialOptions{Header: http.Header{"Authorization": {"Bearer alice"}}})
			defer c.CloseNow()
			got := <-results
			if got.err != nil {
				t.Fatal(got.err)
			}
			defer got.conn.CloseNow()
			if u, ok := got.conn.Data().(*user); !ok || u.name != "alice" {
				t.Fatalf("Conn.Data() = %#v, want the user Authorize returned", got.conn.Data())
			}
		})
	}
}

func TestSelectSubprotocolChoosesAmongTheClientsOffers(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			watchNewConns(t)
			var seen []string
			opts := &AcceptOptions{
				Subprotocols: []string{"ignored"},
				SelectSubprotocol: func(r *http.Request, offered []string) string {
					seen = offered
					return offered[len(offered)-1]
				},
			}
			addr, results := via.start(t, opts)
			c, _ := dialOK(t, "ws://"+addr+"/", &DialOptions{Subprotocols: []string{"a", "b", "ignored"}})
			defer c.CloseNow()
			got := <-results
			if got.err != nil {
				t.Fatal(got.err)
			}
			defer got.conn.CloseNow()
			if !slices.Equal(seen, []string{"a", "b", "ignored"}) || got.conn.Subprotocol() != "ignored" || c.Subprotocol() != "ignored" {
				t.Fatalf("hook saw %q; server chose %q, client %q; want the last offer", seen, got.conn.Subprotocol(), c.Subprotocol())
			}
		})
	}
}

func TestSelectSubprotocolChoosingAnUnofferedOneIsA500(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			var told []error
			opts := &AcceptOptions{
				SelectSubprotocol: func(*http.Request, []string) string { return "mqtt" },
				OnHandshakeError:  func(_ *http.Request, err error) { told = append(told, err) },
			}
			addr, results := via.start(t, opts)
			resp, body, _ := exchange(t, addr, handshakeBytes("GET", "Sec-WebSocket-Protocol: chat"))
			got := <-results
			if resp.StatusCode != 500 || !strings.Contains(body, `chose "mqtt", which the client did not offer`) {
				t.Fatalf("answer %d %q, want 500 naming the hook's mistake", resp.StatusCode, body)
			}
			if len(told) != 1 || told[0] != got.err {
				t.Fatalf("OnHandshakeError told %v, want once %v", told, got.err)
			}
		})
	}
}

func TestResponseHeaderAddsHeadersToThe101ButNotTheHandshakesOwn(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			watchNewConns(t)
			opts := &AcceptOptions{
				Subprotocols: []string{"chat"},
				ResponseHeader: func(r *http.Request, h http.Header) {
					h.Set("X-Path", r.URL.Path)
					h.Add("Set-Cookie", "a=1")
					h.Set("Sec-WebSocket-Protocol", "evil")
					h.Set("Upgrade", "h2c")
					h.Set("X-Injected", "1\r\nX-Evil: 1")
				},
			}
			addr, results := via.start(t, opts)
			resp, _, _ := exchange(t, addr, handshakeBytes("GET", "Sec-WebSocket-Protocol: chat"))
			got := <-results
			if got.err != nil {
				t.Fatal(got.err)
			}
			defer got.conn.CloseNow()
			h := resp.Header
			if h.Get("X-Path") != "/chat" || h.Get("Set-Cookie") != "a=1" || h.Get("Sec-WebSocket-Protocol") != "chat" || h.Get("Upgrade") != "websocket" {
				t.Errorf("101 headers %v, want the hook's X-Path and Set-Cookie, and the handshake's own", h)
			}
			if h.Get("X-Evil") != "" || !strings.HasPrefix(h.Get("X-Injected"), "1") {
				t.Errorf("a CR LF in a hook's value injected a header: %v", h)
			}
		})
	}
}

func TestHooksSeeTheRequestAsTheClientSentIt(t *testing.T) {
	for _, via := range servers {
		t.Run(via.name, func(t *testing.T) {
			watchNewConns(t)
			type seen struct {
				path, query, host, cookie, remote string
			}
			ch := make(chan seen, 1)
			opts := &AcceptOptions{Authorize: func(r *http.Request) (any, *Rejection) {
				ch <- seen{r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Get("Cookie"), r.RemoteAddr}
				return nil, nil
			}}
			addr, results := via.start(t, opts)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, _, err := Dial(ctx, "ws://"+addr+"/room/7?user=bob", &DialOptions{Header: http.Header{"Cookie": {"s=1"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			got := <-results
			if got.err != nil {
				t.Fatal(got.err)
			}
			defer got.conn.CloseNow()
			s := <-ch
			if s.path != "/room/7" || s.query != "user=bob" || s.host != addr || s.cookie != "s=1" || s.remote != c.LocalAddr().String() {
				t.Fatalf("hook saw %+v", s)
			}
		})
	}
}
