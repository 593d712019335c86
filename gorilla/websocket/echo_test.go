package websocket_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

func TestEchoAndCloseHandshakeEndToEnd(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	for _, m := range []struct {
		typ int
		p   []byte
	}{{websocket.TextMessage, []byte("hello")}, {websocket.BinaryMessage, bytes.Repeat([]byte{7}, 100000)}, {websocket.TextMessage, nil}} {
		if err := c.WriteMessage(m.typ, m.p); err != nil {
			t.Fatal(err)
		}
		typ, p, err := c.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if typ != m.typ || !bytes.Equal(p, m.p) {
			t.Fatalf("echo: type %d, %d bytes; want type %d, %d bytes", typ, len(p), m.typ, len(m.p))
		}
	}
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after close: %v, want the server's echoed 1000", err)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte("late")); err != websocket.ErrCloseSent {
		t.Fatalf("write after close: %v, want ErrCloseSent", err)
	}
}
