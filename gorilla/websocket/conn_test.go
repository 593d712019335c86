package websocket_test

// Black-box ports of gorilla/websocket's conn_test.go: each test names the
// gorilla test it asserts the same as. Gorilla's run over its internals
// (a fake net.Conn, its frame writer); these run over loopback, with a
// hand-written peer where the peer must misbehave.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

// As gorilla's TestFraming: messages of every length around the header's
// boundaries, written in chunks of several sizes through NextWriter and
// read in chunks of several sizes through NextReader, arrive whole.
func TestFramingMessagesOfEveryBoundaryLengthArriveWhole(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	lengths := []int{0, 1, 2, 124, 125, 126, 127, 128, 4095, 4096, 4097, 65535, 65536, 65537, 200000}
	chunks := []int{1, 3, 127, 4096, 1 << 20}
	for _, n := range lengths {
		for _, chunk := range chunks {
			if n/chunk > 5000 {
				continue // byte by byte only for the small lengths
			}
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			w, err := c.NextWriter(websocket.BinaryMessage)
			if err != nil {
				t.Fatal(err)
			}
			for p := msg; len(p) > 0; {
				k := min(chunk, len(p))
				if _, err := w.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			typ, r, err := c.NextReader()
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			buf := make([]byte, chunk)
			for {
				k, err := r.Read(buf)
				got = append(got, buf[:k]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if typ != websocket.BinaryMessage || !bytes.Equal(got, msg) {
				t.Fatalf("length %d in chunks of %d: got type %d, %d bytes", n, chunk, typ, len(got))
			}
		}
	}
}

// As gorilla's TestWriteControlDeadline: a control message whose deadline
// has passed is not sent, and the error is a timeout.
func TestWriteControlWithPassedDeadlineTimesOut(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	err := c.WriteControl(websocket.PingMessage, []byte("x"), time.Now().Add(-time.Second))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a timeout", err)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte("still open")); err != nil {
		t.Fatalf("a control message's timeout broke the write side: %v", err)
	}
}

// As gorilla's TestConcurrencyWriteControl: WriteControl from many
// goroutines, concurrently with the writer, is safe (run with -race).
func TestWriteControlIsSafeConcurrentlyWithEverything(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if err := c.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(wait)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for j := 0; j < 20; j++ {
		if err := c.WriteMessage(websocket.TextMessage, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for j := 0; j < 20; j++ {
		if _, p, err := c.ReadMessage(); err != nil || string(p) != "m" {
			t.Fatalf("echo %d: %q, %v", j, p, err)
		}
	}
}

// As gorilla's TestControl: pings and pongs of every payload length up to
// 125 reach the handlers during a read with their payload; 126 bytes are
// refused.
func TestControlMessagesReachHandlersWithTheirPayload(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	c := dial(t, url, nil)
	s := receive(t, conns)
	pings := make(chan string, 200)
	s.SetPingHandler(func(data string) error {
		pings <- data
		return s.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(wait))
	})
	pongs := make(chan string, 200)
	c.SetPongHandler(func(data string) error { pongs <- data; return nil })
	go func() {
		for {
			if _, _, err := s.ReadMessage(); err != nil {
				return
			}
		}
	}()
	for _, n := range []int{0, 1, 64, 125} {
		payload := strings.Repeat("p", n)
		if err := c.WriteControl(websocket.PingMessage, []byte(payload), time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("sync")); err != nil {
			t.Fatal(err)
		}
		if got := <-pings; got != payload {
			t.Fatalf("server's ping handler got %d bytes, want %d", len(got), n)
		}
	}
	// The pongs arrive while the client reads.
	go func() { c.ReadMessage() }()
	for _, n := range []int{0, 1, 64, 125} {
		select {
		case got := <-pongs:
			if len(got) != n {
				t.Fatalf("pong of %d bytes, want %d", len(got), n)
			}
		case <-time.After(wait):
			t.Fatal("no pong")
		}
	}
	select {
	case extra := <-pongs:
		t.Fatalf("a second pong (%d bytes): a ping handler's own pong went out besides rally's", len(extra))
	default:
	}
	if err := c.WriteControl(websocket.PingMessage, make([]byte, 126), time.Now().Add(wait)); err == nil {
		t.Fatal("a ping of 126 bytes was accepted")
	}
}

// As gorilla's TestCloseFrameBeforeFinalMessageFrame: a close frame between
// the fragments of a message ends the read of that message with the
// peer's close code.
func TestCloseFrameInsideAFragmentedMessageEndsTheRead(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	p.frame(false, 0x2, []byte("first"))
	p.closeFrame(websocket.CloseNormalClosure, "bye")
	_, r, err := s.NextReader()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if string(got) != "first" || !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("got %q, %v; want the first fragment and close 1000", got, err)
	}
	if _, _, err2 := s.NextReader(); !websocket.IsCloseError(err2, websocket.CloseNormalClosure) {
		t.Fatalf("next read: %v, want the same close error", err2)
	}
}

// As gorilla's TestEOFWithinFrame: the connection ending inside a frame's
// payload is CloseAbnormalClosure (1006) with "unexpected EOF".
func TestEOFWithinAFrameIs1006(t *testing.T) {
	for _, cut := range []int{0, 1, 10} {
		url, conns := upgraded(t, &websocket.Upgrader{})
		p := rawDial(t, url)
		s := receive(t, conns)
		p.send(true, 0x2, make([]byte, cut), 20)
		p.nc.Close()
		_, _, err := s.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseAbnormalClosure || ce.Text != io.ErrUnexpectedEOF.Error() {
			t.Fatalf("cut after %d bytes: %v, want close 1006: unexpected EOF", cut, err)
		}
	}
}

// As gorilla's TestEOFBeforeFinalFrame: the connection ending between the
// fragments of a message is 1006 as well.
func TestEOFBetweenFragmentsIs1006(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	p.frame(false, 0x2, []byte("part"))
	p.nc.Close()
	_, _, err := s.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseAbnormalClosure) {
		t.Fatalf("got %v, want close 1006", err)
	}
}

// As gorilla's TestWriteAfterMessageWriterClose: a writer that was closed
// refuses writes, and the next NextWriter works.
func TestWriteAfterWriterCloseFailsAndNextWriterWorks(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	w, err := c.NextWriter(websocket.TextMessage)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "hello")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "more"); err == nil {
		t.Fatal("a write after Close was accepted")
	}
	if err := w.Close(); err == nil {
		t.Fatal("a second Close was accepted")
	}
	w, err = c.NextWriter(websocket.TextMessage)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "world")
	w.Close()
	for _, want := range []string{"hello", "world"} {
		if _, p, err := c.ReadMessage(); err != nil || string(p) != want {
			t.Fatalf("got %q, %v; want %q", p, err, want)
		}
	}
}

// A NextWriter or WriteMessage closes the writer still open, as gorilla's
// beginMessage does: the first message is sent whole, before the next.
func TestNewWriterClosesThePreviousOne(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	w, _ := c.NextWriter(websocket.TextMessage)
	io.WriteString(w, "one")
	w2, err := c.NextWriter(websocket.TextMessage)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w2, "two")
	if err := c.WriteMessage(websocket.TextMessage, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "late"); err == nil {
		t.Fatal("the first writer still writes after a new one began")
	}
	for _, want := range []string{"one", "two", "three"} {
		if _, p, err := c.ReadMessage(); err != nil || string(p) != want {
			t.Fatalf("got %q, %v; want %q", p, err, want)
		}
	}
}

// NextReader discards what the previous reader left unread.
func TestNextReaderDiscardsTheRestOfThePreviousMessage(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	c.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte("a"), 100000))
	c.WriteMessage(websocket.TextMessage, []byte("next"))
	_, r, err := c.NextReader()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	io.ReadFull(r, buf)
	if _, p, err := c.ReadMessage(); err != nil || string(p) != "next" {
		t.Fatalf("got %q, %v; want the next message", p, err)
	}
}

// As gorilla's TestReadLimit: a message of exactly the limit is read, one
// byte more (whole or fragmented) fails with ErrReadLimit, and the peer is
// sent close 1009.
func TestReadLimitRefusesLongerMessagesWith1009(t *testing.T) {
	const limit = 512
	for _, fragmented := range []bool{false, true} {
		url, conns := upgraded(t, &websocket.Upgrader{})
		p := rawDial(t, url)
		s := receive(t, conns)
		s.SetReadLimit(limit)
		p.frame(true, 0x2, make([]byte, limit))
		if _, got, err := s.ReadMessage(); err != nil || len(got) != limit {
			t.Fatalf("a message of the limit: %d bytes, %v", len(got), err)
		}
		if fragmented {
			p.frame(false, 0x2, make([]byte, limit/2))
			p.frame(true, 0x0, make([]byte, limit/2+1))
		} else {
			p.frame(true, 0x2, make([]byte, limit+1))
		}
		if _, _, err := s.ReadMessage(); err != websocket.ErrReadLimit {
			t.Fatalf("fragmented %v: got %v, want ErrReadLimit", fragmented, err)
		}
		if _, _, err := s.NextReader(); err != websocket.ErrReadLimit {
			t.Fatalf("the next read: %v, want ErrReadLimit again", err)
		}
		if code := p.closeCode(); code != websocket.CloseMessageTooBig {
			t.Fatalf("the peer got close %d, want 1009", code)
		}
	}
}

// As gorilla's TestAddrs, TestNetConn and TestDeprecatedUnderlyingConn:
// the addresses are those of the network connection, which NetConn and
// UnderlyingConn return, on both sides.
func TestAddressesAndNetConnAreTheNetworkConnections(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	c := dial(t, url, nil)
	s := receive(t, conns)
	for _, x := range []*websocket.Conn{c, s} {
		nc := x.NetConn()
		if nc == nil || x.UnderlyingConn() != nc {
			t.Fatalf("NetConn %v, UnderlyingConn %v", nc, x.UnderlyingConn())
		}
		if x.LocalAddr().String() != nc.LocalAddr().String() || x.RemoteAddr().String() != nc.RemoteAddr().String() {
			t.Fatalf("addresses %v %v, net.Conn's %v %v", x.LocalAddr(), x.RemoteAddr(), nc.LocalAddr(), nc.RemoteAddr())
		}
	}
	if c.LocalAddr().String() != s.RemoteAddr().String() {
		t.Fatalf("client %v, server sees %v", c.LocalAddr(), s.RemoteAddr())
	}
}

// As gorilla's TestBufioReadBytes: a message read through bufio.Reader's
// ReadBytes (small reads, then io.EOF) arrives whole.
func TestBufioReadBytesReadsAMessageWhole(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	msg := append(bytes.Repeat([]byte("x"), 70000), '\n')
	c.WriteMessage(websocket.TextMessage, msg)
	_, r, err := c.NextReader()
	if err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReaderSize(r, 16).ReadBytes('\n')
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
}

// As gorilla's TestCloseError: the text of a CloseError.
func TestCloseErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  websocket.CloseError
		want string
	}{
		{websocket.CloseError{Code: websocket.CloseNormalClosure}, "websocket: close 1000 (normal)"},
		{websocket.CloseError{Code: websocket.CloseNormalClosure, Text: "bye"}, "websocket: close 1000 (normal): bye"},
		{websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: "unexpected EOF"}, "websocket: close 1006 (abnormal closure): unexpected EOF"},
		{websocket.CloseError{Code: websocket.CloseTLSHandshake}, "websocket: close 1015 (TLS handshake error)"},
		{websocket.CloseError{Code: 4000, Text: "app"}, "websocket: close 4000: app"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// As gorilla's TestUnexpectedCloseErrors.
func TestIsUnexpectedCloseError(t *testing.T) {
	for _, tc := range []struct {
		err      error
		expected []int
		want     bool
	}{
		{&websocket.CloseError{Code: websocket.CloseNormalClosure}, []int{websocket.CloseNormalClosure}, false},
		{&websocket.CloseError{Code: websocket.CloseGoingAway}, []int{websocket.CloseNormalClosure, websocket.CloseGoingAway}, false},
		{&websocket.CloseError{Code: websocket.CloseAbnormalClosure}, []int{websocket.CloseNormalClosure, websocket.CloseGoingAway}, true},
		{&websocket.CloseError{Code: websocket.CloseNormalClosure}, nil, true},
		{errors.New("other"), nil, false},
	} {
		if got := websocket.IsUnexpectedCloseError(tc.err, tc.expected...); got != tc.want {
			t.Errorf("IsUnexpectedCloseError(%v, %v) = %v", tc.err, tc.expected, got)
		}
	}
	if !websocket.IsCloseError(&websocket.CloseError{Code: 1001}, 1000, 1001) || websocket.IsCloseError(&websocket.CloseError{Code: 1002}, 1000) {
		t.Error("IsCloseError")
	}
}

// As gorilla's TestFailedConnectionReadPanic, except for the panic: after
// a read error every later read returns the same error, however many
// times a program loops on it (gorilla panics at the thousandth).
func TestRepeatedReadsAfterAnErrorReturnItWithoutPanic(t *testing.T) {
	url, conns := upgraded(t, &websocket.Upgrader{})
	p := rawDial(t, url)
	s := receive(t, conns)
	p.nc.Close()
	_, _, first := s.ReadMessage()
	for i := 0; i < 2000; i++ {
		if _, _, err := s.NextReader(); err != first {
			t.Fatalf("read %d: %v, want %v", i, err, first)
		}
	}
}

// As gorilla's TestValidCompressionLevel: levels -2 to 9 are valid.
func TestSetCompressionLevelChecksTheRange(t *testing.T) {
	url := server(t, echoHandler(&websocket.Upgrader{}))
	c := dial(t, url, nil)
	for _, l := range []int{-3, 10} {
		if c.SetCompressionLevel(l) == nil {
			t.Errorf("level %d accepted", l)
		}
	}
	for l := -2; l <= 9; l++ {
		if err := c.SetCompressionLevel(l); err != nil {
			t.Errorf("level %d: %v", l, err)
		}
	}
}
