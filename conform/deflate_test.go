package conform

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

func TestCodecRoundTripsWithAndWithoutContextTakeover(t *testing.T) {
	for _, p := range []pmdParams{
		{serverBits: 15, clientBits: 15},
		{serverNoContext: true, clientNoContext: true, serverBits: 15, clientBits: 15},
		{serverBits: 9, clientBits: 8},
	} {
		client, server := newCodec(p, true), newCodec(p, false)
		for i, msg := range [][]byte{patterned(3000), patterned(3000), []byte{}, randomBinary(5000, 1), patterned(100)} {
			c := client.compress(msg)
			if bytes.HasSuffix(c, tail) && len(msg) > 0 {
				t.Errorf("%+v message %d: compressed payload keeps the 00 00 ff ff tail", p, i)
			}
			got, err := server.inflate(c)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("%+v message %d: inflate = %d bytes, %v; want %d bytes", p, i, len(got), err, len(msg))
			}
		}
	}
}

func TestCodecWithoutContextCannotInflateAContextTakeoverStream(t *testing.T) {
	sender := newCodec(pmdParams{serverBits: 15, clientBits: 15}, true)
	receiver := newCodec(pmdParams{clientNoContext: true, serverBits: 15, clientBits: 15}, false)
	msg := patterned(2000)
	receiver.inflate(sender.compress(msg))
	second := sender.compress(msg) // refers back into the first message
	if got, err := receiver.inflate(second); err == nil && bytes.Equal(got, msg) {
		t.Fatal("a message compressed against a previous one inflated without that context")
	}
}

func TestPermessageDeflateParametersAreCheckedAgainstRFC7692(t *testing.T) {
	ext := func(s string) extension {
		h := http.Header{}
		h.Set("Sec-WebSocket-Extensions", s)
		return parseExtensions(h)[0]
	}
	for _, tt := range []struct {
		ext   string
		offer bool
		ok    bool
	}{
		{"permessage-deflate", false, true},
		{"permessage-deflate; client_max_window_bits", true, true},
		{"permessage-deflate; client_max_window_bits", false, false},
		{`permessage-deflate; server_max_window_bits="10"`, false, true},
		{"permessage-deflate; server_max_window_bits=7", false, false},
		{"permessage-deflate; server_max_window_bits=16", false, false},
		{"permessage-deflate; server_max_window_bits=010", false, false},
		{"permessage-deflate; server_no_context_takeover=1", false, false},
		{"permessage-deflate; server_no_context_takeover; server_no_context_takeover", false, false},
		{"permessage-deflate; x_unknown", true, false},
	} {
		if _, err := checkPMD(ext(tt.ext), tt.offer); (err == nil) != tt.ok {
			t.Errorf("checkPMD(%q, offer=%v) = %v, want ok=%v", tt.ext, tt.offer, err, tt.ok)
		}
	}
	offers := func(s string) []extension {
		h := http.Header{}
		h.Set("Sec-WebSocket-Extensions", s)
		return parseExtensions(h)
	}
	for _, tt := range []struct {
		offer, resp string
		ok          bool
	}{
		{"permessage-deflate", "permessage-deflate; server_no_context_takeover", true},
		{"permessage-deflate", "permessage-deflate; client_max_window_bits=10", false},
		{"permessage-deflate; client_max_window_bits", "permessage-deflate; client_max_window_bits=10", true},
		{"permessage-deflate; server_max_window_bits=10", "permessage-deflate; server_max_window_bits=12", false},
		{"permessage-deflate; server_max_window_bits=10", "permessage-deflate", false},
		{"permessage-deflate; server_no_context_takeover", "permessage-deflate", false},
		{"permessage-deflate; x_unknown", "permessage-deflate", false},
		{"permessage-deflate; x_unknown, permessage-deflate", "permessage-deflate", true},
	} {
		h := http.Header{}
		h.Set("Sec-WebSocket-Extensions", tt.resp)
		_, _, ok, err := checkPMDResponse(h, offers(tt.offer))
		if (ok && err == nil) != tt.ok {
			t.Errorf("offer %q, response %q: ok=%v err=%v; want ok=%v", tt.offer, tt.resp, ok, err, tt.ok)
		}
	}
}

func TestNpmWsWithPermessageDeflateGetsOKInSections12And13(t *testing.T) {
	o := quick()
	o.Cases = []string{"12.*", "13.*"}
	check := func(t *testing.T, rep *Report, refused string) {
		logReport(t, rep)
		for id, v := range verdicts(rep) {
			want := OK
			if refused != "" && strings.HasPrefix(id, refused) {
				want = NonStrict // ws answers 400 to an offer list whose first offer it cannot take
			}
			if v != want {
				t.Errorf("%s got %s, want %s", id, v, want)
			}
		}
	}
	t.Run("server", func(t *testing.T) {
		rep, err := RunServer(t.Context(), startNpmWsServer(t, "DEFLATE=1"), o)
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, "13.8.")
	})
	t.Run("client", func(t *testing.T) {
		rep, err := RunClient(t.Context(), o, npmWsClient(t, "DEFLATE=1"))
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, "")
	})
}

func TestPeersWithoutPermessageDeflateAreUnimplementedInTheDeflateSections(t *testing.T) {
	o := quick()
	o.Cases = []string{"12.1.1", "13.*", "106.*"}
	roles(t, refEcho{}, o, func(t *testing.T, rep *Report) {
		c := rep.Counts()
		if c.Unimplemented != c.Total() || c.Total() != 25+14 || rep.Passed() {
			t.Fatalf("%v, passed=%v; want 39 UNIMPLEMENTED and not passed", c, rep.Passed())
		}
	})
}

// startContextLiar serves a server that accepts permessage-deflate with
// server_no_context_takeover but echoes the client's compressed frames as
// they are, so its messages depend on the context it promised not to keep.
func startContextLiar(t *testing.T) string {
	return startVerbatimEcho(t, "permessage-deflate; server_no_context_takeover")
}

// startVerbatimEcho serves a server that answers every handshake with the
// extension ext and echoes every data frame as it arrives, compressed or
// not, never inflating or validating it; pings get their pong.
func startVerbatimEcho(t *testing.T, ext string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				p, _, err := rawpeer.AcceptServer(nc, http.Header{"Sec-WebSocket-Extensions": {ext}}, 10*time.Second)
				if err != nil {
					return
				}
				defer p.Close()
				for {
					f, err := p.ReadFrame()
					if err != nil {
						return
					}
					f.Masked = false
					if f.Opcode == rawpeer.OpPing {
						f.Opcode = rawpeer.OpPong
					}
					p.WriteFrame(f)
					if f.Opcode == rawpeer.OpClose {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "ws://" + ln.Addr().String() + "/"
}

func TestServerThatKeepsTheContextItPromisedToDropFailsSection12(t *testing.T) {
	o := quick()
	o.Cases = []string{"12.1.4", "12.2.4"}
	rep, err := RunServer(t.Context(), startContextLiar(t), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Verdict != Failed {
			t.Errorf("%s got %s %v, want FAILED", r.ID, r.Verdict, r.BehaviorNotes)
		}
	}
}
