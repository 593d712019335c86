package rally_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// violation is one rule of RFC 6455 broken on the wire. wire holds the
// frames as a server would send them (unmasked); towards a server they are
// sent masked with the key 00 00 00 00 (see maskedZero), so the payload
// bytes read the same in both directions. code is the close code the
// receiver must send, rule a word its *ProtocolError's Rule must contain.
type violation struct {
	name string
	wire string
	code uint16
	rule string
}

// violations is the specification of what a receiver fails, on either
// side. Frames that claim more payload than they carry are cut short on
// purpose: the receiver must fail on what it has, not wait for the rest.
var violations = []violation{
	// RFC 6455 5.5: control frames carry at most 125 bytes and are never fragmented.
	{"PingOf126Bytes", "89 7e 00 7e " + zeros(126), 1002, "125"},
	{"PongOf126BytesHeaderOnly", "8a 7e 00 7e", 1002, "125"},
	{"CloseOf126Bytes", "88 7e 00 7e 03 e8 " + zeros(124), 1002, "125"},
	{"PingWithoutFIN", "09 00", 1002, "fragmented control"},
	{"PongWithoutFIN", "0a 01 61", 1002, "fragmented control"},
	{"CloseWithoutFIN", "08 02 03 e8", 1002, "fragmented control"},
	// RFC 6455 5.2: RSV bits without a negotiated extension.
	{"RSV1OnText", "c1 01 61", 1002, "rsv"},
	{"RSV2OnText", "a1 01 61", 1002, "rsv"},
	{"RSV3OnBinary", "92 01 61", 1002, "rsv"},
	{"AllRSVOnBinary", "f2 01 61", 1002, "rsv"},
	{"RSV1OnContinuation", "01 01 61 c0 01 62", 1002, "rsv"},
	{"RSV1OnPing", "c9 00", 1002, "rsv"},
	{"RSV3OnClose", "98 02 03 e8", 1002, "rsv"},
	// RFC 6455 5.2: reserved opcodes, data 0x3-0x7 and control 0xB-0xF.
	{"ReservedDataOpcode3", "83 00", 1002, "reserved opcode"},
	{"ReservedDataOpcode4", "84 01 61", 1002, "reserved opcode"},
	{"ReservedDataOpcode5", "85 00", 1002, "reserved opcode"},
	{"ReservedDataOpcode6", "86 00", 1002, "reserved opcode"},
	{"ReservedDataOpcode7", "07 00", 1002, "reserved opcode"},
	{"ReservedControlOpcodeB", "8b 00", 1002, "reserved opcode"},
	{"ReservedControlOpcodeC", "8c 01 61", 1002, "reserved opcode"},
	{"ReservedControlOpcodeD", "8d 00", 1002, "reserved opcode"},
	{"ReservedControlOpcodeE", "8e 00", 1002, "reserved opcode"},
	{"ReservedControlOpcodeF", "0f 00", 1002, "reserved opcode"},
	{"ReservedOpcodeInsideAFragmentedMessage", "01 01 61 83 00", 1002, "reserved opcode"},
	// RFC 6455 5.4: continuation frames belong to a message in progress, and
	// a new message does not start inside one.
	{"FinalContinuationWithNoMessageStarted", "80 01 61", 1002, "continuation"},
	{"ContinuationFragmentWithNoMessageStarted", "00 01 61", 1002, "continuation"},
	{"ContinuationAfterTheFinalFrame", "81 01 61 80 01 62", 1002, "continuation"},
	{"TextInsideAFragmentedText", "01 01 61 81 01 62", 1002, "inside a fragmented"},
	{"BinaryInsideAFragmentedText", "01 01 61 82 01 62", 1002, "inside a fragmented"},
	{"TextFragmentInsideAFragmentedBinary", "02 01 61 01 01 62", 1002, "inside a fragmented"},
	// RFC 6455 5.2: the 64-bit length has its most significant bit clear.
	{"LengthWithTheMostSignificantBitSet", "82 7f 80 00 00 00 00 00 00 00", 1002, "most significant"},
	// RFC 6455 5.5.1: a close body is empty or starts with a 2-byte code.
	{"CloseWithA1ByteBody", "88 01 03", 1002, "1 byte"},
	// RFC 6455 8.1: text and close reasons are UTF-8.
	{"TextWithInvalidUTF8", "81 02 c3 28", 1007, "utf-8"},
	{"TextEndingInsideAUTF8Sequence", "81 02 61 e2", 1007, "utf-8"},
	{"FragmentedTextEndingInsideAUTF8Sequence", "01 02 61 e2 80 01 82", 1007, "utf-8"},
	{"CloseReasonWithInvalidUTF8", "88 04 03 e8 c3 28", 1007, "utf-8"},
	// RFC 6455 10.4: the default limit of 16 MiB is checked on the header;
	// only the header of a 4 GiB frame is sent.
	{"MessageOverTheDefaultLimitHeaderOnly", "82 7f 00 00 00 01 00 00 00 00", 1009, "limit"},
	{"MessageOneByteOverTheDefaultLimitHeaderOnly", "82 7f 00 00 00 00 01 00 00 01", 1009, "limit"},
}

// failOnServer sends wire from a raw client (chop > 0: in writes of chop
// bytes) to a rally Server and checks the failure: a close frame with code
// on the wire, then the server closing TCP first, then Server.Close called
// once with a typed error naming rule.
func failOnServer(t *testing.T, opts *rally.AcceptOptions, wire []byte, chop int, code uint16, rule string) {
	t.Helper()
	rec := newRecorder()
	s := &rally.Server{Options: opts, Close: rec.close}
	p := dialPeer(t, serve(t, s))
	var err error
	if chop > 0 {
		err = p.WriteChopped(wire, chop)
	} else {
		err = p.WriteRaw(wire)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := p.ExpectClose(t, code)
	if f.Masked {
		t.Error("the server's close frame is masked")
	}
	checkCloseFrame(t, f)
	p.ExpectEOF(t) // the server closes TCP first (RFC 6455 7.1.1)
	p.Close()
	checkProtocolError(t, rec.waitClose(t), code, rule)
}

func TestServerFailsEachProtocolViolationWithItsCloseCode(t *testing.T) {
	for _, v := range violations {
		t.Run(v.name, func(t *testing.T) {
			failOnServer(t, nil, maskedZero(hx(v.wire)), 0, v.code, v.rule)
		})
	}
}

func TestServerFailsAnUnmaskedFrameWith1002(t *testing.T) {
	for _, wire := range []string{
		"81 02 68 69", // text "hi"
		"89 00",       // ping
		"88 02 03 e8", // close 1000
	} {
		t.Run(norm(wire), func(t *testing.T) {
			failOnServer(t, nil, hx(wire), 0, 1002, "not masked")
		})
	}
}

// badUTF8 lists byte strings that stop being a prefix of valid UTF-8 at
// their last byte (RFC 3629 section 4): whatever follows, the text is bad.
var badUTF8 = []struct {
	name string
	text string
}{
	{"ContinuationByteWithoutALead", "61 80"},
	{"C0IsNeverALeadByte", "61 c0"},
	{"F5IsNeverALeadByte", "61 f5"},
	{"OverlongThreeByteForm", "e0 80"},
	{"Surrogate", "ed a0"},
	{"AboveU+10FFFF", "f4 90"},
	{"TwoByteSequenceCutByASCII", "ce 41"},
	{"FourByteSequenceCutByASCII", "f0 9f 98 41"},
}

// utf8Deliveries are the three ways the bad byte reaches the receiver, as
// frames a server would send (unmasked). Each sends the text up to and
// including the bad byte and never the 16 bytes the header promised after
// it: the receiver must fail on the bad byte, not on the message's end.
var utf8Deliveries = []struct {
	name  string
	chop  int
	build func(text []byte) []byte
}{
	{"InOneFrame", 0, func(text []byte) []byte {
		return append(hx(fmt.Sprintf("81 %02x", len(text)+16)), text...)
	}},
	{"SplitAcrossFragments", 0, func(text []byte) []byte {
		// The first fragment ends just before the bad byte, inside its
		// sequence where there is one: the validator's state must carry over.
		head, bad := text[:len(text)-1], text[len(text)-1:]
		b := append(hx(fmt.Sprintf("01 %02x", len(head))), head...)
		b = append(b, hx("80 11")...)
		return append(b, bad...)
	}},
	{"SplitAcrossTCPReads", 1, func(text []byte) []byte {
		return append(hx(fmt.Sprintf("81 %02x", len(text)+16)), text...)
	}},
}

func TestServerFailsInvalidUTF8With1007AsSoonAsTheBadByteArrives(t *testing.T) {
	for _, d := range utf8Deliveries {
		for _, u := range badUTF8 {
			t.Run(d.name+"/"+u.name, func(t *testing.T) {
				failOnServer(t, nil, maskedZero(d.build(hx(u.text))), d.chop, 1007, "utf-8")
			})
		}
	}
}

// echoServer is a rally Server that echoes each message with its type.
func echoServer() *rally.Server {
	return &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Write(context.Background(), typ, p)
	}}
}

func TestServerAcceptsUTF8SplitAcrossFragmentsAndTCPReads(t *testing.T) {
	// "€" is e2 82 ac; "𝄞" is f0 9d 84 9e.
	p := dialPeer(t, serve(t, echoServer()))
	wire := maskedZero(hx("01 01 e2  00 01 82  80 05 ac f0 9d 84 9e"))
	if err := p.WriteChopped(wire, 1); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "81 07 e2 82 ac f0 9d 84 9e")
}

func TestServerUnmasksPayloadWithTheClientsKey(t *testing.T) {
	p := dialPeer(t, serve(t, echoServer()))
	// "Hello" masked with 37 fa 21 3d: the example of RFC 6455 5.7.
	if err := p.WriteRaw(hx("81 85 37 fa 21 3d 7f 9f 4d 51 58")); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "81 05 48 65 6c 6c 6f")
	// Fragmented "Hel" "lo", the second fragment with its own key.
	if err := p.WriteRaw(hx("01 83 37 fa 21 3d 7f 9f 4d  80 82 00 01 00 00 6c 6e")); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "81 05 48 65 6c 6c 6f")
}

func TestServerChecksTheReadLimitOnHeadersAndOnTheRunningTotal(t *testing.T) {
	opts := &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1000}}
	for _, c := range []struct {
		name string
		wire string // frames as sent before the failure; the last one is header only
	}{
		{"OneFrameOf1001Bytes", "82 7e 03 e9"},
		{"FragmentsOf600And401Bytes", "02 7e 02 58 " + zeros(600) + " 80 7e 01 91"},
		{"FragmentsOf1000And1Bytes", "02 7e 03 e8 " + zeros(1000) + " 80 01"},
		{"EmptyFragmentsThen1001", "02 00 00 00 80 7e 03 e9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			failOnServer(t, opts, maskedZero(hx(c.wire)), 0, 1009, "limit")
		})
	}
}

func TestServerAcceptsAMessageOfExactlyTheReadLimit(t *testing.T) {
	opts := &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1000}}
	sizes := make(chan int, 4)
	s := &rally.Server{Options: opts, Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		sizes <- len(p)
		c.Write(context.Background(), rally.Text, []byte("ok"))
	}}
	p := dialPeer(t, serve(t, s))
	for _, wire := range []string{
		"82 7e 03 e8 " + zeros(1000),                               // one frame
		"02 7e 02 58 " + zeros(600) + " 80 7e 01 90 " + zeros(400), // 600 + 400
	} {
		if err := p.WriteRaw(maskedZero(hx(wire))); err != nil {
			t.Fatal(err)
		}
		wantWire(t, p, "81 02 6f 6b")
		if n := <-sizes; n != 1000 {
			t.Fatalf("message of %d bytes, want 1000", n)
		}
	}
}

func TestServerAcceptsAMessageOfExactlyTheDefault16MiBLimit(t *testing.T) {
	sizes := make(chan int, 1)
	s := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		sizes <- len(p)
		c.Write(context.Background(), rally.Text, []byte("ok"))
	}}
	p := dialPeer(t, serve(t, s))
	msg := make([]byte, rally.DefaultReadLimit)
	if err := p.WriteFrame(rawpeer.Binary(msg)); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "81 02 6f 6b")
	if n := <-sizes; n != 16<<20 {
		t.Fatalf("message of %d bytes, want %d", n, 16<<20)
	}
}

func TestServerFailsAMessageOfTooManyFragmentsWith1008(t *testing.T) {
	opts := &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MaxFragments: 4}}
	t.Run("FourFragmentsAreAccepted", func(t *testing.T) {
		s := echoServer()
		s.Options = opts
		p := dialPeer(t, serve(t, s))
		if err := p.WriteRaw(maskedZero(hx("01 01 61 00 01 62 00 01 63 80 01 64"))); err != nil {
			t.Fatal(err)
		}
		wantWire(t, p, "81 04 61 62 63 64")
	})
	t.Run("TheFifthFragmentFails", func(t *testing.T) {
		failOnServer(t, opts, maskedZero(hx("01 01 61 00 01 62 00 01 63 00 01 64 80 01 65")), 0, 1008, "fragments")
	})
	t.Run("ControlFramesBetweenFragmentsDoNotCount", func(t *testing.T) {
		s := echoServer()
		s.Options = opts
		p := dialPeer(t, serve(t, s))
		if err := p.WriteRaw(maskedZero(hx("01 01 61 89 00 00 01 62 89 00 00 01 63 89 00 80 01 64"))); err != nil {
			t.Fatal(err)
		}
		// Pings that arrive together may be answered by one pong: a
		// newer ping's pong replaces an unsent older one (RFC 6455 5.5.3).
		pongs := 0
		for {
			f, raw := readRaw(t, p)
			if f.Opcode == rawpeer.OpPong && raw == "8a 00" {
				pongs++
				continue
			}
			if raw != "81 04 61 62 63 64" {
				t.Fatalf("on the wire: %s, want the pongs then 81 04 61 62 63 64", raw)
			}
			break
		}
		if pongs < 1 || pongs > 3 {
			t.Errorf("%d pongs for 3 pings, want 1 to 3", pongs)
		}
	})
}

func TestServerReadErrorsAreTypedAndDeliveredOnce(t *testing.T) {
	c, p := acceptConn(t, nil)
	if err := p.WriteRaw(maskedZero(hx("81 02 c3 28"))); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Read(ctxT(t))
	checkProtocolError(t, err, 1007, "utf-8")
	p.ExpectClose(t, 1007)
	p.ExpectEOF(t)
	p.Close()
	for _, read := range []struct {
		name string
		do   func() error
	}{
		{"Read", func() error { _, _, err := c.Read(ctxT(t)); return err }},
		{"ReadAppend", func() error { _, _, err := c.ReadAppend(ctxT(t), nil); return err }},
		{"Reader", func() error { _, _, err := c.Reader(ctxT(t)); return err }},
	} {
		err := read.do()
		var ce *rally.CloseError
		if !errors.Is(err, rally.ErrClosed) || errors.As(err, &ce) {
			t.Errorf("%s after the end = %v, want rally.ErrClosed (the *CloseError is delivered once)", read.name, err)
		}
	}
	waitDone(t, c)
}

func TestServerReadsAFrameSentInTheSameWriteAsTheHandshake(t *testing.T) {
	addr := serve(t, echoServer())
	p, err := rawpeer.Connect(addr, wireTimeout())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	key := rawpeer.NewKey()
	// Request, text "hi" and ping "p" (mask 01 02 03 04) in one write.
	wire := append(rawpeer.HandshakeRequest(addr, "/", key, nil), hx("81 82 01 02 03 04 69 6b  89 81 01 02 03 04 71")...)
	if err := p.WriteRaw(wire); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadResponse(key); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range 2 {
		_, h := readRaw(t, p)
		got[h] = true
	}
	for _, want := range []string{"81 02 68 69", "8a 01 70"} {
		if !got[want] {
			t.Errorf("frames on the wire %v lack %s", got, want)
		}
	}
}

func TestServerRefusesAnUpgradeRequestWithABodyAndNeverParsesIt(t *testing.T) {
	for _, c := range []struct {
		name   string
		header http.Header
		body   []byte
	}{
		// The body is a masked text frame "hi" a server must never see.
		{"ContentLength", http.Header{"Content-Length": {"8"}}, hx("81 82 00 00 00 00 68 69")},
		{"Chunked", http.Header{"Transfer-Encoding": {"chunked"}}, append([]byte("8\r\n"), append(hx("81 82 00 00 00 00 68 69"), "\r\n0\r\n\r\n"...)...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var events atomic.Int32
			s := &rally.Server{
				Open:    func(*rally.Conn) { events.Add(1) },
				Message: func(*rally.Conn, rally.MessageType, []byte) { events.Add(1) },
				Close:   func(*rally.Conn, *rally.CloseError) { events.Add(1) },
			}
			addr := serve(t, s)
			p, err := rawpeer.Connect(addr, wireTimeout())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			key := rawpeer.NewKey()
			if err := p.WriteRaw(append(rawpeer.HandshakeRequest(addr, "/", key, c.header), c.body...)); err != nil {
				t.Fatal(err)
			}
			resp, err := p.ReadResponse(key)
			if resp == nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("answer %v (%v), want 400", resp, err)
			}
			// The response is flushed after the handler returned: no
			// callback ran, and none will, since no connection was opened.
			if n := events.Load(); n != 0 {
				t.Errorf("%d callbacks ran for a refused request", n)
			}
			if f, err := p.ReadFrame(); err == nil {
				t.Errorf("a frame %+v followed the 400", f)
			}
		})
	}
}

func TestServerCallbackThatCallsCloseReturnsAtOnceAndTheHandshakeCompletes(t *testing.T) {
	rec := newRecorder()
	returned := make(chan error, 1)
	s := &rally.Server{
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			returned <- c.Close(4000, "done")
		},
		Close: rec.close,
	}
	p := dialPeer(t, serve(t, s))
	if err := p.WriteFrame(rawpeer.Text("bye")); err != nil {
		t.Fatal(err)
	}
	// Close returns before the peer answers: the callback does not wait.
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Close from a callback = %v", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("Close from a callback did not return before the peer answered")
	}
	wantWire(t, p, "88 06 0f a0 64 6f 6e 65")
	if err := p.WriteFrame(rawpeer.Close(4000, "")); err != nil {
		t.Fatal(err)
	}
	p.ExpectEOF(t)
	p.Close()
	ce := rec.waitClose(t)
	if ce.Code != 4000 || ce.Err != nil {
		t.Errorf("Server.Close got %v, want the peer's answer 4000 with no cause", ce)
	}
}

func TestServerCallbacksMayWriteAndRunInOrderWithTheUpgradeData(t *testing.T) {
	rec := newRecorder()
	s := &rally.Server{
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			return "user-42", true
		},
		Open: func(c *rally.Conn) {
			rec.add(fmt.Sprintf("open %v", c.Data()))
			c.Write(context.Background(), rally.Text, []byte("hello"))
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			rec.add(fmt.Sprintf("message %v %s %d %v", typ, p[:min(len(p), 3)], len(p), c.Data()))
			c.Write(context.Background(), typ, p)
		},
		Close: func(c *rally.Conn, err *rally.CloseError) {
			rec.add(fmt.Sprintf("data %v", c.Data()))
			rec.close(c, err)
		},
	}
	p := dialPeer(t, serve(t, s))
	wantWire(t, p, "81 05 68 65 6c 6c 6f")
	if err := p.WriteFrame(rawpeer.Text("one")); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "81 03 6f 6e 65")
	// A message of 1 MiB: the echo from the callback passes the send queue.
	big := bytes.Repeat([]byte("two"), 1<<20/3)
	if err := p.WriteFrame(rawpeer.Binary(big)); err != nil {
		t.Fatal(err)
	}
	f, _ := readRaw(t, p)
	if f.Opcode != rawpeer.OpBinary || !f.Fin || !bytes.Equal(f.Payload, big) {
		t.Fatalf("echo of 1 MiB: opcode %#x fin %v %d bytes", f.Opcode, f.Fin, len(f.Payload))
	}
	if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
		t.Fatal(err)
	}
	wantWire(t, p, "88 02 03 e8")
	p.ExpectEOF(t)
	p.Close()
	rec.waitClose(t)
	want := []string{
		"open user-42",
		"message text one 3 user-42",
		fmt.Sprintf("message binary two %d user-42", len(big)),
		"data user-42",
		"close 1000",
	}
	if got := rec.log(); !slices.Equal(got, want) {
		t.Errorf("callbacks ran as\n%q\nwant\n%q", got, want)
	}
}

func TestServerUpgradeHookMayRefuseTheRequest(t *testing.T) {
	var opened atomic.Int32
	s := &rally.Server{
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return nil, false
		},
		Open: func(*rally.Conn) { opened.Add(1) },
	}
	_, resp, err := rawpeer.DialClient(serve(t, s), "/", nil, wireTimeout())
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("answer %v (%v), want 401", resp, err)
	}
	if opened.Load() != 0 {
		t.Error("Open ran for a refused request")
	}
}

func TestServerPanickingCallbackClosesWith1011AndLogs(t *testing.T) {
	for _, where := range []string{"Open", "Message", "Ping"} {
		t.Run(where, func(t *testing.T) {
			var log syncBuffer
			rec := newRecorder()
			boom := func() { panic("boom in " + where) }
			s := &rally.Server{
				Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))}},
				Close:   rec.close,
			}
			switch where {
			case "Open":
				s.Open = func(*rally.Conn) { boom() }
			case "Message":
				s.Message = func(*rally.Conn, rally.MessageType, []byte) { boom() }
			case "Ping":
				s.Ping = func(*rally.Conn, []byte) { boom() }
			}
			p := dialPeer(t, serve(t, s))
			if err := p.WriteFrame(rawpeer.Text("hi")); err != nil {
				t.Fatal(err)
			}
			if err := p.WriteFrame(rawpeer.Ping([]byte("p"))); err != nil {
				t.Fatal(err)
			}
			f := p.ExpectClose(t, 1011)
			checkCloseFrame(t, f)
			if err := p.WriteFrame(rawpeer.Close(1011, "")); err != nil {
				t.Fatal(err)
			}
			p.ExpectEOF(t)
			p.Close()
			rec.waitClose(t)
			if !strings.Contains(log.String(), "boom in "+where) {
				t.Errorf("the panic was not logged; log: %q", log.String())
			}
		})
	}
}

func TestServerPanicInTheCloseCallbackIsRecovered(t *testing.T) {
	var log syncBuffer
	called := make(chan struct{}, 2)
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))}},
		Close: func(*rally.Conn, *rally.CloseError) {
			called <- struct{}{}
			panic("boom in Close")
		},
	}
	p := dialPeer(t, serve(t, s))
	p.Close()
	select {
	case <-called:
	case <-ctxT(t).Done():
		t.Fatal("Server.Close was not called")
	}
	// The process is still alive; a second connection is served.
	q := dialPeer(t, serve(t, echoServer()))
	if err := q.WriteFrame(rawpeer.Text("x")); err != nil {
		t.Fatal(err)
	}
	wantWire(t, q, "81 01 78")
}

func TestServerAnswersPingsWithPongsOfTheSamePayloadAndCallsTheHooks(t *testing.T) {
	pings := make(chan string, 4)
	pongs := make(chan string, 4)
	s := &rally.Server{
		Ping: func(c *rally.Conn, p []byte) { pings <- string(p) },
		Pong: func(c *rally.Conn, p []byte) { pongs <- string(p) },
	}
	p := dialPeer(t, serve(t, s))
	for _, c := range []struct{ send, want string }{
		{"89 00", "8a 00"},
		{"89 05 68 65 6c 6c 6f", "8a 05 68 65 6c 6c 6f"},
		{"89 7d " + strings.Repeat("ab", 125), "8a 7d " + strings.Repeat("ab", 125)},
	} {
		if err := p.WriteRaw(maskedZero(hx(c.send))); err != nil {
			t.Fatal(err)
		}
		wantWire(t, p, c.want)
		if got, want := <-pings, string(hx(c.send)[2:]); got != want {
			t.Errorf("Server.Ping got %q, want %q", got, want)
		}
	}
	if err := p.WriteFrame(rawpeer.Pong([]byte("unsolicited"))); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-pongs:
		if got != "unsolicited" {
			t.Errorf("Server.Pong got %q", got)
		}
	case <-ctxT(t).Done():
		t.Fatal("Server.Pong was not called")
	}
}

func TestServerTCPCutWithoutACloseFrameIs1006(t *testing.T) {
	rec := newRecorder()
	p := dialPeer(t, serve(t, &rally.Server{Close: rec.close}))
	if err := p.WriteRaw(maskedZero(hx("01 05 68 65"))); err != nil { // half a frame
		t.Fatal(err)
	}
	p.Close()
	ce := rec.waitClose(t)
	if ce.Code != 1006 {
		t.Errorf("Server.Close got %v, want 1006", ce)
	}
}
