package websocket_test

// Black-box ports of gorilla/websocket's json_test.go, join_test.go and
// prepared_test.go.

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

// pair returns a client and the server's side of one connection.
func pair(t *testing.T, u *websocket.Upgrader, d *websocket.Dialer) (client, srv *websocket.Conn) {
	t.Helper()
	url, conns := upgraded(t, u)
	if d == nil {
		d = &websocket.Dialer{}
	}
	d.HandshakeTimeout = wait
	c, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(wait))
	return c, receive(t, conns)
}

// As gorilla's TestJSON and TestDeprecatedJSON: values written with
// WriteJSON read back equal with ReadJSON, both ways.
func TestJSONRoundTrips(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	type T struct {
		A int
		B string
	}
	want := T{1, "hello"}
	if err := c.WriteJSON(want); err != nil {
		t.Fatal(err)
	}
	var got T
	if err := s.ReadJSON(&got); err != nil || got != want {
		t.Fatalf("got %+v, %v", got, err)
	}
	if err := websocket.WriteJSON(s, want); err != nil {
		t.Fatal(err)
	}
	got = T{}
	if err := websocket.ReadJSON(c, &got); err != nil || got != want {
		t.Fatalf("deprecated functions: got %+v, %v", got, err)
	}
}

// As gorilla's TestPartialJSONRead: a message holding part of a JSON value,
// or nothing but white space, is io.ErrUnexpectedEOF; the close after them
// is a *CloseError.
func TestPartialJSONIsUnexpectedEOF(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	data, _ := json.Marshal(struct {
		A int
		B string
	}{1, "hello"})
	n := 0
	for i := len(data) - 1; i >= 0; i-- {
		c.WriteMessage(websocket.TextMessage, data[:i])
		n++
	}
	c.WriteMessage(websocket.TextMessage, []byte(" "))
	n++
	c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	var v any
	for i := 0; i < n; i++ {
		if err := s.ReadJSON(&v); err != io.ErrUnexpectedEOF {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := s.ReadJSON(&v); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("final: %v", err)
	}
}

// As gorilla's TestJoinMessages: the messages joined, each followed by the
// terminator, for every read size.
func TestJoinMessagesConcatenatesWithTheTerminator(t *testing.T) {
	messages := []string{"a", "bc", "def", "ghij", "klmno", "0", "12", "345", "6789"}
	for _, chunk := range []int{1, 2, 3, 7} {
		for _, term := range []string{"", ","} {
			c, s := pair(t, &websocket.Upgrader{}, nil)
			for _, m := range messages {
				c.WriteMessage(websocket.BinaryMessage, []byte(m))
			}
			c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			var out bytes.Buffer
			_, err := io.CopyBuffer(&out, websocket.JoinMessages(s, term), make([]byte, chunk))
			if websocket.IsUnexpectedCloseError(err, websocket.CloseNormalClosure) {
				t.Errorf("chunk %d term %q: %v", chunk, term, err)
			}
			if want := strings.Join(messages, term) + term; out.String() != want {
				t.Errorf("chunk %d term %q: %q, want %q", chunk, term, out.String(), want)
			}
		}
	}
}

// As gorilla's TestPreparedMessage: a prepared message arrives as the same
// message WriteMessage sends, text, binary and control, with and without
// compression, on both sides.
func TestPreparedMessageArrivesAsWriteMessagesWould(t *testing.T) {
	for _, compress := range []bool{false, true} {
		c, s := pair(t, &websocket.Upgrader{EnableCompression: compress}, &websocket.Dialer{EnableCompression: compress})
		pongs := make(chan string, 4)
		c.SetPongHandler(func(d string) error { pongs <- d; return nil })
		for _, tc := range []struct {
			typ  int
			data []byte
		}{{websocket.TextMessage, []byte("hello")}, {websocket.BinaryMessage, bytes.Repeat([]byte("x"), 5000)}} {
			pm, err := websocket.NewPreparedMessage(tc.typ, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			for _, from := range []*websocket.Conn{s, c} {
				to := c
				if from == c {
					to = s
				}
				if err := from.WritePreparedMessage(pm); err != nil {
					t.Fatal(err)
				}
				typ, p, err := to.ReadMessage()
				if err != nil || typ != tc.typ || !reflect.DeepEqual(p, tc.data) {
					t.Fatalf("compress %v: got type %d, %d bytes, %v", compress, typ, len(p), err)
				}
			}
		}
		ping, err := websocket.NewPreparedMessage(websocket.PingMessage, []byte("pp"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WritePreparedMessage(ping); err != nil {
			t.Fatal(err)
		}
		go s.ReadMessage()
		go c.ReadMessage() // the pong arrives during a read
		select {
		case d := <-pongs:
			if d != "pp" {
				t.Fatalf("pong %q", d)
			}
		case <-time.After(wait):
			t.Fatal("no pong for the prepared ping")
		}
	}
}
