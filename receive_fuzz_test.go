package rally_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/flate"

	"github.com/rallyws/rally"
)

// The receive path end to end, through the public API: whatever bytes a
// peer sends after the handshake, a server Conn (rally.Upgrade) and a
// client Conn (rally.Dial) return only valid messages within the read
// limit, end with an error, never panic and never hang.

const fuzzReadLimit = 1 << 16

// fuzzFrame is one frame as a peer writes it: masked with a zero key
// from a client (the payload as it is), unmasked from a server.
func fuzzFrame(first byte, payload []byte, masked bool) []byte {
	b := []byte{first}
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if masked {
		b = append(b, 0, 0, 0, 0)
	}
	return append(b, payload...)
}

// deflated is p compressed as permessage-deflate sends it (RFC 7692 7.2.1:
// the trailing 00 00 ff ff removed).
func deflated(p []byte) []byte {
	var sb strings.Builder
	w, _ := flate.NewWriter(&sb, 1)
	w.Write(p)
	w.Flush()
	return []byte(strings.TrimSuffix(sb.String(), "\x00\x00\xff\xff"))
}

// receiveSeeds are streams that reach every part of the receive path:
// whole and fragmented messages, control frames between fragments,
// compressed messages, a close, and broken variants of each.
func receiveSeeds(masked bool) [][]byte {
	cat := func(frames ...[]byte) []byte {
		var b []byte
		for _, f := range frames {
			b = append(b, f...)
		}
		return b
	}
	fr := func(first byte, p string) []byte { return fuzzFrame(first, []byte(p), masked) }
	return [][]byte{
		fr(0x81, "hello"),
		fr(0x82, "\x00\x01\x02"),
		cat(fr(0x01, "hel"), fr(0x89, "ping"), fr(0x80, "lo")),
		cat(fr(0x01, "h\xc3"), fr(0x80, "\xa9llo")), // é across fragments
		fr(0x81, "bad \xff utf-8"),
		cat(fr(0xc1, string(deflated([]byte("compressed hello hello hello"))))),
		cat(fr(0x41, string(deflated([]byte("compressed in two"))[:3])), fr(0x80, string(deflated([]byte("compressed in two"))[3:]))),
		fr(0xc2, "\xff\xff\xff not deflate"),
		fr(0x88, "\x03\xe8bye"),
		fr(0x88, "\x03"),
		fuzzFrame(0x82, make([]byte, fuzzReadLimit+1), masked),
		fr(0x8a, "unsolicited pong"),
		fr(0x09, "fragmented ping"),
		fr(0x80, "continuation without a start"),
		fr(0xb1, "rsv2 set"),
		{},
	}
}

func FuzzServerReceive(f *testing.F) {
	for _, s := range receiveSeeds(true) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, stream []byte, compress bool) { serverReceive(t, stream, compress) })
}

// serverReceive upgrades a server Conn, sends it stream and returns the
// messages it read.
func serverReceive(t *testing.T, stream []byte, compress bool) []string {
	srv, peer := net.Pipe()
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	// A memory budget whose share for messages (48 KiB) is smaller than
	// the read limit: messages past it are refused with 1013, and every
	// charge must be given back once the connection has ended.
	budget := rally.NewMemoryBudget(96 << 10)
	opts := &rally.AcceptOptions{ConnOptions: rally.ConnOptions{
		ReadLimit: fuzzReadLimit, CloseTimeout: 10 * time.Millisecond, MemoryBudget: budget,
	}}
	if compress {
		req += "Sec-WebSocket-Extensions: permessage-deflate\r\n"
		opts.Compression = &rally.CompressionOptions{}
	}
	go func() {
		defer peer.Close()
		go io.Copy(io.Discard, peer)
		io.WriteString(peer, req+"\r\n")
		peer.Write(stream)
	}()
	c, _, err := rally.Upgrade(srv, opts)
	if err != nil {
		t.Fatalf("upgrade of a valid request: %v", err)
	}
	got := readAll(t, c)
	for _, cat := range []rally.MemoryCategory{rally.MemoryHandshakes, rally.MemoryAssembly} {
		if n := budget.Stats()[cat].Used; n != 0 {
			t.Fatalf("%d bytes of %v still charged to the memory budget after the end", n, cat)
		}
	}
	return got
}

func FuzzClientReceive(f *testing.F) {
	for _, s := range receiveSeeds(false) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, stream []byte, compress bool) { clientReceive(t, stream, compress) })
}

// clientReceive dials a client Conn to a peer that answers 101 and then
// sends stream, and returns the messages it read.
func clientReceive(t *testing.T, stream []byte, compress bool) []string {
	cli, peer := net.Pipe()
	go func() {
		defer peer.Close()
		br := bufio.NewReader(peer)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		go io.Copy(io.Discard, br)
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(h[:]) + "\r\n"
		if compress {
			resp += "Sec-WebSocket-Extensions: permessage-deflate\r\n"
		}
		io.WriteString(peer, resp+"\r\n")
		peer.Write(stream)
	}()
	opts := &rally.DialOptions{
		ConnOptions:    rally.ConnOptions{ReadLimit: fuzzReadLimit, CloseTimeout: 10 * time.Millisecond},
		NetDialContext: func(context.Context, string, string) (net.Conn, error) { return cli, nil },
		Proxy:          func(*http.Request) (*url.URL, error) { return nil, nil },
	}
	if !compress {
		opts.Compression = &rally.CompressionOptions{Disabled: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wireTimeout())
	defer cancel()
	c, _, err := rally.Dial(ctx, "ws://fuzz.invalid/", opts)
	if err != nil {
		t.Fatalf("dial with a valid 101: %v", err)
	}
	return readAll(t, c)
}

// readAll reads messages until the connection fails, checking each, and
// returns them.
func readAll(t *testing.T, c *rally.Conn) []string {
	var got []string
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 2*wireTimeout())
	defer cancel()
	for {
		typ, p, err := c.Read(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("the receive path hung on a finished stream")
			}
			return got
		}
		if len(p) > fuzzReadLimit {
			t.Fatalf("a %d-byte message past the %d-byte limit", len(p), fuzzReadLimit)
		}
		if typ == rally.Text && !utf8.Valid(p) {
			t.Fatalf("a text message that is not UTF-8: %q", p)
		}
		if typ != rally.Text && typ != rally.Binary {
			t.Fatalf("a message of type %v", typ)
		}
		got = append(got, string(p))
	}
}

func TestReceiveFuzzHarnessDeliversTheSeedsMessages(t *testing.T) {
	for _, side := range []struct {
		name    string
		masked  bool
		receive func(*testing.T, []byte, bool) []string
	}{{"server", true, serverReceive}, {"client", false, clientReceive}} {
		seeds := receiveSeeds(side.masked)
		for _, tc := range []struct {
			seed     int
			compress bool
			want     string
		}{
			{0, false, "hello"}, {2, false, "hello"}, {3, true, "h\u00e9llo"},
			{5, true, "compressed hello hello hello"}, {6, true, "compressed in two"},
		} {
			got := side.receive(t, seeds[tc.seed], tc.compress)
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("%s, seed %d: read %q, want [%q]", side.name, tc.seed, got, tc.want)
			}
		}
		if got := side.receive(t, seeds[4], false); len(got) != 0 {
			t.Errorf("%s: invalid UTF-8 read as %q", side.name, got)
		}
	}
}
