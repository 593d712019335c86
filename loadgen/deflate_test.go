package loadgen_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/loadgen"
)

// countingListener counts the bytes its connections read: what the
// clients sent, handshakes included.
type countingListener struct {
	net.Listener
	in *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.in}, nil
}

type countingConn struct {
	net.Conn
	in *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

// rallyEcho serves a rally echo server configured with compression and
// returns its ws:// URL, the count of bytes it received, and a channel
// closed once it has echoed n messages (with n more than the client keeps
// in flight, the client has counted replies by then).
func rallyEcho(t *testing.T, compression *rally.CompressionOptions, n int64) (string, *atomic.Int64, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &atomic.Int64{}
	var echoed atomic.Int64
	enough := make(chan struct{})
	srv := &http.Server{Handler: &rally.Server{
		Options: &rally.AcceptOptions{Compression: compression},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Send(typ, p)
			if echoed.Add(1) == n {
				close(enough)
			}
		},
	}}
	go srv.Serve(countingListener{ln, in})
	t.Cleanup(func() { srv.Close() })
	return "ws://" + ln.Addr().String() + "/", in, enough
}

func TestRunNegotiatesCompressionAndSendsEveryMessageCompressed(t *testing.T) {
	cases := []struct {
		name   string
		server *rally.CompressionOptions
		size   int
	}{
		// The server keeps context: loadgen inflates its replies in stream.
		{"ServerTakeover", &rally.CompressionOptions{}, 4000},
		// No server context: replies under the server's threshold come
		// back uncompressed, the others compressed on their own.
		{"ServerNoContextSmall", &rally.CompressionOptions{ServerNoContextTakeover: true}, 200},
		{"ServerNoContextLarge", &rally.CompressionOptions{ServerNoContextTakeover: true, ServerMaxWindowBits: 9}, 4000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, in, enough := rallyEcho(t, tc.server, 300) // enough for the handshakes to weigh little
			res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: url, Conns: 3, InFlight: 2, Size: tc.size, Text: true, Compress: true}, enough)
			if res.Errors != 0 || res.Messages == 0 {
				t.Fatalf("%d replies, %d errors %q", res.Messages, res.Errors, res.ErrorSamples)
			}
			if !res.Compress || res.CompressedConns != 3 {
				t.Errorf("Compress %v, CompressedConns %d; want 3 connections compressed", res.Compress, res.CompressedConns)
			}
			// Sent at least as many messages as were echoed; compressed, they
			// take less than their frames would (size and 8 bytes of header
			// and mask) on the wire.
			if sent := in.Load(); sent > res.Messages*int64(tc.size+8)*3/4 {
				t.Errorf("the server received %d bytes for more than %d messages of %d bytes: not compressed", sent, res.Messages, tc.size)
			}
		})
	}
}

func TestRunWithCompressionDeclinedRunsUncompressed(t *testing.T) {
	url, in, enough := rallyEcho(t, nil, 8)
	const size = 4000
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: url, Conns: 2, Size: size, Compress: true}, enough)
	if res.Errors != 0 || res.Messages == 0 || res.CompressedConns != 0 {
		t.Fatalf("%d replies, %d errors %q, %d compressed; want replies, no error, none compressed", res.Messages, res.Errors, res.ErrorSamples, res.CompressedConns)
	}
	if sent := in.Load(); sent < res.Messages*size {
		t.Errorf("the server received %d bytes for %d messages of %d bytes", sent, res.Messages, size)
	}
}

func TestRunWithCompressionThroughputAndChatAgainstRally(t *testing.T) {
	url, _, enough := rallyEcho(t, &rally.CompressionOptions{}, 8)
	res := run(t, loadgen.Config{Scenario: loadgen.Throughput, URL: url, Size: 64 << 10, Text: true, Compress: true}, enough)
	if res.Errors != 0 || res.Messages == 0 || res.CompressedConns != 1 {
		t.Fatalf("throughput: %d replies, %d errors %q, %d compressed", res.Messages, res.Errors, res.ErrorSamples, res.CompressedConns)
	}
}

// answering serves handshakes answered with extensions as the
// Sec-WebSocket-Extensions line, and keeps the offers it saw.
func answering(t *testing.T, extensions string) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	offers := make(chan string, 64)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(nc))
				if err != nil {
					return
				}
				select {
				case offers <- req.Header.Get("Sec-WebSocket-Extensions"):
				default:
				}
				h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
					base64.StdEncoding.EncodeToString(h[:]) + "\r\nSec-WebSocket-Extensions: " + extensions + "\r\n\r\n"))
				var b [1]byte
				nc.Read(b[:])
			}()
		}
	}()
	return "ws://" + ln.Addr().String() + "/", offers
}

func TestRunOffersCompressionAndRefusesAnAnswerItCannotHonour(t *testing.T) {
	for _, answer := range []string{
		"permessage-deflate; client_max_window_bits=10", // not offered: compress/flate cannot keep to it
		"permessage-deflate; client_max_window_bits",
		"permessage-deflate; server_max_window_bits=16",
		"permessage-deflate; server_no_context_takeover; server_no_context_takeover",
		"permessage-deflate, permessage-deflate",
		"x-webkit-deflate-frame",
		"permessage-deflate; mode=fast",
	} {
		t.Run(answer, func(t *testing.T) {
			url, offers := answering(t, answer)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := loadgen.Run(ctx, loadgen.Config{Scenario: loadgen.Echo, URL: url, Conns: 1, Duration: 100 * time.Millisecond, Warmup: -1, Compress: true})
			if err == nil || !strings.Contains(err.Error(), "no connection opened") {
				t.Fatalf("Run: %v; want no connection opened", err)
			}
			if got := <-offers; got != "permessage-deflate; client_no_context_takeover" {
				t.Errorf("offer %q", got)
			}
		})
	}
	t.Run("NoOfferWithoutCompress", func(t *testing.T) {
		url, offers := answering(t, "permessage-deflate")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := loadgen.Run(ctx, loadgen.Config{Scenario: loadgen.Echo, URL: url, Conns: 1, Duration: 100 * time.Millisecond, Warmup: -1})
		if err == nil || !strings.Contains(err.Error(), "not offered") {
			t.Fatalf("Run: %v; want the answer refused as not offered", err)
		}
		if got := <-offers; got != "" {
			t.Errorf("offer %q without Compress", got)
		}
	})
}

func TestMainRunsWithCompressAndSaysHowManyConnectionsCompressed(t *testing.T) {
	url, _, enough := rallyEcho(t, &rally.CompressionOptions{ServerNoContextTakeover: true}, 8)
	code, out, errOut := runMain(t, enough, "echo", url, "--compress", "--conns", "2", "--size", "2000")
	if code != 0 || !strings.Contains(out, "permessage-deflate accepted on 2 connections") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestRunRefusesCompressWithVerbatimEcho(t *testing.T) {
	_, err := loadgen.Run(context.Background(), loadgen.Config{Scenario: loadgen.Echo, URL: "ws://127.0.0.1:1/", Compress: true, VerbatimEcho: true})
	if err == nil || !strings.Contains(err.Error(), "VerbatimEcho") {
		t.Fatalf("Run: %v", err)
	}
}
