package rally_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// Close codes by class (RFC 6455 7.4): what may appear in a close frame.
var (
	validCloseCodes = []uint16{
		1000, 1001, 1002, 1003, // defined
		1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, // defined and registered
		3000, 3999, // registered with IANA
		4000, 4999, // private use
	}
	invalidCloseCodes = []uint16{
		0, 1, 999, // below the range
		1004,             // reserved
		1005, 1006, 1015, // reported locally, never sent
		1016, 1100, 2000, 2999, // unassigned protocol codes
		5000, 65535, // above the range
	}
)

// codeHex is a close code as its two wire bytes.
func codeHex(code uint16) string { return fmt.Sprintf("%02x %02x", code>>8, code&0xff) }

func TestServerEchoesEachValidReceivedCloseCodeAndReportsIt(t *testing.T) {
	for _, code := range validCloseCodes {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			c, p := acceptConn(t, nil)
			if err := p.WriteFrame(rawpeer.Close(code, "bye")); err != nil {
				t.Fatal(err)
			}
			_, _, err := c.Read(ctxT(t))
			var ce *rally.CloseError
			if !errors.As(err, &ce) || ce.Code != code || ce.Reason != "bye" || ce.Err != nil {
				t.Fatalf("Read = %v, want a *CloseError with %d \"bye\" and no cause", err, code)
			}
			// The echo carries the code and the reason, as npm ws's does.
			wantWire(t, p, "88 05 "+codeHex(code)+" 62 79 65")
			p.ExpectEOF(t)
			p.Close()
			waitDone(t, c)
		})
	}
}

func TestClientEchoesEachValidReceivedCloseCodeAndReportsIt(t *testing.T) {
	for _, code := range validCloseCodes {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			c, p := dialRaw(t, nil)
			if err := p.WriteFrame(rawpeer.Close(code, "bye")); err != nil {
				t.Fatal(err)
			}
			_, _, err := c.Read(ctxT(t))
			var ce *rally.CloseError
			if !errors.As(err, &ce) || ce.Code != code || ce.Reason != "bye" || ce.Err != nil {
				t.Fatalf("Read = %v, want a *CloseError with %d \"bye\" and no cause", err, code)
			}
			f, _ := readRaw(t, p)
			if want := codeHex(code) + " 62 79 65"; f.Opcode != rawpeer.OpClose || !f.Masked || norm(hexOf(f.Payload)) != norm(want) {
				t.Fatalf("answer: opcode %#x masked %v body %s; want a masked close %s", f.Opcode, f.Masked, hexOf(f.Payload), want)
			}
			p.Close()
			waitDone(t, c)
		})
	}
}

func TestServerFailsEachInvalidReceivedCloseCodeWith1002(t *testing.T) {
	for _, code := range invalidCloseCodes {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			failOnServer(t, nil, maskedZero(hx("88 02 "+codeHex(code))), 0, 1002, "close code")
		})
	}
}

func TestClientFailsEachInvalidReceivedCloseCodeWith1002(t *testing.T) {
	for _, code := range invalidCloseCodes {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			failOnClient(t, nil, hx("88 02 "+codeHex(code)), 0, 1002, "close code")
		})
	}
}

func TestEmptyCloseBodyIsReportedAs1005AndAnsweredWithAnEmptyClose(t *testing.T) {
	t.Run("Server", func(t *testing.T) {
		c, p := acceptConn(t, nil)
		if err := p.WriteRaw(hx("88 80 00 00 00 00")); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.Read(ctxT(t))
		var ce *rally.CloseError
		if !errors.As(err, &ce) || ce.Code != 1005 || ce.Err != nil {
			t.Fatalf("Read = %v, want a *CloseError with 1005", err)
		}
		wantWire(t, p, "88 00")
		p.ExpectEOF(t)
	})
	t.Run("Client", func(t *testing.T) {
		c, p := dialRaw(t, nil)
		if err := p.WriteRaw(hx("88 00")); err != nil {
			t.Fatal(err)
		}
		_, _, err := c.Read(ctxT(t))
		var ce *rally.CloseError
		if !errors.As(err, &ce) || ce.Code != 1005 || ce.Err != nil {
			t.Fatalf("Read = %v, want a *CloseError with 1005", err)
		}
		f, _ := readRaw(t, p)
		if f.Opcode != rawpeer.OpClose || !f.Masked || len(f.Payload) != 0 {
			t.Fatalf("answer: opcode %#x masked %v body %s; want a masked empty close", f.Opcode, f.Masked, hexOf(f.Payload))
		}
		p.Close()
		waitDone(t, c)
	})
	t.Run("ServerCallback", func(t *testing.T) {
		rec := newRecorder()
		p := dialPeer(t, serve(t, &rally.Server{Close: rec.close}))
		if err := p.WriteRaw(hx("88 80 00 00 00 00")); err != nil {
			t.Fatal(err)
		}
		wantWire(t, p, "88 00")
		p.ExpectEOF(t)
		p.Close()
		if ce := rec.waitClose(t); ce.Code != 1005 || ce.Err != nil {
			t.Errorf("Server.Close got %v, want 1005", ce)
		}
	})
}

// closeSides runs f against a server connection and a client connection;
// masked says whether that side's frames are masked.
func closeSides(t *testing.T, f func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool)) {
	t.Run("Server", func(t *testing.T) {
		c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{CloseTimeout: wireTimeout()}})
		f(t, c, p, false)
	})
	t.Run("Client", func(t *testing.T) {
		c, p := dialRaw(t, &rally.DialOptions{ConnOptions: rally.ConnOptions{CloseTimeout: wireTimeout()}})
		f(t, c, p, true)
	})
}

// wantFrame reads one frame and fails unless it has opcode, payload, FIN
// and the masking of the side that sent it.
func wantFrame(t *testing.T, p *rawpeer.Peer, opcode byte, payload string, masked bool) {
	t.Helper()
	f, raw := readRaw(t, p)
	if f.Opcode != opcode || !f.Fin || f.Masked != masked || string(f.Payload) != payload {
		t.Fatalf("frame %s (opcode %#x, fin %v, masked %v, payload %q), want opcode %#x, fin, masked %v, payload %q",
			raw, f.Opcode, f.Fin, f.Masked, f.Payload, opcode, masked, payload)
	}
}

func TestCloseRefusesAnInvalidCodeOrReasonAndLeavesTheConnectionAsItWas(t *testing.T) {
	bad := []struct {
		name   string
		code   uint16
		reason string
	}{
		{"Reason124Bytes", 1000, strings.Repeat("r", 124)},
		{"ReasonInvalidUTF8", 1000, "ok\xc3\x28"},
		{"ReasonWithoutCode", 0, "why"},
	}
	for _, code := range invalidCloseCodes {
		if code != 0 {
			bad = append(bad, struct {
				name   string
				code   uint16
				reason string
			}{fmt.Sprint("Code", code), code, ""})
		}
	}
	closeSides(t, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
		for _, b := range bad {
			if err := c.Close(b.code, b.reason); err == nil || errors.Is(err, rally.ErrClosed) {
				t.Errorf("Close(%d, %d-byte reason) = %v, want an argument error", b.code, len(b.reason), err)
			}
		}
		// Nothing went out and nothing changed: the next frame on the wire
		// is a message sent after the refusals.
		if err := c.Write(ctxT(t), rally.Text, []byte("still open")); err != nil {
			t.Fatalf("Write after refused Closes = %v", err)
		}
		wantFrame(t, p, rawpeer.OpText, "still open", masked)
		select {
		case <-c.Done():
			t.Fatal("a refused Close ended the connection")
		default:
		}
	})
}

func TestCloseSendsEachValidCodeClassAndAReasonOf123Bytes(t *testing.T) {
	cases := []struct {
		code   uint16
		reason string
	}{{0, ""}, {1000, strings.Repeat("é", 61) + "x"}}
	for _, code := range validCloseCodes {
		cases = append(cases, struct {
			code   uint16
			reason string
		}{code, ""})
	}
	for _, cs := range cases {
		t.Run(fmt.Sprint(cs.code), func(t *testing.T) {
			c, p := acceptConn(t, nil)
			done := make(chan error, 1)
			go func() { done <- c.Close(cs.code, cs.reason) }()
			want := "88 00"
			if cs.code != 0 {
				body := append(hx(codeHex(cs.code)), cs.reason...)
				want = fmt.Sprintf("88 %02x %s", len(body), hexOf(body))
			}
			wantWire(t, p, want)
			if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
				t.Fatal(err)
			}
			p.ExpectEOF(t)
			p.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Close = %v, want nil", err)
				}
			case <-ctxT(t).Done():
				t.Fatal("Close did not return")
			}
		})
	}
}

func TestServerCloseWaitsForThePeersCloseThenClosesTCPFirst(t *testing.T) {
	c, p := acceptConn(t, nil)
	done := make(chan error, 1)
	go func() { done <- c.Close(1000, "bye") }()
	wantWire(t, p, "88 05 03 e8 62 79 65")
	// Data the peer sent before its close is discarded by Close.
	if err := p.WriteFrame(rawpeer.Text("late")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Close returned %v before the peer's close frame", err)
	default:
	}
	if err := p.WriteFrame(rawpeer.Close(1001, "")); err != nil {
		t.Fatal(err)
	}
	p.ExpectEOF(t) // the server closed TCP while the peer's side is still open
	p.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close = %v, want nil", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("Close did not return")
	}
	waitDone(t, c)
	if err := c.Write(ctxT(t), rally.Text, []byte("x")); !errors.Is(err, rally.ErrClosed) {
		t.Errorf("Write after Close = %v, want rally.ErrClosed", err)
	}
	if err := c.Close(1000, ""); !errors.Is(err, rally.ErrClosed) {
		t.Errorf("second Close = %v, want rally.ErrClosed", err)
	}
}

func TestClientCloseWaitsForTheServerToCloseTCP(t *testing.T) {
	c, p := dialRaw(t, nil)
	done := make(chan error, 1)
	go func() { done <- c.Close(1000, "bye") }()
	f := p.ExpectClose(t, 1000)
	if !f.Masked || string(f.Payload[2:]) != "bye" {
		t.Fatalf("client close frame masked %v body %s, want masked 03 e8 \"bye\"", f.Masked, hexOf(f.Payload))
	}
	if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
		t.Fatal(err)
	}
	// RFC 6455 7.1.1: the client leaves closing TCP to the server. If it
	// closed first, EOF would arrive here at once; a window with nothing
	// in it is what "waits" looks like from the wire.
	p.SetTimeout(200 * time.Millisecond)
	err := p.WaitEOF()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("after the close handshake the client closed TCP first (%v)", err)
	}
	p.SetTimeout(wireTimeout())
	p.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close = %v, want nil", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("Close did not return after the server closed TCP")
	}
}

func TestCloseAgainstAPeerThatNeverAnswersReturns1006AfterCloseTimeout(t *testing.T) {
	check := func(t *testing.T, c *rally.Conn, p *rawpeer.Peer) {
		done := make(chan error, 1)
		go func() { done <- c.Close(1000, "") }()
		p.ExpectClose(t, 1000) // read, never answered
		select {
		case err := <-done:
			var ce *rally.CloseError
			if !errors.As(err, &ce) || ce.Code != 1006 {
				t.Errorf("Close = %v, want a *CloseError with 1006", err)
			}
		case <-ctxT(t).Done():
			t.Fatal("Close did not return within its CloseTimeout")
		}
		p.ExpectEOF(t) // the connection was cut
	}
	short := rally.ConnOptions{CloseTimeout: 100 * time.Millisecond}
	t.Run("Server", func(t *testing.T) {
		c, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: short})
		check(t, c, p)
	})
	t.Run("Client", func(t *testing.T) {
		c, p := dialRaw(t, &rally.DialOptions{ConnOptions: short})
		check(t, c, p)
	})
}

func TestCloseNowCutsTCPWithoutACloseFrameAndAReadGets1006(t *testing.T) {
	closeSides(t, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
		read := make(chan error, 1)
		ctx := ctxT(t)
		go func() {
			_, _, err := c.Read(ctx)
			read <- err
		}()
		if err := c.CloseNow(); err != nil {
			t.Fatalf("CloseNow = %v", err)
		}
		if f, err := p.ReadFrame(); err == nil {
			t.Fatalf("frame %+v after CloseNow, want none", f)
		} else if !rawpeer.IsClosedByPeer(err) {
			t.Fatalf("after CloseNow the peer reads %v, want EOF", err)
		}
		var ce *rally.CloseError
		if err := <-read; !errors.As(err, &ce) || ce.Code != 1006 {
			t.Errorf("blocked Read = %v, want a *CloseError with 1006", err)
		}
		if err := c.CloseNow(); !errors.Is(err, rally.ErrClosed) {
			t.Errorf("second CloseNow = %v, want rally.ErrClosed", err)
		}
	})
}

func TestIdleTimeoutClosesAQuietPeerWith1001(t *testing.T) {
	rec := newRecorder()
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{IdleTimeout: 50 * time.Millisecond}},
		Close:   rec.close,
	}
	p := dialPeer(t, serve(t, s))
	f := p.ExpectClose(t, 1001)
	checkCloseFrame(t, f)
	if err := p.WriteFrame(rawpeer.Close(1001, "")); err != nil {
		t.Fatal(err)
	}
	p.ExpectEOF(t)
	p.Close()
	if ce := rec.waitClose(t); ce.Code != 1001 {
		t.Errorf("Server.Close got %v, want 1001", ce)
	}
}

func TestPingIntervalPingsAQuietPeer(t *testing.T) {
	t.Run("Server", func(t *testing.T) {
		_, p := acceptConn(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{PingInterval: 20 * time.Millisecond}})
		for range 2 {
			wantWire(t, p, "89 00")
		}
	})
	t.Run("Client", func(t *testing.T) {
		_, p := dialRaw(t, &rally.DialOptions{ConnOptions: rally.ConnOptions{PingInterval: 20 * time.Millisecond}})
		for range 2 {
			f, raw := readRaw(t, p)
			if f.Opcode != rawpeer.OpPing || !f.Masked || len(f.Payload) != 0 {
				t.Fatalf("frame %s, want a masked empty ping", raw)
			}
		}
	})
}

func TestPingIntervalKeepsALivePeerOpenPastTheIdleTimeout(t *testing.T) {
	rec := newRecorder()
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
			// The idle timeout is far above what a loaded machine can delay
			// an answer by (both scale with the load); the pings come
			// often enough to outlast it.
			PingInterval: slowness.Scale(100 * time.Millisecond),
			IdleTimeout:  slowness.Scale(2 * time.Second),
		}},
		Close: rec.close,
	}
	p := dialPeer(t, serve(t, s))
	// Answer 25 pings: 1.25 idle timeouts or more.
	for range 25 {
		f, raw := readRaw(t, p)
		if f.Opcode != rawpeer.OpPing {
			t.Fatalf("frame %s while answering pings, want a ping", raw)
		}
		if err := p.WriteFrame(rawpeer.Pong(f.Payload)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
		t.Fatal(err)
	}
	p.ExpectClose(t, 1000)
	p.ExpectEOF(t)
	p.Close()
	if ce := rec.waitClose(t); ce.Code != 1000 {
		t.Errorf("Server.Close got %v, want the peer's 1000", ce)
	}
}
