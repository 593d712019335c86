package rally_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// failOnClient sends wire from a raw server (chop > 0: in writes of chop
// bytes) to a rally client that is reading, and checks the failure: Read
// returns a typed error naming rule (after any whole message before it), a masked close frame with code is on
// the wire, the client waits for the server to close TCP, and a second
// Read gets rally.ErrClosed.
func failOnClient(t *testing.T, opts *rally.DialOptions, wire []byte, chop int, code uint16, rule string) {
	t.Helper()
	c, p := dialRaw(t, opts)
	var err error
	if chop > 0 {
		err = p.WriteChopped(wire, chop)
	} else {
		err = p.WriteRaw(wire)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Messages that were whole before the violation are delivered first.
	for err == nil {
		_, _, err = c.Read(ctxT(t))
	}
	checkProtocolError(t, err, code, rule)
	f := p.ExpectClose(t, code)
	if !f.Masked {
		t.Error("the client's close frame is not masked")
	}
	checkCloseFrame(t, f)
	p.Close() // the server closes TCP first; the client follows
	waitDone(t, c)
	if _, _, err := c.Read(ctxT(t)); err != rally.ErrClosed {
		t.Errorf("second Read = %v, want rally.ErrClosed", err)
	}
}

func TestClientFailsEachProtocolViolationWithItsCloseCode(t *testing.T) {
	for _, v := range violations {
		t.Run(v.name, func(t *testing.T) {
			failOnClient(t, nil, hx(v.wire), 0, v.code, v.rule)
		})
	}
}

func TestClientFailsAMaskedFrameWith1002(t *testing.T) {
	for _, wire := range []string{
		"81 82 00 00 00 00 68 69", // text "hi", masked with a zero key
		"81 82 01 02 03 04 69 6b", // text "hi", masked
		"89 80 01 02 03 04",       // ping
		"88 82 00 00 00 00 03 e8", // close 1000
	} {
		t.Run(norm(wire), func(t *testing.T) {
			failOnClient(t, nil, hx(wire), 0, 1002, "masked")
		})
	}
}

func TestClientFailsInvalidUTF8With1007AsSoonAsTheBadByteArrives(t *testing.T) {
	for _, d := range utf8Deliveries {
		for _, u := range badUTF8 {
			t.Run(d.name+"/"+u.name, func(t *testing.T) {
				failOnClient(t, nil, d.build(hx(u.text)), d.chop, 1007, "utf-8")
			})
		}
	}
}

func TestClientChecksTheReadLimitOnHeadersAndOnTheRunningTotal(t *testing.T) {
	opts := &rally.DialOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1000}}
	t.Run("OneFrameOf1001BytesHeaderOnly", func(t *testing.T) {
		failOnClient(t, opts, hx("82 7e 03 e9"), 0, 1009, "limit")
	})
	t.Run("FragmentsOf600And401BytesHeaderOnly", func(t *testing.T) {
		failOnClient(t, opts, hx("02 7e 02 58 "+zeros(600)+" 80 7e 01 91"), 0, 1009, "limit")
	})
	t.Run("ExactlyTheLimitIsAccepted", func(t *testing.T) {
		c, p := dialRaw(t, opts)
		if err := p.WriteRaw(hx("02 7e 02 58 " + zeros(600) + " 80 7e 01 90 " + zeros(400))); err != nil {
			t.Fatal(err)
		}
		typ, msg, err := c.Read(ctxT(t))
		if err != nil || typ != rally.Binary || len(msg) != 1000 {
			t.Fatalf("Read = %v, %d bytes, %v; want binary, 1000 bytes", typ, len(msg), err)
		}
	})
}

func TestClientFailsAMessageOfTooManyFragmentsWith1008(t *testing.T) {
	opts := &rally.DialOptions{ConnOptions: rally.ConnOptions{MaxFragments: 2}}
	failOnClient(t, opts, hx("01 01 61 00 01 62 80 01 63"), 0, 1008, "fragments")
}

func TestClientReadsAFrameSentInTheSameWriteAsThe101(t *testing.T) {
	c, _ := dialRawWith(t, nil, func(nc net.Conn) (*rawpeer.Peer, error) {
		p := rawpeer.NewPeer(nc, false)
		p.SetTimeout(wireTimeout())
		r, err := p.ReadRequest()
		if err != nil {
			p.Close()
			return nil, err
		}
		resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: " + rawpeer.AcceptKey(r.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n"
		// The 101, a ping and text "hi" in one write.
		if err := p.WriteRaw(append([]byte(resp), hx("89 01 70  81 02 68 69")...)); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	})
	typ, msg, err := c.Read(ctxT(t))
	if err != nil || typ != rally.Text || string(msg) != "hi" {
		t.Fatalf("Read = %v %q %v, want text \"hi\"", typ, msg, err)
	}
}

func TestClientAnswersPingsWithMaskedPongsOfTheSamePayloadAndCallsTheHooks(t *testing.T) {
	pings := make(chan string, 4)
	pongs := make(chan string, 4)
	opts := &rally.DialOptions{ConnOptions: rally.ConnOptions{
		OnPing: func(c *rally.Conn, p []byte) { pings <- string(p) },
		OnPong: func(c *rally.Conn, p []byte) { pongs <- string(p) },
	}}
	c, p := dialRaw(t, opts)
	read := make(chan error, 1)
	ctx := ctxT(t)
	go func() {
		_, _, err := c.Read(ctx)
		read <- err
	}()
	for _, payload := range []string{"", "hello", strings.Repeat("\xab", 125)} {
		if err := p.WriteFrame(rawpeer.Ping([]byte(payload))); err != nil {
			t.Fatal(err)
		}
		f, _ := readRaw(t, p)
		if f.Opcode != rawpeer.OpPong || !f.Fin || !f.Masked || string(f.Payload) != payload {
			t.Fatalf("answer to ping %x: opcode %#x fin %v masked %v payload %x; want a masked pong with the same payload",
				payload, f.Opcode, f.Fin, f.Masked, f.Payload)
		}
		if got := <-pings; got != payload {
			t.Errorf("OnPing got %x, want %x", got, payload)
		}
	}
	if err := p.WriteFrame(rawpeer.Pong([]byte("pong"))); err != nil {
		t.Fatal(err)
	}
	if got := <-pongs; got != "pong" {
		t.Errorf("OnPong got %q", got)
	}
	if err := p.WriteFrame(rawpeer.Text("end")); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

func TestClientTCPCutWithoutACloseFrameIs1006(t *testing.T) {
	c, p := dialRaw(t, nil)
	if err := p.WriteRaw(hx("81 05 68 65")); err != nil { // half a frame
		t.Fatal(err)
	}
	p.Close()
	_, _, err := c.Read(ctxT(t))
	var ce *rally.CloseError
	if !errors.As(err, &ce) || ce.Code != 1006 || !errors.Is(err, rally.ErrClosed) {
		t.Fatalf("Read = %v, want a *CloseError with 1006", err)
	}
	waitDone(t, c)
	if _, _, err := c.Read(ctxT(t)); err != rally.ErrClosed {
		t.Errorf("second Read = %v, want rally.ErrClosed", err)
	}
}

func TestClientErrorsNeverShowTheURLsCredentials(t *testing.T) {
	secrets := []string{"user", "secret", "abc", "s3cr3t-header"}
	check := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("Dial succeeded")
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error %q shows %q", err, s)
			}
		}
	}
	opts := &rally.DialOptions{Header: http.Header{"Authorization": {"Bearer s3cr3t-header"}}}
	t.Run("ConnectionRefused", func(t *testing.T) {
		_, _, err := rally.Dial(ctxT(t), "ws://user:secret@127.0.0.1:1/?token=abc", opts)
		check(t, err)
	})
	t.Run("HandshakeRefused", func(t *testing.T) {
		ln := listen(t)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			p := rawpeer.NewPeer(nc, false)
			p.SetTimeout(wireTimeout())
			if _, err := p.ReadRequest(); err == nil {
				p.WriteRaw([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
		}()
		_, resp, err := rally.Dial(ctxT(t), "ws://user:secret@"+ln.Addr().String()+"/?token=abc", opts)
		check(t, err)
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("response %v, want the 403", resp)
		}
	})
	t.Run("HandshakeTimedOut", func(t *testing.T) {
		ln := listen(t)
		accepted := make(chan net.Conn, 1)
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		go func() {
			defer close(accepted)
			// Cancel once the server has the connection and says nothing.
			if nc, err := ln.Accept(); err == nil {
				accepted <- nc
				cancel()
			}
		}()
		_, _, err := rally.Dial(ctx, "ws://user:secret@"+ln.Addr().String()+"/?token=abc", opts)
		if nc, ok := <-accepted; ok {
			nc.Close()
		}
		check(t, err)
	})
}
