package websocket_test

// gorilla's semantics that programs rely on, asserted as a user sees them.

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
	"github.com/rallyws/rally/internal/slowness"
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A read deadline that passes during a read fails it with a timeout, and
// every later read fails the same way, even once a message has arrived and
// the deadline was cleared (gorilla: the read side is then corrupt).
func TestReadDeadlinePassingBreaksReadsForGood(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, _, err := s.ReadMessage()
	if !isTimeout(err) {
		t.Fatalf("got %v, want a timeout", err)
	}
	s.SetReadDeadline(time.Time{})
	c.WriteMessage(websocket.TextMessage, []byte("late"))
	if _, _, err2 := s.ReadMessage(); err2 != err {
		t.Fatalf("next read: %v, want the same timeout", err2)
	}
	// The write side is untouched.
	if err := s.WriteMessage(websocket.TextMessage, []byte("still")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "still" {
		t.Fatalf("got %q, %v", p, err)
	}
}

// A read that starts after its deadline passed fails at once.
func TestReadAfterThePassedDeadlineFailsAtOnce(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	c.WriteMessage(websocket.TextMessage, []byte("waiting"))
	s.SetReadDeadline(time.Now().Add(-time.Second))
	if _, _, err := s.NextReader(); !isTimeout(err) {
		t.Fatalf("got %v, want a timeout", err)
	}
}

// A write deadline in the past fails the write with a timeout, and the
// write side stays failed.
func TestWriteDeadlinePassedFailsWritesForGood(t *testing.T) {
	_, s := pair(t, &websocket.Upgrader{}, nil)
	s.SetWriteDeadline(time.Now().Add(-time.Second))
	err := s.WriteMessage(websocket.TextMessage, []byte("x"))
	if !isTimeout(err) {
		t.Fatalf("got %v, want a timeout", err)
	}
	s.SetWriteDeadline(time.Time{})
	if _, err2 := s.NextWriter(websocket.TextMessage); err2 != err {
		t.Fatalf("next write: %v, want the same timeout", err2)
	}
}

// The chat example's keep-alive: the pong handler extends the read
// deadline during the read, which then outlives the first deadline.
func TestPongHandlerExtendsTheReadDeadlineOfTheReadInProgress(t *testing.T) {
	// The pong must come back within the first deadline; on a busy machine
	// it is longer (measured load), so that the test still tells.
	first := slowness.Scale(2 * time.Second)
	c, s := pair(t, &websocket.Upgrader{}, nil)
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	s.SetReadDeadline(start.Add(first))
	ponged := make(chan time.Time, 1)
	s.SetPongHandler(func(string) error {
		// Far past the moment "after" is sent (first + first/2 from the
		// start), whatever first the load made it.
		s.SetReadDeadline(time.Now().Add(max(wait, 3*first)))
		ponged <- time.Now()
		return nil
	})
	if err := s.WriteControl(websocket.PingMessage, nil, time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { _, _, err := s.ReadMessage(); read <- err }()
	at := <-ponged
	if at.After(start.Add(first / 2)) {
		t.Skip("the machine is too slow to tell: the pong came late")
	}
	time.Sleep(time.Until(start.Add(first + first/2))) // past the first deadline
	c.WriteMessage(websocket.TextMessage, []byte("after"))
	if err := <-read; err != nil {
		t.Fatalf("the read failed although the pong handler extended its deadline: %v", err)
	}
}

// A handler's error ends the read in progress with that error, and every
// later read returns it.
func TestHandlerErrorEndsTheRead(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	stop := errors.New("stop")
	s.SetPingHandler(func(string) error { return stop })
	c.WriteControl(websocket.PingMessage, []byte("x"), time.Now().Add(wait))
	if _, _, err := s.ReadMessage(); err != stop {
		t.Fatalf("got %v, want the handler's error", err)
	}
	if _, _, err := s.NextReader(); err != stop {
		t.Fatalf("next read: %v", err)
	}
}

// The close handler runs before the read returns, with the peer's code and
// reason; its nil makes the read return the *CloseError, its error that
// error. The default one answers with the peer's code.
func TestCloseHandlerCallOrderAndResult(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	var got []any
	s.SetCloseHandler(func(code int, text string) error {
		got = append(got, code, text)
		return nil
	})
	p.closeFrame(4001, "done")
	_, _, err := s.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || ce.Text != "done" || len(got) != 2 || got[0] != 4001 || got[1] != "done" {
		t.Fatalf("read %v, handler saw %v", err, got)
	}
	if code := p.closeCode(); code != 4001 {
		t.Fatalf("the peer got close %d, want its 4001 echoed", code)
	}
	if err := s.WriteMessage(websocket.TextMessage, []byte("x")); err != websocket.ErrCloseSent {
		t.Fatalf("write after the close: %v, want ErrCloseSent", err)
	}

	url, conns = upgraded(t, &websocket.Upgrader{})
	p = rawDial(t, url)
	s = receive(t, conns)
	mine := errors.New("mine")
	s.SetCloseHandler(func(int, string) error { return mine })
	p.closeFrame(1001, "")
	if _, _, err := s.ReadMessage(); err != mine {
		t.Fatalf("got %v, want the handler's error", err)
	}

	url, conns = upgraded(t, &websocket.Upgrader{})
	p = rawDial(t, url)
	s = receive(t, conns)
	p.closeFrame(1001, "")
	if _, _, err := s.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("default handler: %v", err)
	}
	if code := p.closeCode(); code != 1001 {
		t.Fatalf("default handler: the peer got %d, want 1001", code)
	}
}

// Close from another goroutine ends a blocked read with an error.
func TestCloseUnblocksTheReader(t *testing.T) {
	_, s := pair(t, &websocket.Upgrader{}, nil)
	read := make(chan error, 1)
	go func() { _, _, err := s.ReadMessage(); read <- err }()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err == nil || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v, want net.ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("the read is still blocked")
	}
	if err := s.Close(); err == nil {
		t.Fatal("a second Close returned nil")
	}
}

// The client's clean close, as gorilla's echo client does it: a close
// message, then the reader gets the server's answer.
func TestCloseMessageThenReadGetsThePeersAnswer(t *testing.T) {
	c, s := pair(t, &websocket.Upgrader{}, nil)
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() {
		for {
			if _, _, err := s.ReadMessage(); err != nil {
				return
			}
		}
	}()
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Fatalf("got %v, want close 1000", err)
		}
	case <-time.After(wait):
		t.Fatal("no answer to the close")
	}
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Time{}); err != websocket.ErrCloseSent {
		t.Fatalf("second close: %v", err)
	}
}

// Upgrade with CheckOrigin accepting all and package-level Upgrade.
func TestPackageUpgradeAcceptsEveryOrigin(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Upgrade(w, r, nil, 1024, 1024)
		if err != nil {
			return
		}
		c.WriteMessage(websocket.TextMessage, []byte("hi"))
		c.Close()
	})
	c := dial(t, url, http.Header{"Origin": {"http://elsewhere.example"}})
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "hi" {
		t.Fatalf("got %q, %v", p, err)
	}
}
