package rawpeer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const testTimeout = 10 * time.Second

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildProducesTheRFC6455Section57Examples(t *testing.T) {
	mask := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	tests := []struct {
		name  string
		frame Frame
		want  string // whole frame, or its prefix when prefixOnly
		pre   bool
	}{
		{"unmasked text Hello", Text("Hello"), "81 05 48 65 6c 6c 6f", false},
		{"masked text Hello", Frame{Fin: true, Opcode: OpText, Masked: true, Mask: mask, Payload: []byte("Hello")},
			"81 85 37 fa 21 3d 7f 9f 4d 51 58", false},
		{"first fragment Hel", Fragment(OpText, []byte("Hel"), false), "01 03 48 65 6c", false},
		{"last fragment lo", Continuation([]byte("lo"), true), "80 02 6c 6f", false},
		{"unmasked ping Hello", Ping([]byte("Hello")), "89 05 48 65 6c 6c 6f", false},
		{"masked pong Hello", Frame{Fin: true, Opcode: OpPong, Masked: true, Mask: mask, Payload: []byte("Hello")},
			"8a 85 37 fa 21 3d 7f 9f 4d 51 58", false},
		{"256-byte binary", Binary(make([]byte, 256)), "82 7e 01 00", true},
		{"64 KiB binary", Binary(make([]byte, 65536)), "82 7f 00 00 00 00 00 01 00 00", true},
		{"close 1000 bye", Close(1000, "bye"), "88 05 03 e8 62 79 65", false},
		{"empty close", Close(0, "ignored"), "88 00", false},
		{"rsv and reserved opcode", Frame{Fin: true, Rsv: Rsv1 | Rsv3, Opcode: 0x3}, "d3 00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Build(tt.frame)
			want := unhex(t, tt.want)
			if tt.pre {
				if !bytes.HasPrefix(got, want) || len(got) != len(want)+len(tt.frame.Payload) {
					t.Fatalf("Build = %x... (%d bytes), want prefix %x and %d bytes", got[:min(len(got), 16)], len(got), want, len(want)+len(tt.frame.Payload))
				}
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Build = %x, want %x", got, want)
			}
		})
	}
}

func TestBuildLeavesTheCallersPayloadUnmasked(t *testing.T) {
	p := []byte("Hello")
	Build(Frame{Fin: true, Opcode: OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: p})
	if string(p) != "Hello" {
		t.Fatalf("payload changed to %q", p)
	}
}

func TestBuildLenWritesNonMinimalLengthForms(t *testing.T) {
	f := Text("Hi")
	if got, want := BuildLen(f, Len16), unhex(t, "81 7e 00 02 48 69"); !bytes.Equal(got, want) {
		t.Errorf("16-bit form = %x, want %x", got, want)
	}
	if got, want := BuildLen(f, Len64), unhex(t, "81 7f 00 00 00 00 00 00 00 02 48 69"); !bytes.Equal(got, want) {
		t.Errorf("64-bit form = %x, want %x", got, want)
	}
}

func TestAcceptKeyMatchesTheRFC6455Example(t *testing.T) {
	if got := AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("AcceptKey = %q", got)
	}
}

func TestParseCloseSplitsCodeAndReasonAndRejectsOneByteBodies(t *testing.T) {
	code, reason, ok := ParseClose(unhex(t, "03e8 6279 65"))
	if code != 1000 || string(reason) != "bye" || !ok {
		t.Errorf("ParseClose = %d %q %v", code, reason, ok)
	}
	if code, _, ok := ParseClose(nil); code != 0 || !ok {
		t.Errorf("empty body: %d %v", code, ok)
	}
	if _, _, ok := ParseClose([]byte{3}); ok {
		t.Error("1-byte body accepted")
	}
}

func TestValidUTF8FollowsRFC3629(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		ok   bool
	}{
		{"empty", "", true},
		{"U+007F", "7f", true},
		{"U+0080", "c2 80", true},
		{"U+07FF", "df bf", true},
		{"U+0800", "e0 a0 80", true},
		{"U+D7FF", "ed 9f bf", true},
		{"U+E000", "ee 80 80", true},
		{"U+FFFF", "ef bf bf", true},
		{"U+10000", "f0 90 80 80", true},
		{"U+10FFFF", "f4 8f bf bf", true},
		{"kosme", "ce ba e1 bd b9 cf 83 ce bc ce b5", true},
		{"overlong slash 2 bytes", "c0 af", false},
		{"overlong C1", "c1 bf", false},
		{"overlong 3 bytes", "e0 80 af", false},
		{"overlong 4 bytes", "f0 80 80 af", false},
		{"surrogate U+D800", "ed a0 80", false},
		{"surrogate U+DFFF", "ed bf bf", false},
		{"above U+10FFFF", "f4 90 80 80", false},
		{"F5 lead byte", "f5 80 80 80", false},
		{"FE", "fe", false},
		{"FF", "ff", false},
		{"lone continuation", "80", false},
		{"truncated 2 bytes", "c2", false},
		{"truncated 3 bytes", "e1 80", false},
		{"truncated 4 bytes", "f1 80 80", false},
		{"continuation missing mid text", "c2 41", false},
	}
	for _, tt := range tests {
		b := unhex(t, tt.hex)
		if got := ValidUTF8(b); got != tt.ok {
			t.Errorf("%s (%s): ValidUTF8 = %v, want %v", tt.name, tt.hex, got, tt.ok)
		}
	}
}

func TestScanUTF8StopsAtTheFirstByteNoContinuationCanFix(t *testing.T) {
	tests := []struct {
		hex  string
		n    int
		ok   bool
		name string
	}{
		{"41 f4", 1, true, "truncated 4-byte lead at the end may still be completed"},
		{"41 f4 90", 2, false, "second byte of F4 above 8F"},
		{"41 ed a0", 2, false, "surrogate known at the second byte"},
		{"41 80", 1, false, "lone continuation"},
		{"ce ba e1 bd", 2, true, "kosme cut inside the second character"},
	}
	for _, tt := range tests {
		n, ok := ScanUTF8(unhex(t, tt.hex))
		if n != tt.n || ok != tt.ok {
			t.Errorf("%s: ScanUTF8(%s) = %d, %v; want %d, %v", tt.name, tt.hex, n, ok, tt.n, tt.ok)
		}
	}
}

// FuzzValidUTF8 cross-checks the peer's own validator against the standard
// library's: two independent implementations of RFC 3629 must agree.
func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{"", "Hello", "\xce\xba\xe1\xbd\xb9", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\xf0\x9f\x98"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidUTF8(b), utf8.Valid(b); got != want {
			t.Fatalf("ValidUTF8(%x) = %v, utf8.Valid = %v", b, got, want)
		}
		n, ok := ScanUTF8(b)
		if n > len(b) || ok && !utf8.Valid(b[:n]) {
			t.Fatalf("ScanUTF8(%x) = %d, %v: prefix not valid", b, n, ok)
		}
	})
}

// pair returns a client and a server peer joined over loopback TCP after a
// real opening handshake.
func pair(t *testing.T) (client, server *Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		p   *Peer
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- result{nil, err}
			return
		}
		p, _, err := AcceptServer(nc, http.Header{"X-Test": {"yes"}}, testTimeout)
		done <- result{p, err}
	}()
	c, resp, err := DialClient(ln.Addr().String(), "/echo", nil, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Test") != "yes" {
		t.Errorf("extra response header lost: %v", resp.Header)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { c.Close(); r.p.Close() })
	return c, r.p
}

func TestLoopbackPeersRoundTripFramesOfEveryLengthForm(t *testing.T) {
	client, server := pair(t)
	for _, n := range []int{0, 1, 125, 126, 127, 128, 65535, 65536, 1 << 20} {
		payload := bytes.Repeat([]byte{byte(n), 0xA5, 0x5A}, n/3+1)[:n]
		errc := make(chan error, 1)
		go func() { errc <- client.WriteFrame(Binary(payload)) }()
		got, err := server.ReadFrame()
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !got.Masked || !got.Fin || got.Opcode != OpBinary || !bytes.Equal(got.Payload, payload) {
			t.Fatalf("%d bytes: server read masked=%v fin=%v op=%x, payload equal %v", n, got.Masked, got.Fin, got.Opcode, bytes.Equal(got.Payload, payload))
		}
		go func() { errc <- server.WriteFrame(got) }()
		back, err := client.ReadFrame()
		if err != nil {
			t.Fatalf("%d bytes back: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if back.Masked != got.Masked || !bytes.Equal(back.Payload, payload) {
			t.Fatalf("%d bytes back: masked=%v, payload equal %v", n, back.Masked, bytes.Equal(back.Payload, payload))
		}
	}
}

func TestServerPeerSendsUnmaskedFrames(t *testing.T) {
	client, server := pair(t)
	if err := server.WriteFrame(Text("hi")); err != nil {
		t.Fatal(err)
	}
	f, err := client.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Masked || string(f.Payload) != "hi" {
		t.Fatalf("client read masked=%v payload %q", f.Masked, f.Payload)
	}
}

func TestWriteChoppedArrivesAsTheSameFrame(t *testing.T) {
	client, server := pair(t)
	wire := Build(Frame{Fin: true, Opcode: OpText, Masked: true, Mask: [4]byte{9, 8, 7, 6}, Payload: []byte("chopped into single bytes")})
	errc := make(chan error, 1)
	go func() { errc <- client.WriteChopped(wire, 1) }()
	f, err := server.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if string(f.Payload) != "chopped into single bytes" || f.Mask != [4]byte{9, 8, 7, 6} {
		t.Fatalf("read %q with mask %x", f.Payload, f.Mask)
	}
}

func TestFramesInTheSameWriteAsTheHandshakeAreNotLost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Connect(ln.Addr().String(), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := NewKey()
	eager := append(HandshakeRequest("example", "/", key, nil),
		Build(Frame{Fin: true, Opcode: OpText, Masked: true, Payload: []byte("early")})...)
	if err := c.WriteRaw(eager); err != nil {
		t.Fatal(err)
	}
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s, r, err := AcceptServer(nc, nil, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r.Host != "example" || r.Header.Get("Sec-WebSocket-Key") != key {
		t.Errorf("request host %q key %q", r.Host, r.Header.Get("Sec-WebSocket-Key"))
	}
	if err := s.WriteRaw(append([]byte(nil), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+AcceptKey(key)+"\r\n\r\n"...)); err != nil {
		t.Fatal(err)
	}
	f, err := s.ReadFrame()
	if err != nil || string(f.Payload) != "early" {
		t.Fatalf("frame after handshake: %q, %v", f.Payload, err)
	}
	if _, err := c.ReadResponse(key); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeRequestReplacesOrDropsDefaultLines(t *testing.T) {
	req := string(HandshakeRequest("h", "/p", "k", http.Header{"Sec-Websocket-Version": {"8"}, "Connection": {""}, "Origin": {"http://o"}}))
	for _, want := range []string{"GET /p HTTP/1.1\r\n", "Host: h\r\n", "Sec-Websocket-Version: 8\r\n", "Origin: http://o\r\n", "Upgrade: websocket\r\n"} {
		if !strings.Contains(req, want) {
			t.Errorf("request lacks %q:\n%s", want, req)
		}
	}
	if strings.Contains(req, "Connection") || strings.Contains(req, "Version: 13") {
		t.Errorf("request kept a replaced default:\n%s", req)
	}
}

func TestAcceptServerAnswers400ToAWrongVersion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		_, _, err = AcceptServer(nc, nil, testTimeout)
		errc <- err
	}()
	_, resp, err := DialClient(ln.Addr().String(), "/", http.Header{"Sec-Websocket-Version": {"8"}}, testTimeout)
	if err == nil || resp == nil || resp.StatusCode != 400 {
		t.Fatalf("DialClient = %v, %v; want a 400 response and an error", resp, err)
	}
	if serr := <-errc; serr == nil || !strings.Contains(serr.Error(), "Version") {
		t.Fatalf("AcceptServer error = %v, want one naming the version", serr)
	}
}

func TestDialClientRejectsAWrongAcceptKey(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		p := NewPeer(nc, false)
		p.SetTimeout(testTimeout)
		if _, err := p.ReadRequest(); err != nil {
			return
		}
		p.WriteRaw([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"))
		p.WaitEOF()
	}()
	_, _, err = DialClient(ln.Addr().String(), "/", nil, testTimeout)
	if err == nil || !strings.Contains(err.Error(), "Sec-WebSocket-Accept") {
		t.Fatalf("DialClient error = %v, want one naming Sec-WebSocket-Accept", err)
	}
}

func TestExpectCloseSkipsDataFramesAndExpectEOFSeesTheTCPClose(t *testing.T) {
	client, server := pair(t)
	go func() {
		server.WriteFrame(Text("before"))
		server.WriteFrame(Close(1002, "protocol"))
		server.Close()
	}()
	f := client.ExpectClose(t, 1002)
	if _, reason, _ := ParseClose(f.Payload); string(reason) != "protocol" {
		t.Errorf("reason %q", reason)
	}
	client.ExpectEOF(t)
}

func TestReadFrameReportsCleanEOFAndTruncatedFrames(t *testing.T) {
	client, server := pair(t)
	server.WriteRaw([]byte{0x81, 0x05, 'H', 'e'})
	server.Close()
	if _, err := client.ReadFrame(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
	client2, server2 := pair(t)
	server2.Close()
	if _, err := client2.ReadFrame(); err != io.EOF {
		t.Fatalf("closed at a frame boundary: %v, want io.EOF", err)
	}
}

func TestReadFrameReturnsATimeoutWhenNothingArrives(t *testing.T) {
	client, _ := pair(t)
	client.SetTimeout(20 * time.Millisecond)
	_, err := client.ReadFrame()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("ReadFrame = %v, want a timeout", err)
	}
}

func TestTraceSeesWireBytesInBothDirections(t *testing.T) {
	client, server := pair(t)
	var out, in []byte
	client.Trace = func(o bool, b []byte) {
		if o {
			out = append(out, b...)
		}
	}
	server.Trace = func(o bool, b []byte) {
		if !o {
			in = append(in, b...)
		}
	}
	errc := make(chan error, 1)
	go func() {
		errc <- client.WriteFrame(Frame{Fin: true, Opcode: OpText, Masked: true, Mask: [4]byte{0x37, 0xfa, 0x21, 0x3d}, Payload: []byte("Hello")})
	}()
	f, err := server.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	want := unhex(t, "81 85 37 fa 21 3d 7f 9f 4d 51 58")
	if !bytes.Equal(in, want) || string(f.Payload) != "Hello" {
		t.Fatalf("server traced %x and read %q, want %x and Hello", in, f.Payload, want)
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("client traced %x, want %x", out, want)
	}
}

func TestReadSeesBytesBufferedPastTheHandshake(t *testing.T) {
	client, server := pair(t)
	errc := make(chan error, 1)
	go func() { errc <- client.WriteRaw([]byte("raw bytes")) }()
	got, err := io.ReadAll(io.LimitReader(server, 9))
	if err != nil || string(got) != "raw bytes" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
