package websocket_test

// Where this package differs from gorilla/websocket on purpose (RFC 6455,
// or a peer holding the process's memory or crashing it): one test per
// row of the table in docs/MIGRATING.md and the package doc.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

// Invalid UTF-8 in a text message fails the read at the first bad byte,
// before the message ends, and the peer gets 1007 (RFC 6455 8.1). gorilla
// delivers the bytes.
func TestDifferenceInvalidUTF8FailsFastWith1007(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	p.frame(false, 0x1, []byte("ok \xff then more")) // the message never ends
	_, _, err := s.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseInvalidFramePayloadData) {
		t.Fatalf("got %v, want close 1007", err)
	}
	if code := p.closeCode(); code != 1007 {
		t.Fatalf("the peer got %d, want 1007", code)
	}
}

// Every ping is answered with a pong (RFC 6455 5.5.2 says MUST), even when
// the ping handler sends none; gorilla leaves the pong to the handler.
func TestDifferenceEveryPingIsAnswered(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	s.SetPingHandler(func(string) error { return nil })
	go s.ReadMessage()
	p.frame(true, 0x9, []byte("are you there"))
	if _, op, payload := p.next(); op != 0xA || string(payload) != "are you there" {
		t.Fatalf("got opcode %x %q, want the pong", op, payload)
	}
}

// A pong is only sent as a ping's answer: WriteControl with PongMessage
// outside a ping handler is refused (gorilla sends it).
func TestDifferenceUnsolicitedPongIsRefused(t *testing.T) {
	c, _ := pair(t, &websocket.Upgrader{}, nil)
	if err := c.WriteControl(websocket.PongMessage, []byte("x"), time.Now().Add(wait)); err == nil {
		t.Fatal("an unsolicited pong was accepted")
	}
}

// The peer's close is answered whatever the close handler does (RFC 6455
// 5.5.1); gorilla leaves the answer to the handler.
func TestDifferencePeersCloseIsAnsweredEvenByASilentHandler(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	s.SetCloseHandler(func(int, string) error { return nil })
	p.closeFrame(1000, "")
	s.ReadMessage()
	if code := p.closeCode(); code != 1000 {
		t.Fatalf("the peer got %d, want 1000", code)
	}
}

// A close message with a code that may not be sent, or a reason that is
// not UTF-8, is refused before anything is sent; gorilla sends it.
func TestDifferenceForbiddenCloseMessagesAreRefused(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	for _, m := range [][]byte{
		websocket.FormatCloseMessage(websocket.CloseAbnormalClosure, ""),
		websocket.FormatCloseMessage(websocket.CloseTLSHandshake, ""),
		websocket.FormatCloseMessage(999, ""),
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, "\xff"),
		{0x03},
	} {
		if err := c.WriteControl(websocket.CloseMessage, m, time.Now().Add(wait)); err == nil {
			t.Errorf("close message % x was accepted", m)
		}
	}
	c.WriteMessage(websocket.TextMessage, []byte("still open"))
	if _, p, err := s.ReadMessage(); err != nil || string(p) != "still open" {
		t.Fatalf("got %q, %v", p, err)
	}
}

// A message of more fragments than rally allows fails with 1008; gorilla
// has no such bound.
func TestDifferenceTooManyFragmentsFailWith1008(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	go func() {
		w := bufio.NewWriterSize(p.nc, 1<<16)
		first := []byte{0x02, 0x80, 1, 2, 3, 4}
		more := []byte{0x00, 0x80, 1, 2, 3, 4}
		w.Write(first)
		for i := 0; i < 131072+1; i++ {
			if _, err := w.Write(more); err != nil {
				return
			}
		}
		w.Flush()
	}()
	if _, _, err := s.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("got %v, want close 1008", err)
	}
}

// A panic in a handler is recovered and closes the connection with 1011;
// with gorilla it crashes the program.
func TestDifferencePanicInAHandlerClosesWith1011(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	s.SetPingHandler(func(string) error { panic("handler bug") })
	go s.ReadMessage()
	p.frame(true, 0x9, nil)
	if code := p.closeCode(); code != 1011 {
		t.Fatalf("the peer got %d, want 1011", code)
	}
}

// An Upgrade request that carries a body is refused with 400: its bytes
// would otherwise be read as frames. gorilla upgrades it.
func TestDifferenceUpgradeRequestWithABodyIsRefused(t *testing.T) {
	url := server(t, echoWith(&websocket.Upgrader{}, nil, nil))
	nc, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(wait))
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 6\r\n\r\n\x81\x80abcd")
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

// NextReader returns the same reader every time (no allocation per
// message): one kept past the next NextReader reads the current message,
// where gorilla's old reader returns io.EOF.
func TestDifferenceNextReaderIsReused(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	c.WriteMessage(websocket.TextMessage, []byte("one"))
	c.WriteMessage(websocket.TextMessage, []byte("two"))
	_, r1, err := s.NextReader()
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := s.NextReader()
	if err != nil {
		t.Fatal(err)
	}
	if r1 != r2 {
		t.Fatal("NextReader returned a new reader")
	}
	if b, err := io.ReadAll(r1); err != nil || string(b) != "two" {
		t.Fatalf("got %q, %v", b, err)
	}
}
