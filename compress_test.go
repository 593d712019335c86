package rally_test

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The permessage-deflate tests (RFC 7692) state what is on the wire. The
// raw peer knows nothing of deflate, so these tests compress and inflate
// with the standard library's compress/flate: an oracle independent of the
// deflate package (which builds on klauspost/compress).

// extHeader is the request or response header line of one extension value.
func extHeader(v string) http.Header {
	if v == "" {
		return nil
	}
	return http.Header{"Sec-WebSocket-Extensions": {v}}
}

// oracleDeflater compresses messages as a permessage-deflate sender does:
// each message is flushed to a byte boundary and the trailing 00 00 ff ff
// is removed (RFC 7692 7.2.1). With takeover the messages form one stream.
type oracleDeflater struct {
	takeover bool
	buf      bytes.Buffer
	w        *flate.Writer
}

func newOracleDeflater(takeover bool) *oracleDeflater {
	d := &oracleDeflater{takeover: takeover}
	d.w, _ = flate.NewWriter(&d.buf, flate.BestSpeed)
	return d
}

func (d *oracleDeflater) deflate(p []byte) []byte {
	if !d.takeover {
		d.w.Reset(&d.buf)
	}
	d.buf.Reset()
	d.w.Write(p)
	d.w.Flush()
	b := bytes.Clone(d.buf.Bytes())
	if !bytes.HasSuffix(b, []byte{0, 0, 0xff, 0xff}) {
		panic("flush did not end with 00 00 ff ff")
	}
	return b[:len(b)-4]
}

// deflateOnce is one message compressed on its own.
func deflateOnce(p []byte) []byte { return newOracleDeflater(false).deflate(p) }

// zerosDeflated is deflateOnce(make([]byte, n)) for n a multiple of 1 MiB,
// made of one compressed MiB repeated (each flushed to a byte boundary
// with an empty stored block, which a stream may hold anywhere): a bomb
// built without compressing all of it, which under the race detector on a
// busy machine took half a minute.
func zerosDeflated(n int) []byte {
	const chunk = 1 << 20
	one := append(deflateOnce(make([]byte, chunk)), 0, 0, 0xff, 0xff)
	out := bytes.Repeat(one, n/chunk)
	return out[:len(out)-4]
}

// oracleInflater inflates the messages of one direction; with takeover it
// keeps the last 32 KiB of output as the next message's dictionary.
type oracleInflater struct {
	takeover bool
	window   []byte
}

func (in *oracleInflater) inflate(p []byte) ([]byte, error) {
	// RFC 7692 7.2.2: append 00 00 ff ff; a final empty stored block
	// then ends the stream for the reader.
	src := append(bytes.Clone(p), 0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff)
	var dict []byte
	if in.takeover {
		dict = in.window
	}
	out, err := io.ReadAll(flate.NewReaderDict(bytes.NewReader(src), dict))
	if err != nil {
		return nil, err
	}
	if in.takeover {
		in.window = append(in.window, out...)
		if n := len(in.window); n > 32<<10 {
			in.window = bytes.Clone(in.window[n-32<<10:])
		}
	}
	return out, nil
}

// inflateOnce inflates one message compressed on its own.
func inflateOnce(t *testing.T, p []byte) []byte {
	t.Helper()
	out, err := (&oracleInflater{}).inflate(p)
	if err != nil {
		t.Fatalf("the oracle cannot inflate %d bytes: %v", len(p), err)
	}
	return out
}

// jsonish returns n bytes of text that compresses as JSON traffic does.
func jsonish(seed, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"id":%d,"user":"u%d","text":"message %d of the stream","tags":["a","b"]},`, seed*1000+i, (seed+i)%17, i)
	}
	return b.Bytes()[:n]
}

// deflateServer serves s and connects a raw client offering offer; it
// returns the peer and the 101 response.
func deflateServer(t *testing.T, s *rally.Server, offer string) (*rawpeer.Peer, *http.Response) {
	t.Helper()
	return dialPeerWith(t, serve(t, s), extHeader(offer))
}

// acceptDeflate is acceptConn with a client offering offer.
func acceptDeflate(t *testing.T, opts *rally.AcceptOptions, offer string) (*rally.Conn, *rawpeer.Peer) {
	t.Helper()
	return acceptConnWith(t, opts, extHeader(offer))
}

// compressedFrame is a whole compressed data message as a raw client sends it.
func compressedFrame(op byte, body []byte) rawpeer.Frame {
	return rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: op, Payload: body}
}

func TestServerAnswersEachCompressionOfferAsItsOptionsSay(t *testing.T) {
	cases := []struct {
		name   string
		opts   *rally.CompressionOptions
		offer  string
		answer string // "" declines
	}{
		{"DeclinesWithoutOptions", nil, "permessage-deflate; client_max_window_bits", ""},
		{"DeclinesWhenDisabled", &rally.CompressionOptions{Disabled: true}, "permessage-deflate", ""},
		{"AcceptsABareOffer", &rally.CompressionOptions{}, "permessage-deflate", "permessage-deflate"},
		{"NeverEchoesABareClientMaxWindowBits", &rally.CompressionOptions{}, "permessage-deflate; client_max_window_bits", "permessage-deflate"},
		{"AnswersServerNoContextTakeover", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate; client_max_window_bits", "permessage-deflate; server_no_context_takeover"},
		{"AsksForClientNoContextTakeover", &rally.CompressionOptions{ClientNoContextTakeover: true}, "permessage-deflate", "permessage-deflate; client_no_context_takeover"},
		{"AgreesToTheClientsNoContextTakeover", &rally.CompressionOptions{}, "permessage-deflate; client_no_context_takeover", "permessage-deflate; client_no_context_takeover"},
		{"AgreesToServerNoContextTakeoverAsked", &rally.CompressionOptions{}, "permessage-deflate; server_no_context_takeover", "permessage-deflate; server_no_context_takeover"},
		{"LimitsItsOwnWindow", &rally.CompressionOptions{ServerMaxWindowBits: 10}, "permessage-deflate", "permessage-deflate; server_max_window_bits=10"},
		{"UsesTheSmallerServerWindowAsked", &rally.CompressionOptions{ServerMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=9", "permessage-deflate; server_max_window_bits=9"},
		{"EchoesAServerWindowOf15Asked", &rally.CompressionOptions{}, "permessage-deflate; server_max_window_bits=15", "permessage-deflate; server_max_window_bits=15"},
		{"LimitsTheClientsWindowWhenAllowed", &rally.CompressionOptions{ClientMaxWindowBits: 9}, "permessage-deflate; client_max_window_bits", "permessage-deflate; client_max_window_bits=9"},
		{"KeepsTheClientsSmallerWindow", &rally.CompressionOptions{ClientMaxWindowBits: 12}, "permessage-deflate; client_max_window_bits=10", "permessage-deflate; client_max_window_bits=10"},
		{"DeclinesAClientThatCannotBeLimited", &rally.CompressionOptions{ClientMaxWindowBits: 9}, "permessage-deflate", ""},
		{"TakesTheFirstAcceptableOffer", &rally.CompressionOptions{}, "x-webkit-deflate-frame, permessage-deflate; unknown=1, permessage-deflate; server_max_window_bits=7, permessage-deflate; client_no_context_takeover, permessage-deflate", "permessage-deflate; client_no_context_takeover"},
		{"PassesOverARepeatedParameter", &rally.CompressionOptions{}, "permessage-deflate; server_no_context_takeover; server_no_context_takeover, permessage-deflate; client_max_window_bits=12", "permessage-deflate; client_max_window_bits=12"},
		{"ReadsQuotedValues", &rally.CompressionOptions{}, `permessage-deflate; server_max_window_bits="11"`, "permessage-deflate; server_max_window_bits=11"},
		{"IgnoresOtherExtensions", &rally.CompressionOptions{}, "x-webkit-deflate-frame", ""},
		{"AnswersNothingToNoOffer", &rally.CompressionOptions{}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &rally.Server{Options: &rally.AcceptOptions{Compression: tc.opts}, Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
				c.Send(typ, p)
			}}
			p, resp := deflateServer(t, s, tc.offer)
			got := resp.Header.Values("Sec-WebSocket-Extensions")
			if tc.answer == "" {
				if len(got) != 0 {
					t.Fatalf("answer %q, want none", got)
				}
				// RSV1 stays a violation when nothing was negotiated.
				p.WriteFrame(compressedFrame(rawpeer.OpText, deflateOnce([]byte("hi"))))
				p.ExpectClose(t, 1002)
				return
			}
			if len(got) != 1 || got[0] != tc.answer {
				t.Fatalf("answer %q, want %q", got, tc.answer)
			}
			// The connection uses what it answered: a compressed message
			// arrives and comes back.
			msg := jsonish(1, 3000)
			if err := p.WriteFrame(compressedFrame(rawpeer.OpText, deflateOnce(msg))); err != nil {
				t.Fatal(err)
			}
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if f.Rsv != rawpeer.Rsv1 || f.Opcode != rawpeer.OpText {
				t.Fatalf("echo frame rsv %#x opcode %#x, want a compressed text frame", f.Rsv, f.Opcode)
			}
			if got := inflateOnce(t, f.Payload); !bytes.Equal(got, msg) {
				t.Fatalf("echo inflates to %d bytes that differ from the %d sent", len(got), len(msg))
			}
		})
	}
}

func TestServerRefusesAMalformedExtensionsHeaderWith400(t *testing.T) {
	for _, offer := range []string{"permessage-deflate; =1", "permessage-deflate;;", `permessage-deflate; server_max_window_bits="1`, ", ,permessage-deflate x"} {
		t.Run(offer, func(t *testing.T) {
			s := &rally.Server{Options: &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}}
			_, resp, err := rawpeer.DialClient(serve(t, s), "/", extHeader(offer), wireTimeout())
			if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("handshake with %q: response %v, error %v; want 400", offer, resp, err)
			}
		})
	}
}

// dialAnswered dials a raw server that answers the handshake with answer
// as Sec-WebSocket-Extensions. It returns the offer the client sent, the
// connection and peer (nil on failure) and Dial's error.
func dialAnswered(t *testing.T, opts *rally.DialOptions, answer string) (offer []string, c *rally.Conn, p *rawpeer.Peer, err error) {
	t.Helper()
	ln := listen(t)
	type result struct {
		p *rawpeer.Peer
		r *http.Request
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ch <- result{}
			return
		}
		p, r, _ := rawpeer.AcceptServer(nc, extHeader(answer), wireTimeout())
		ch <- result{p, r}
	}()
	c, _, err = rally.Dial(ctxT(t), "ws://"+ln.Addr().String()+"/", opts)
	r := <-ch
	if r.p != nil {
		t.Cleanup(func() { r.p.Close() })
	}
	if r.r != nil {
		offer = r.r.Header.Values("Sec-WebSocket-Extensions")
	}
	if c != nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return offer, c, r.p, err
}

func TestClientOffersCompressionAndChecksTheAnswer(t *testing.T) {
	const noOffer = "(none)"
	cases := []struct {
		name       string
		opts       *rally.CompressionOptions
		offer      string
		answer     string
		fails      string // a word of Dial's error, "" when it succeeds
		compressed bool
	}{
		{"OffersByDefault", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate", "", true},
		{"RunsUncompressedWhenDeclined", nil, "permessage-deflate; client_max_window_bits", "", "", false},
		{"OffersNothingWhenDisabled", &rally.CompressionOptions{Disabled: true}, noOffer, "", "", false},
		{"FailsAnAnswerToNoOffer", &rally.CompressionOptions{Disabled: true}, noOffer, "permessage-deflate", "none was offered", false},
		{"OffersItsOptions", &rally.CompressionOptions{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 10, ClientMaxWindowBits: 9}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9", "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9", "", true},
		{"AcceptsClientLimitsAskedUnprompted", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate; client_no_context_takeover; client_max_window_bits=9", "", true},
		{"AcceptsASmallerServerWindow", &rally.CompressionOptions{ServerMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=12; client_max_window_bits", "permessage-deflate; server_max_window_bits=8", "", true},
		{"FailsABareClientMaxWindowBits", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate; client_max_window_bits", "client_max_window_bits", false},
		{"FailsAMissingServerNoContextTakeover", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate; server_no_context_takeover; client_max_window_bits", "permessage-deflate", "server_no_context_takeover", false},
		{"FailsALargerServerWindow", &rally.CompressionOptions{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=10; client_max_window_bits", "permessage-deflate; server_max_window_bits=12", "server_max_window_bits", false},
		{"FailsAMissingServerWindow", &rally.CompressionOptions{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=10; client_max_window_bits", "permessage-deflate", "server_max_window_bits", false},
		{"FailsAnExtensionNotOffered", nil, "permessage-deflate; client_max_window_bits", "x-webkit-deflate-frame", "x-webkit-deflate-frame", false},
		{"FailsTwoAnswers", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate, permessage-deflate", "2 times", false},
		{"FailsAnUnknownParameter", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate; mode=fast", "mode", false},
		{"FailsAWindowOutOfRange", nil, "permessage-deflate; client_max_window_bits", "permessage-deflate; client_max_window_bits=16", "client_max_window_bits", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			offer, c, p, err := dialAnswered(t, &rally.DialOptions{Compression: tc.opts}, tc.answer)
			wantOffer := []string{tc.offer}
			if tc.offer == noOffer {
				wantOffer = nil
			}
			if strings.Join(offer, "|") != strings.Join(wantOffer, "|") {
				t.Errorf("offer %q, want %q", offer, wantOffer)
			}
			if tc.fails != "" {
				var he *rally.HandshakeError
				if !errors.As(err, &he) || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("Dial error %v, want a *HandshakeError naming %q", err, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			msg := jsonish(2, 2000)
			if err := c.Write(ctxT(t), rally.Text, msg); err != nil {
				t.Fatal(err)
			}
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Rsv == rawpeer.Rsv1; got != tc.compressed {
				t.Fatalf("RSV1 set: %v, want %v", got, tc.compressed)
			}
			if tc.compressed {
				msg2 := inflateOnce(t, f.Payload)
				if !bytes.Equal(msg2, msg) {
					t.Fatal("the client's compressed message does not inflate to what was written")
				}
			}
		})
	}
}

// roundTrip runs many messages from a rally client through a rally echo
// server, both compressing as configured, and checks each comes back.
func roundTrip(t *testing.T, server, client *rally.CompressionOptions, wantAnswer string) {
	t.Helper()
	s := &rally.Server{
		Options: &rally.AcceptOptions{Compression: server},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if _, err := c.Send(typ, p); err != nil {
				t.Errorf("echo: %v", err)
			}
		},
	}
	addr := serve(t, s)
	c, resp, err := rally.Dial(ctxT(t), "ws://"+addr+"/", &rally.DialOptions{Compression: client})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.CloseNow()
	if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != wantAnswer {
		t.Fatalf("negotiated %q, want %q", got, wantAnswer)
	}
	sizes := []int{0, 1, 31, 32, 33, 200, 1023, 1024, 1025, 4000, 40000, 70000, 300}
	for i := range 60 {
		n := sizes[i%len(sizes)]
		var msg []byte
		typ := rally.Text
		if i%3 == 0 {
			typ = rally.Binary
			msg = bytes.Repeat([]byte{byte(i), 0, 0xff, byte(i * 7)}, n/4+1)[:n]
			if i%6 == 0 { // incompressible
				msg = noise(i, n)
			}
		} else {
			msg = jsonish(i%5, n)
		}
		if err := c.Write(ctxT(t), typ, msg); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		gotType, got, err := c.Read(ctxT(t))
		if err != nil {
			t.Fatalf("message %d (%d bytes): %v", i, n, err)
		}
		if gotType != typ || !bytes.Equal(got, msg) {
			t.Fatalf("message %d (%d bytes, %v) came back as %d bytes of %v that differ", i, n, typ, len(got), gotType)
		}
	}
	if err := c.Close(rally.CloseNormal, ""); err != nil {
		t.Fatal(err)
	}
}

// noise returns n bytes that do not compress.
func noise(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func TestRallyRoundTripsCompressedMessagesInEveryParameterCombination(t *testing.T) {
	for bits := 8; bits <= 15; bits++ {
		for _, serverNC := range []bool{false, true} {
			for _, clientNC := range []bool{false, true} {
				name := fmt.Sprintf("Window%dServerNoContext%vClientNoContext%v", bits, serverNC, clientNC)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					server := &rally.CompressionOptions{ServerNoContextTakeover: serverNC, ClientNoContextTakeover: clientNC, ServerMaxWindowBits: bits, ClientMaxWindowBits: bits}
					client := &rally.CompressionOptions{ServerMaxWindowBits: bits, ClientMaxWindowBits: bits}
					want := "permessage-deflate"
					if serverNC {
						want += "; server_no_context_takeover"
					}
					if clientNC {
						want += "; client_no_context_takeover"
					}
					if bits < 15 {
						want += fmt.Sprintf("; server_max_window_bits=%d; client_max_window_bits=%d", bits, bits)
					}
					roundTrip(t, server, client, want)
				})
			}
		}
	}
}

func TestRallyRoundTripsCompressedMessagesAtEveryLevelAndThreshold(t *testing.T) {
	for level := 1; level <= 9; level++ {
		for _, threshold := range []int{-1, 0, 100} {
			t.Run(fmt.Sprintf("Level%dThreshold%d", level, threshold), func(t *testing.T) {
				t.Parallel()
				server := &rally.CompressionOptions{Level: level, Threshold: threshold, ServerNoContextTakeover: level%2 == 0}
				client := &rally.CompressionOptions{Level: 10 - level, Threshold: threshold, ClientNoContextTakeover: level%3 == 0}
				want := "permessage-deflate"
				if level%2 == 0 {
					want += "; server_no_context_takeover"
				}
				if level%3 == 0 {
					want += "; client_no_context_takeover"
				}
				roundTrip(t, server, client, want)
			})
		}
	}
}

func TestRallyRoundTripsWhenOneSideOnlyReceivesCompressed(t *testing.T) {
	roundTrip(t, &rally.CompressionOptions{ReceiveOnly: true}, nil, "permessage-deflate")
	roundTrip(t, &rally.CompressionOptions{}, &rally.CompressionOptions{ReceiveOnly: true}, "permessage-deflate")
}

func TestSenderCompressesOnlyFromTheThresholdWhenItKeepsNoContext(t *testing.T) {
	cases := []struct {
		name  string
		opts  *rally.CompressionOptions
		offer string
		size  int
		rsv1  bool
	}{
		{"BelowTheDefaultThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate", 1023, false},
		{"AtTheDefaultThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate", 1024, true},
		{"NoContextAskedByTheClientBelow", &rally.CompressionOptions{}, "permessage-deflate; server_no_context_takeover", 1000, false},
		{"BelowASetThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: 100}, "permessage-deflate", 99, false},
		{"AtASetThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: 100}, "permessage-deflate", 100, true},
		{"ANegativeThresholdCompressesEverything", &rally.CompressionOptions{ServerNoContextTakeover: true, Threshold: -1}, "permessage-deflate", 1, true},
		{"WithContextTheThresholdDoesNotApply", &rally.CompressionOptions{Threshold: 5000}, "permessage-deflate", 100, true},
		{"WithContextBelow32Bytes", &rally.CompressionOptions{}, "permessage-deflate", 31, false},
		{"WithContextFrom32Bytes", &rally.CompressionOptions{}, "permessage-deflate", 32, true},
		{"ReceiveOnlyNeverCompresses", &rally.CompressionOptions{ReceiveOnly: true}, "permessage-deflate", 5000, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: tc.opts}, tc.offer)
			msg := jsonish(3, tc.size)
			if err := c.Write(ctxT(t), rally.Text, msg); err != nil {
				t.Fatal(err)
			}
			f, err := p.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Rsv == rawpeer.Rsv1; got != tc.rsv1 {
				t.Fatalf("a %d-byte message went out with RSV1 %v, want %v", tc.size, got, tc.rsv1)
			}
			got := f.Payload
			if tc.rsv1 {
				got = inflateOnce(t, got)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("the payload differs from the message written")
			}
		})
	}
}

func TestClientCompressesOnlyFromTheThresholdWhenItKeepsNoContext(t *testing.T) {
	opts := &rally.DialOptions{Compression: &rally.CompressionOptions{ClientNoContextTakeover: true, Threshold: 64}}
	_, c, p, err := dialAnswered(t, opts, "permessage-deflate; client_no_context_takeover")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{63, 64} {
		msg := jsonish(4, n)
		if err := c.Write(ctxT(t), rally.Binary, msg); err != nil {
			t.Fatal(err)
		}
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := f.Rsv == rawpeer.Rsv1, n >= 64; got != want {
			t.Fatalf("%d bytes: RSV1 %v, want %v", n, got, want)
		}
		if want := n >= 64; want && !bytes.Equal(inflateOnce(t, f.Payload), msg) {
			t.Fatal("the compressed message does not inflate to what was written")
		}
	}
}

func TestSenderWithContextTakeoverCompressesInOneStreamInSendOrder(t *testing.T) {
	c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	in := &oracleInflater{takeover: true}
	msg := jsonish(5, 2000)
	var sizes []int
	for i := range 4 {
		if i%2 == 0 {
			if _, err := c.Send(rally.Text, msg); err != nil {
				t.Fatal(err)
			}
		} else if err := c.Write(ctxT(t), rally.Text, msg); err != nil {
			t.Fatal(err)
		}
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		got, err := in.inflate(f.Payload)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("message %d does not inflate in the stream: %v", i, err)
		}
		sizes = append(sizes, len(f.Payload))
	}
	if sizes[1] >= sizes[0]/2 {
		t.Errorf("a repeated message took %d bytes after %d: the context was not kept", sizes[1], sizes[0])
	}
}

func TestServerFailsCompressionViolationsWithTheirCloseCodes(t *testing.T) {
	utf8Bad := deflateOnce([]byte("ok \xc3\x28 not UTF-8"))
	body := deflateOnce(jsonish(6, 600))
	cases := []struct {
		name   string
		opts   *rally.CompressionOptions
		frames []rawpeer.Frame
		code   uint16
		rule   string
	}{
		{"RSV1OnAPing", &rally.CompressionOptions{}, []rawpeer.Frame{{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpPing}}, 1002, "rsv"},
		{"RSV1OnAClose", &rally.CompressionOptions{}, []rawpeer.Frame{{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpClose, Payload: []byte{3, 0xe8}}}, 1002, "rsv"},
		{"RSV1OnAContinuation", &rally.CompressionOptions{}, []rawpeer.Frame{
			{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: body[:10]},
			{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpContinuation, Payload: body[10:]},
		}, 1002, "rsv"},
		{"RSV1WithoutNegotiation", nil, []rawpeer.Frame{compressedFrame(rawpeer.OpText, body)}, 1002, "rsv"},
		{"RSV2WithCompression", &rally.CompressionOptions{}, []rawpeer.Frame{{Fin: true, Rsv: rawpeer.Rsv2, Opcode: rawpeer.OpText, Payload: []byte("a")}}, 1002, "rsv"},
		{"CorruptDeflateData", &rally.CompressionOptions{}, []rawpeer.Frame{compressedFrame(rawpeer.OpBinary, []byte{0x07, 0x00, 0x01})}, 1007, ""},
		// A code the one-symbol code length code lacks, in the message's last bits.
		{"CorruptDeflateDataInTheLastBits", &rally.CompressionOptions{}, []rawpeer.Frame{compressedFrame(rawpeer.OpBinary, []byte{0x24, 0x41, 0x80})}, 1007, ""},
		{"CompressedTextInflatingToInvalidUTF8", &rally.CompressionOptions{}, []rawpeer.Frame{compressedFrame(rawpeer.OpText, utf8Bad)}, 1007, "utf-8"},
		{"FragmentedCompressedTextInflatingToInvalidUTF8", &rally.CompressionOptions{}, []rawpeer.Frame{
			{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: utf8Bad[:3]},
			{Fin: true, Opcode: rawpeer.OpContinuation, Payload: utf8Bad[3:]},
		}, 1007, "utf-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			s := &rally.Server{Options: &rally.AcceptOptions{Compression: tc.opts}, Close: rec.close}
			p, _ := deflateServer(t, s, "permessage-deflate")
			for _, f := range tc.frames {
				if err := p.WriteFrame(f); err != nil {
					t.Fatal(err)
				}
			}
			checkCloseFrame(t, p.ExpectClose(t, tc.code))
			p.ExpectEOF(t) // the server closes TCP first (RFC 6455 7.1.1)
			p.Close()
			checkProtocolError(t, rec.waitClose(t), tc.code, tc.rule)
		})
	}
}

func TestClientFailsCompressionViolationsWithTheirCloseCodes(t *testing.T) {
	cases := []struct {
		name  string
		frame rawpeer.Frame
		code  uint16
	}{
		{"RSV1OnAPing", rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpPing}, 1002},
		{"CorruptDeflateData", compressedFrame(rawpeer.OpBinary, []byte{0x07, 0x00}), 1007},
		{"CorruptDeflateDataInTheLastBits", compressedFrame(rawpeer.OpBinary, []byte{0x24, 0x41, 0x80}), 1007},
		{"InvalidUTF8", compressedFrame(rawpeer.OpText, deflateOnce([]byte{0xff, 0xfe})), 1007},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, c, p, err := dialAnswered(t, nil, "permessage-deflate")
			if err != nil {
				t.Fatal(err)
			}
			if err := p.WriteFrame(tc.frame); err != nil {
				t.Fatal(err)
			}
			_, _, err = c.Read(ctxT(t))
			var ce *rally.CloseError
			if !errors.As(err, &ce) || ce.Code != tc.code {
				t.Fatalf("Read: %v, want a *CloseError with %d", err, tc.code)
			}
			f := p.ExpectClose(t, tc.code)
			if !f.Masked {
				t.Error("the client's close frame is not masked")
			}
		})
	}
}

func TestServerStopsAZipBombAtTheReadLimitWith1009(t *testing.T) {
	const limit = 1 << 20
	bomb := zerosDeflated(64 << 20) // 64 MiB of zeros in about 80 KiB
	wire := rawpeer.Build(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpBinary, Masked: true, Payload: bomb})
	rec := newRecorder()
	var messages int
	s := &rally.Server{
		Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: limit}, Compression: &rally.CompressionOptions{}},
		Message: func(*rally.Conn, rally.MessageType, []byte) { messages++ },
		Close:   rec.close,
	}
	p, _ := deflateServer(t, s, "permessage-deflate")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := p.WriteRaw(wire); err != nil {
		t.Fatal(err)
	}
	p.ExpectClose(t, 1009)
	p.Close()
	err := rec.waitClose(t)
	runtime.ReadMemStats(&after)
	checkProtocolError(t, err, 1009, "limit")
	if messages != 0 {
		t.Errorf("%d messages delivered", messages)
	}
	// Generous: the limit, the compressed message, the inflater's state
	// and what the test and the runtime allocate meanwhile; 64 MiB were
	// claimed.
	const bound = 6 * limit
	if spent := after.TotalAlloc - before.TotalAlloc; spent > bound {
		t.Errorf("the server allocated %d bytes to refuse the bomb, want at most %d (limit %d, bomb %d bytes inflating to %d)", spent, bound, limit, len(bomb), 64<<20)
	}
}

func TestClientStopsAZipBombAtTheReadLimitWith1009(t *testing.T) {
	const limit = 64 << 10
	_, c, p, err := dialAnswered(t, &rally.DialOptions{ConnOptions: rally.ConnOptions{ReadLimit: limit}}, "permessage-deflate")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteFrame(compressedFrame(rawpeer.OpBinary, deflateOnce(make([]byte, limit+1)))); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Read(ctxT(t))
	checkProtocolError(t, err, 1009, "limit")
	p.ExpectClose(t, 1009)
}

func TestAMessageInflatingToExactlyTheReadLimitIsAccepted(t *testing.T) {
	const limit = 10000
	c, p := acceptDeflate(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: limit}, Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	msg := jsonish(7, limit)
	if err := p.WriteFrame(compressedFrame(rawpeer.OpText, deflateOnce(msg))); err != nil {
		t.Fatal(err)
	}
	_, got, err := c.Read(ctxT(t))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Read: %d bytes, %v; want the %d-byte message", len(got), err, limit)
	}
}

// fanOut connects n raw clients offering offer to a server with opts and
// returns the server's connections in order and their peers.
func fanOut(t *testing.T, opts *rally.CompressionOptions, offer string, n int) ([]*rally.Conn, []*rawpeer.Peer) {
	t.Helper()
	opened := make(chan *rally.Conn, n)
	s := &rally.Server{Options: &rally.AcceptOptions{Compression: opts}, Open: func(c *rally.Conn) { opened <- c }}
	addr := serve(t, s)
	var conns []*rally.Conn
	var peers []*rawpeer.Peer
	for range n {
		p, _, err := rawpeer.DialClient(addr, "/", extHeader(offer), wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		select {
		case c := <-opened:
			conns = append(conns, c)
		case <-time.After(wireTimeout()):
			t.Fatal("Server.Open was not called")
		}
		peers = append(peers, p)
	}
	return conns, peers
}

func TestPreparedMessageIsCompressedOnceForReceiversWithoutContext(t *testing.T) {
	conns, peers := fanOut(t, &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate", 6)
	msg := jsonish(8, 8000)
	pm, err := rally.NewPreparedMessage(rally.Text, msg)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range conns {
		if i%2 == 0 {
			_, err = c.SendPrepared(pm)
		} else {
			err = c.WritePrepared(ctxT(t), pm)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var first string
	for i, p := range peers {
		f, raw := readRaw(t, p)
		if f.Rsv != rawpeer.Rsv1 {
			t.Fatalf("receiver %d got the message uncompressed", i)
		}
		if !bytes.Equal(inflateOnce(t, f.Payload), msg) {
			t.Fatalf("receiver %d: the frame does not inflate to the message", i)
		}
		if i == 0 {
			first = raw
		} else if raw != first {
			t.Fatalf("receiver %d got other bytes than receiver 0:\n%.80s...\n%.80s...", i, raw, first)
		}
	}
	// The same message again goes out the same: nothing was kept between.
	if _, err := conns[0].SendPrepared(pm); err != nil {
		t.Fatal(err)
	}
	if _, raw := readRaw(t, peers[0]); raw != first {
		t.Fatal("a second send of the prepared message went out in other bytes")
	}
}

func TestPreparedMessageIsCompressedPerConnectionWithContextTakeover(t *testing.T) {
	conns, peers := fanOut(t, &rally.CompressionOptions{}, "permessage-deflate", 3)
	msg := jsonish(9, 5000)
	pm, err := rally.NewPreparedMessage(rally.Binary, msg)
	if err != nil {
		t.Fatal(err)
	}
	// Connection 1 has sent something else first: its stream differs.
	if err := conns[1].Write(ctxT(t), rally.Binary, jsonish(10, 3000)); err != nil {
		t.Fatal(err)
	}
	oracles := make([]*oracleInflater, len(peers))
	for i := range oracles {
		oracles[i] = &oracleInflater{takeover: true}
	}
	f, _ := readRaw(t, peers[1])
	if _, err := oracles[1].inflate(f.Payload); err != nil {
		t.Fatal(err)
	}
	var first []string
	for round := range 2 {
		var raws []string
		for i, c := range conns {
			if _, err := c.SendPrepared(pm); err != nil {
				t.Fatal(err)
			}
			f, raw := readRaw(t, peers[i])
			if f.Rsv != rawpeer.Rsv1 {
				t.Fatalf("round %d receiver %d: uncompressed", round, i)
			}
			got, err := oracles[i].inflate(f.Payload)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("round %d receiver %d: does not inflate in its own stream: %v", round, i, err)
			}
			raws = append(raws, raw)
		}
		if round == 0 && raws[1] == raws[0] {
			t.Errorf("connections with different histories got the same bytes")
		}
		if round == 1 && len(raws[0]) >= len(first[0])/4 {
			t.Errorf("the repeated message took %d hex characters after %d: it was not compressed in the connection's own stream", len(raws[0]), len(first[0]))
		}
		if round == 0 {
			first = raws
		}
	}
}

func TestCompressedMessagesReachEveryWayOfReading(t *testing.T) {
	msgs := [][]byte{jsonish(11, 3000), []byte("short and compressed"), jsonish(12, 70000), {}}
	// Frames of a takeover stream: the second message refers to the first.
	d := newOracleDeflater(true)
	var frames [][]rawpeer.Frame
	for i, m := range msgs {
		body := d.deflate(m)
		if i == 2 {
			// Fragmented: RSV1 on the first frame only (RFC 7692 6.1).
			frames = append(frames, []rawpeer.Frame{
				{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: body[:100]},
				{Opcode: rawpeer.OpContinuation, Payload: body[100:200]},
				{Fin: true, Opcode: rawpeer.OpContinuation, Payload: body[200:]},
			})
			continue
		}
		frames = append(frames, []rawpeer.Frame{compressedFrame(rawpeer.OpText, body)})
	}
	send := func(t *testing.T, p *rawpeer.Peer) {
		for _, fs := range frames {
			for _, f := range fs {
				if err := p.WriteFrame(f); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	readers := map[string]func(ctx context.Context, c *rally.Conn) ([]byte, error){
		"Read": func(ctx context.Context, c *rally.Conn) ([]byte, error) {
			_, p, err := c.Read(ctx)
			return p, err
		},
		"ReadAppend": func(ctx context.Context, c *rally.Conn) ([]byte, error) {
			_, p, err := c.ReadAppend(ctx, []byte("x"))
			if err == nil && (len(p) == 0 || p[0] != 'x') {
				return nil, errors.New("ReadAppend lost dst")
			}
			if len(p) > 0 {
				p = p[1:]
			}
			return p, err
		},
		"Reader": func(ctx context.Context, c *rally.Conn) ([]byte, error) {
			_, r, err := c.Reader(ctx)
			if err != nil {
				return nil, err
			}
			return io.ReadAll(r)
		},
	}
	for name, read := range readers {
		t.Run(name, func(t *testing.T) {
			c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
			send(t, p)
			for i, m := range msgs {
				got, err := read(ctxT(t), c)
				if err != nil || !bytes.Equal(got, m) {
					t.Fatalf("message %d: %d bytes, %v; want %d bytes", i, len(got), err, len(m))
				}
			}
		})
		t.Run("Client"+name, func(t *testing.T) {
			_, c, p, err := dialAnswered(t, nil, "permessage-deflate")
			if err != nil {
				t.Fatal(err)
			}
			for _, fs := range frames {
				for _, f := range fs {
					f.Masked = false
					if err := p.WriteRaw(rawpeer.Build(f)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, m := range msgs {
				got, err := read(ctxT(t), c)
				if err != nil || !bytes.Equal(got, m) {
					t.Fatalf("message %d: %d bytes, %v; want %d bytes", i, len(got), err, len(m))
				}
			}
		})
	}
	t.Run("ServerCallbacks", func(t *testing.T) {
		var mu sync.Mutex
		var got [][]byte
		all := make(chan struct{})
		s := &rally.Server{Options: &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, bytes.Clone(p))
			if len(got) == len(msgs) {
				close(all)
			}
		}}
		p, _ := deflateServer(t, s, "permessage-deflate")
		send(t, p)
		select {
		case <-all:
		case <-time.After(wireTimeout()):
			t.Fatal("the messages did not all arrive")
		}
		mu.Lock()
		defer mu.Unlock()
		for i, m := range msgs {
			if !bytes.Equal(got[i], m) {
				t.Fatalf("message %d: %d bytes, want %d", i, len(got[i]), len(m))
			}
		}
	})
}

func TestUpgradeNegotiatesCompressionAsAcceptDoes(t *testing.T) {
	ln := listen(t)
	conns := make(chan *rally.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c, _, err := rally.Upgrade(nc, &rally.AcceptOptions{Compression: &rally.CompressionOptions{ServerNoContextTakeover: true, ClientMaxWindowBits: 10}})
		if err != nil {
			nc.Close()
			close(conns)
			return
		}
		conns <- c
	}()
	p, resp, err := rawpeer.DialClient(ln.Addr().String(), "/", extHeader("permessage-deflate; client_max_window_bits"), wireTimeout())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := <-conns
	if c == nil {
		t.Fatal("Upgrade failed")
	}
	defer c.CloseNow()
	if got, want := resp.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate; server_no_context_takeover; client_max_window_bits=10"; got != want {
		t.Fatalf("answer %q, want %q", got, want)
	}
	msg := jsonish(13, 2000)
	if err := p.WriteFrame(compressedFrame(rawpeer.OpText, deflateOnce(msg))); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctxT(t)); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Read: %d bytes, %v", len(got), err)
	}
	if err := c.Write(ctxT(t), rally.Text, msg); err != nil {
		t.Fatal(err)
	}
	f, err := p.ReadFrame()
	if err != nil || f.Rsv != rawpeer.Rsv1 || !bytes.Equal(inflateOnce(t, f.Payload), msg) {
		t.Fatalf("the answer is not the message compressed: %v", err)
	}
}

func TestControlFramesBetweenFragmentsOfACompressedMessageAreHandled(t *testing.T) {
	c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	msg := jsonish(14, 4000)
	body := deflateOnce(msg)
	for _, f := range []rawpeer.Frame{
		{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpBinary, Payload: body[:50]},
		rawpeer.Ping([]byte("between")),
		{Opcode: rawpeer.OpContinuation, Payload: body[50:60]},
		{Opcode: rawpeer.OpContinuation}, // empty
		{Fin: true, Opcode: rawpeer.OpContinuation, Payload: body[60:]},
	} {
		if err := p.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	typ, got, err := c.Read(ctxT(t))
	if err != nil || typ != rally.Binary || !bytes.Equal(got, msg) {
		t.Fatalf("Read: %v, %d bytes, %v", typ, len(got), err)
	}
	f, err := p.ReadFrame()
	if err != nil || f.Opcode != rawpeer.OpPong || string(f.Payload) != "between" || f.Rsv != 0 {
		t.Fatalf("want the pong, uncompressed, got %+v, %v", f, err)
	}
}

func TestReadWhoseContextEndsInsideACompressedMessageKeepsIt(t *testing.T) {
	c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	msg := jsonish(15, 6000)
	body := deflateOnce(msg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Read(ctx)
		done <- err
	}()
	// The ping after the first half: its pong says the Read has taken the
	// half in. Ending the context then abandons this Read, not the message.
	if err := p.WriteFrame(rawpeer.Frame{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: body[:len(body)/2]}); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteFrame(rawpeer.Ping([]byte("sync"))); err != nil {
		t.Fatal(err)
	}
	if f, err := p.ReadFrame(); err != nil || f.Opcode != rawpeer.OpPong {
		t.Fatalf("want the pong, got %+v, %v", f, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Read: %v, want context.Canceled", err)
	}
	if err := p.WriteFrame(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpContinuation, Payload: body[len(body)/2:]}); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctxT(t)); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the next Read: %d bytes, %v; want the whole %d-byte message", len(got), err, len(msg))
	}
}

func TestACompressedMessageOverTheReadLimitOnTheWireFailsAtItsHeader(t *testing.T) {
	rec := newRecorder()
	s := &rally.Server{Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1000}, Compression: &rally.CompressionOptions{}}, Close: rec.close}
	p, _ := deflateServer(t, s, "permessage-deflate")
	// Only the header of a 5000-byte compressed frame.
	if err := p.WriteRaw(maskedZero(hx("c2 7e 13 88"))); err != nil {
		t.Fatal(err)
	}
	p.ExpectClose(t, 1009)
	p.Close()
	checkProtocolError(t, rec.waitClose(t), 1009, "limit")
}

func TestConcurrentSendersWithContextTakeoverKeepOneStreamInSendOrder(t *testing.T) {
	c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	const senders, each = 6, 40
	pm, err := rally.NewPreparedMessage(rally.Text, jsonish(16, 3000))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				msg := append([]byte(fmt.Sprintf("%d %03d ", g, i)), jsonish(g, 500+i*37)...)
				var err error
				switch (g + i) % 4 {
				case 0:
					_, err = c.Send(rally.Text, msg)
				case 1:
					err = c.Write(context.Background(), rally.Text, msg)
				case 2:
					_, err = c.SendDone(rally.Text, msg, nil)
				case 3:
					_, err = c.SendPrepared(pm)
				}
				if err != nil {
					t.Errorf("sender %d message %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	in := &oracleInflater{takeover: true}
	next := make([]int, senders)
	for n := range senders * each {
		f, err := p.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		got, err := in.inflate(f.Payload)
		if err != nil {
			t.Fatalf("frame %d does not inflate in the stream: %v", n, err)
		}
		if bytes.Equal(got, pm.Payload()) {
			continue
		}
		var g, i int
		if _, err := fmt.Sscanf(string(got), "%d %03d ", &g, &i); err != nil || g >= senders {
			t.Fatalf("frame %d inflates to %.40q", n, got)
		}
		if i < next[g] {
			t.Fatalf("sender %d: message %d arrived after %d", g, i, next[g]-1)
		}
		want := append([]byte(fmt.Sprintf("%d %03d ", g, i)), jsonish(g, 500+i*37)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("sender %d message %d inflates to other bytes", g, i)
		}
		next[g] = i + 1
	}
	wg.Wait()
}

func TestPerMessageCompressionOverrideSetsRSV1AsAsked(t *testing.T) {
	small, big := jsonish(5, 20), jsonish(6, 4000)
	cases := []struct {
		name string
		opts *rally.CompressionOptions
		p    []byte
		mode rally.Compress
		rsv1 bool
	}{
		{"AutoBelowTheThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, small, rally.CompressAuto, false},
		{"AlwaysBelowTheThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, small, rally.CompressAlways, true},
		{"AutoAboveTheThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, big, rally.CompressAuto, true},
		{"NeverAboveTheThreshold", &rally.CompressionOptions{ServerNoContextTakeover: true}, big, rally.CompressNever, false},
		{"NeverWithContextTakeover", &rally.CompressionOptions{}, big, rally.CompressNever, false},
		{"AlwaysOnAReceiveOnlySideStaysPlain", &rally.CompressionOptions{ReceiveOnly: true}, big, rally.CompressAlways, false},
	}
	for _, tc := range cases {
		for _, how := range []string{"WriteCompress", "SendCompress"} {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: tc.opts}, "permessage-deflate")
				var err error
				if how == "WriteCompress" {
					err = c.WriteCompress(ctxT(t), rally.Text, tc.p, tc.mode)
				} else {
					_, err = c.SendCompress(rally.Text, tc.p, tc.mode)
				}
				if err != nil {
					t.Fatal(err)
				}
				f, err := p.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				if got := f.Rsv == rawpeer.Rsv1; got != tc.rsv1 {
					t.Fatalf("RSV1 %v, want %v", got, tc.rsv1)
				}
				got := f.Payload
				if tc.rsv1 {
					got = inflateOnce(t, got)
				}
				if !bytes.Equal(got, tc.p) {
					t.Fatal("the payload differs from the message sent")
				}
			})
		}
	}
	c, _ := acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
	if st, err := c.SendCompress(rally.MessageType(9), small, rally.CompressAlways); err == nil || st != rally.Dropped {
		t.Fatalf("SendCompress of an invalid type = %v, %v; want Dropped and an error", st, err)
	}
}

// A message streamed with Writer is compressed fragment by fragment: RSV1
// on its first frame only (RFC 7692 6.1), the joined payloads inflate with
// an independent inflater to what was written, and the stream stays in
// step for the messages around it (with and without context takeover). A
// Send made during the stream is held and leaves after it, still
// inflating in order.
func TestWriterCompressesAStreamedMessageFrameByFrame(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     *rally.CompressionOptions
		offer    string
		takeover bool
	}{
		{"Takeover", &rally.CompressionOptions{}, "permessage-deflate", true},
		{"NoTakeover", &rally.CompressionOptions{ServerNoContextTakeover: true}, "permessage-deflate; server_no_context_takeover", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := acceptDeflate(t, &rally.AcceptOptions{Compression: tc.opts}, tc.offer)
			in := &oracleInflater{takeover: tc.takeover}
			before := jsonish(1, 3000)
			if err := c.Write(ctxT(t), rally.Text, before); err != nil {
				t.Fatal(err)
			}
			w, err := c.Writer(ctxT(t), rally.Text)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for i := range 5 {
				part := jsonish(10+i, 20000)
				want = append(want, part...)
				if _, err := w.Write(part); err != nil {
					t.Fatal(err)
				}
			}
			held := jsonish(2, 2000)
			if st, err := c.Send(rally.Text, held); st != rally.Queued || err != nil {
				t.Fatalf("Send during the stream = %v, %v; want queued", st, err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			f, err := p.ReadFrame()
			if err != nil || f.Rsv != rawpeer.Rsv1 {
				t.Fatalf("first message: rsv %x, %v; want compressed", f.Rsv, err)
			}
			if got, err := in.inflate(f.Payload); err != nil || !bytes.Equal(got, before) {
				t.Fatalf("message before the stream does not inflate: %v", err)
			}
			var body []byte
			frames := 0
			for {
				f, err := p.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				if frames == 0 && (f.Rsv != rawpeer.Rsv1 || f.Opcode != rawpeer.OpText) {
					t.Fatalf("first fragment: opcode %d rsv %x, want text with RSV1", f.Opcode, f.Rsv)
				}
				if frames > 0 && (f.Rsv != 0 || f.Opcode != rawpeer.OpContinuation) {
					t.Fatalf("fragment %d: opcode %d rsv %x, want a continuation without RSV bits", frames, f.Opcode, f.Rsv)
				}
				frames++
				body = append(body, f.Payload...)
				if f.Fin {
					break
				}
			}
			if len(body) >= len(want)/2 {
				t.Errorf("streamed message of %d bytes took %d on the wire: not compressed", len(want), len(body))
			}
			if got, err := in.inflate(body); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("streamed message (%d frames) does not inflate to what was written: %v", frames, err)
			}
			f, err = p.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			got := f.Payload
			if f.Rsv == rawpeer.Rsv1 {
				if got, err = in.inflate(f.Payload); err != nil {
					t.Fatalf("held message does not inflate after the stream: %v", err)
				}
			}
			if !bytes.Equal(got, held) {
				t.Fatal("held message arrived changed")
			}
		})
	}
}

// Compressed text fails fast too: the first frame of a compressed message
// whose inflated bytes are not valid UTF-8 closes the connection with 1007
// at once, before the rest of the message is sent (the peer never sends
// it), and a bad byte that only the inflater sees is found as it is
// inflated, not after the whole message.
func TestCompressedTextFailsAtTheFirstBadByteAfterItsFirstFrame(t *testing.T) {
	for _, side := range []string{"Server", "Client"} {
		t.Run(side, func(t *testing.T) {
			var c *rally.Conn
			var p *rawpeer.Peer
			if side == "Server" {
				c, p = acceptDeflate(t, &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}, "permessage-deflate")
			} else {
				var err error
				_, c, p, err = dialAnswered(t, nil, "permessage-deflate")
				if err != nil {
					t.Fatal(err)
				}
			}
			ended := make(chan error, 1)
			go func() {
				_, _, err := c.Read(context.Background())
				ended <- err
			}()
			// The first frame inflates to "ok" then a byte that is never
			// UTF-8; the message would go on for 16 MiB.
			var buf bytes.Buffer
			w, _ := flate.NewWriter(&buf, flate.BestSpeed)
			w.Write([]byte("ok \xff and more"))
			w.Flush()
			first := rawpeer.Frame{Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: bytes.Clone(buf.Bytes())}
			if err := p.WriteFrame(first); err != nil {
				t.Fatal(err)
			}
			f := p.ExpectClose(t, rally.CloseInvalidPayload)
			checkCloseFrame(t, f)
			select {
			case err := <-ended:
				checkProtocolError(t, err, rally.CloseInvalidPayload, "UTF-8")
			case <-time.After(wireTimeout()):
				t.Fatal("Read did not end")
			}
		})
	}
}
