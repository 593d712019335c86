package websocket_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

// wait bounds every wait for an event in these tests: generous, so that a
// loaded machine does not fail them, and never a measure of speed.
const wait = 20 * time.Second

// server runs handler behind an httptest server and returns its ws:// URL.
func server(t testing.TB, handler http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(handler)
	t.Cleanup(s.Close)
	return "ws" + strings.TrimPrefix(s.URL, "http")
}

// echoHandler echoes every message with NextReader and NextWriter, as
// gorilla's tests' echo server does.
func echoHandler(u *websocket.Upgrader) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, rd, err := c.NextReader()
			if err != nil {
				return
			}
			wr, err := c.NextWriter(mt)
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			for {
				n, err := rd.Read(buf)
				if n > 0 {
					if _, err := wr.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					break
				}
			}
			if err := wr.Close(); err != nil {
				return
			}
		}
	}
}

// dial connects to url with a bounded handshake and closes at cleanup.
func dial(t *testing.T, url string, h http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: wait}
	c, _, err := d.Dial(url, h)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(wait))
	return c
}

// upgraded serves u and hands each upgraded connection to the test.
func upgraded(t testing.TB, u *websocket.Upgrader) (string, <-chan *websocket.Conn) {
	t.Helper()
	ch := make(chan *websocket.Conn, 4)
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		c, err := u.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		ch <- c
	})
	return url, ch
}

// receive waits for the next upgraded connection.
func receive(t testing.TB, ch <-chan *websocket.Conn) *websocket.Conn {
	t.Helper()
	select {
	case c := <-ch:
		c.SetReadDeadline(time.Now().Add(wait))
		return c
	case <-time.After(wait):
		t.Fatal("no connection was upgraded")
		return nil
	}
}
