package deflate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// defaults is what a zero configuration negotiates with a bare offer.
var defaults = Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}

func with(f func(*Params)) Params {
	p := defaults
	f(&p)
	return p
}

func TestNegotiateAnswersTheFirstOfferItCanHonour(t *testing.T) {
	chrome := "permessage-deflate; client_max_window_bits"
	tests := []struct {
		name   string
		cfg    ServerConfig
		header []string
		answer string // "" = declined
		params Params
	}{
		{"no header", ServerConfig{}, nil, "", Params{}},
		{"no permessage-deflate", ServerConfig{}, []string{"x-webkit-deflate-frame"}, "", Params{}},
		{"a bare offer (Firefox)", ServerConfig{}, []string{"permessage-deflate"}, "permessage-deflate", defaults},
		{"a bare client_max_window_bits is never echoed (Chrome)", ServerConfig{}, []string{chrome}, "permessage-deflate", defaults},
		{"unknown extensions before it are ignored", ServerConfig{}, []string{"x-webkit-deflate-frame, " + chrome}, "permessage-deflate", defaults},
		{"the offer on a second header line", ServerConfig{}, []string{"x-foo", chrome}, "permessage-deflate", defaults},
		{"client window announced by the client is confirmed", ServerConfig{},
			[]string{"permessage-deflate; client_max_window_bits=10"},
			"permessage-deflate; client_max_window_bits=10", with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"client window of 15 needs no answer", ServerConfig{},
			[]string{"permessage-deflate; client_max_window_bits=15"}, "permessage-deflate", defaults},
		{"server window asked for is granted and answered", ServerConfig{},
			[]string{"permessage-deflate; server_max_window_bits=12"},
			"permessage-deflate; server_max_window_bits=12", with(func(p *Params) { p.ServerMaxWindowBits = 12 })},
		{"server window of 15 asked for is still answered", ServerConfig{},
			[]string{"permessage-deflate; server_max_window_bits=15"},
			"permessage-deflate; server_max_window_bits=15", defaults},
		{"an 8-bit server window is honoured, not raised to 9", ServerConfig{},
			[]string{"permessage-deflate; server_max_window_bits=8"},
			"permessage-deflate; server_max_window_bits=8", with(func(p *Params) { p.ServerMaxWindowBits = 8 })},
		{"no context takeover asked for both ways", ServerConfig{},
			[]string{"permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
			with(func(p *Params) { p.ServerNoContextTakeover, p.ClientNoContextTakeover = true, true })},
		{"all four parameters", ServerConfig{},
			[]string{"permessage-deflate; client_max_window_bits=9; server_max_window_bits=10; client_no_context_takeover; server_no_context_takeover"},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9",
			Params{true, true, 10, 9}},
		{"quoted values", ServerConfig{},
			[]string{`permessage-deflate; server_max_window_bits="11"; client_max_window_bits="1\2"`},
			"permessage-deflate; server_max_window_bits=11; client_max_window_bits=12", Params{false, false, 11, 12}},

		// Offers RFC 7692 section 5 says to decline; the next offer is taken.
		{"an unknown parameter", ServerConfig{}, []string{"permessage-deflate; foo"}, "", Params{}},
		{"an unknown parameter, then a good offer", ServerConfig{},
			[]string{"permessage-deflate; foo, permessage-deflate; server_no_context_takeover"},
			"permessage-deflate; server_no_context_takeover", with(func(p *Params) { p.ServerNoContextTakeover = true })},
		{"a parameter twice", ServerConfig{}, []string{"permessage-deflate; server_no_context_takeover; server_no_context_takeover"}, "", Params{}},
		{"client_max_window_bits twice", ServerConfig{}, []string{"permessage-deflate; client_max_window_bits; client_max_window_bits=10"}, "", Params{}},
		{"server_max_window_bits without a value", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits"}, "", Params{}},
		{"server_max_window_bits=7", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits=7"}, "", Params{}},
		{"server_max_window_bits=16", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits=16"}, "", Params{}},
		{"server_max_window_bits=08", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits=08"}, "", Params{}},
		{"server_max_window_bits=+9", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits=+9"}, "", Params{}},
		{"server_max_window_bits=1e1", ServerConfig{}, []string{"permessage-deflate; server_max_window_bits=1e1"}, "", Params{}},
		{"client_max_window_bits=7", ServerConfig{}, []string{"permessage-deflate; client_max_window_bits=7"}, "", Params{}},
		{"client_max_window_bits=ten", ServerConfig{}, []string{"permessage-deflate; client_max_window_bits=ten"}, "", Params{}},
		{"server_no_context_takeover with a value", ServerConfig{}, []string{"permessage-deflate; server_no_context_takeover=1"}, "", Params{}},
		{"client_no_context_takeover with a value", ServerConfig{}, []string{`permessage-deflate; client_no_context_takeover="x"`}, "", Params{}},
		{"a bad offer, then one with a window", ServerConfig{},
			[]string{"permessage-deflate; server_max_window_bits=7, permessage-deflate; server_max_window_bits=9"},
			"permessage-deflate; server_max_window_bits=9", with(func(p *Params) { p.ServerMaxWindowBits = 9 })},
		{"the name in another case is another extension", ServerConfig{}, []string{"Permessage-Deflate"}, "", Params{}},

		// What the server's configuration adds.
		{"server without takeover says so", ServerConfig{ServerNoContextTakeover: true},
			[]string{chrome}, "permessage-deflate; server_no_context_takeover", with(func(p *Params) { p.ServerNoContextTakeover = true })},
		{"server asks the client not to keep context", ServerConfig{ClientNoContextTakeover: true},
			[]string{chrome}, "permessage-deflate; client_no_context_takeover", with(func(p *Params) { p.ClientNoContextTakeover = true })},
		{"server limits its own window unasked", ServerConfig{ServerMaxWindowBits: 10},
			[]string{"permessage-deflate"}, "permessage-deflate; server_max_window_bits=10", with(func(p *Params) { p.ServerMaxWindowBits = 10 })},
		{"the smaller of the server's and the offer's server window", ServerConfig{ServerMaxWindowBits: 10},
			[]string{"permessage-deflate; server_max_window_bits=12"}, "permessage-deflate; server_max_window_bits=10", with(func(p *Params) { p.ServerMaxWindowBits = 10 })},
		{"the smaller of the offer's and the server's server window", ServerConfig{ServerMaxWindowBits: 10},
			[]string{"permessage-deflate; server_max_window_bits=9"}, "permessage-deflate; server_max_window_bits=9", with(func(p *Params) { p.ServerMaxWindowBits = 9 })},
		{"server limits the client's window when the offer allows it", ServerConfig{ClientMaxWindowBits: 10},
			[]string{chrome}, "permessage-deflate; client_max_window_bits=10", with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"client's own smaller window is kept", ServerConfig{ClientMaxWindowBits: 10},
			[]string{"permessage-deflate; client_max_window_bits=9"}, "permessage-deflate; client_max_window_bits=9", with(func(p *Params) { p.ClientMaxWindowBits = 9 })},
		{"client's larger window is cut down", ServerConfig{ClientMaxWindowBits: 10},
			[]string{"permessage-deflate; client_max_window_bits=12"}, "permessage-deflate; client_max_window_bits=10", with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"an offer that cannot be told a client window is declined", ServerConfig{ClientMaxWindowBits: 10},
			[]string{"permessage-deflate"}, "", Params{}},
		{"... and the next offer that can is taken", ServerConfig{ClientMaxWindowBits: 10},
			[]string{"permessage-deflate, permessage-deflate; client_max_window_bits"},
			"permessage-deflate; client_max_window_bits=10", with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"everything configured", ServerConfig{true, true, 9, 8},
			[]string{chrome}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=8",
			Params{true, true, 9, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, answer, err := Negotiate(tt.header, tt.cfg)
			if err != nil {
				t.Fatalf("Negotiate(%q) failed: %v", tt.header, err)
			}
			if answer != tt.answer || p != tt.params {
				t.Fatalf("Negotiate(%q) = %+v, %q; want %+v, %q", tt.header, p, answer, tt.params, tt.answer)
			}
		})
	}
}

func TestNegotiateFailsOnAHeaderThatDoesNotParse(t *testing.T) {
	for _, h := range []string{"permessage-deflate;", "permessage-deflate; a=\"1", ", ;", "x-foo bar, permessage-deflate"} {
		_, answer, err := Negotiate([]string{h}, ServerConfig{})
		if !errors.Is(err, errMalformed) || answer != "" {
			t.Errorf("Negotiate(%q) = %q, %v; want no answer and a malformed-header error", h, answer, err)
		}
	}
}

func TestNegotiateFailsOnAConfigurationWithWindowBitsOutOfRange(t *testing.T) {
	for _, cfg := range []ServerConfig{{ServerMaxWindowBits: 7}, {ServerMaxWindowBits: 16}, {ClientMaxWindowBits: -1}, {ClientMaxWindowBits: 1}} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil", cfg)
		}
		if _, _, err := Negotiate([]string{"permessage-deflate"}, cfg); err == nil || errors.Is(err, errMalformed) {
			t.Errorf("Negotiate with %+v = %v; want a configuration error", cfg, err)
		}
	}
	for _, cfg := range []ClientConfig{{ServerMaxWindowBits: 7}, {ClientMaxWindowBits: 16}} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil", cfg)
		}
	}
	for _, b := range []int{0, 8, 15} {
		if err := (ServerConfig{ServerMaxWindowBits: b, ClientMaxWindowBits: b}).Validate(); err != nil {
			t.Errorf("window bits %d: %v", b, err)
		}
	}
}

func TestOfferSaysWhatTheClientWantsAndAlwaysLetsTheServerLimitTheClientWindow(t *testing.T) {
	tests := []struct {
		cfg  ClientConfig
		want string
	}{
		{ClientConfig{}, "permessage-deflate; client_max_window_bits"},
		{ClientConfig{ServerNoContextTakeover: true}, "permessage-deflate; server_no_context_takeover; client_max_window_bits"},
		{ClientConfig{ClientNoContextTakeover: true}, "permessage-deflate; client_no_context_takeover; client_max_window_bits"},
		{ClientConfig{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=10; client_max_window_bits"},
		{ClientConfig{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}, "permessage-deflate; client_max_window_bits"},
		{ClientConfig{ClientMaxWindowBits: 8}, "permessage-deflate; client_max_window_bits=8"},
		{ClientConfig{true, true, 9, 12}, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=12"},
	}
	for _, tt := range tests {
		if got := Offer(tt.cfg); got != tt.want {
			t.Errorf("Offer(%+v) = %q, want %q", tt.cfg, got, tt.want)
		}
	}
}

func TestAcceptTakesTheParametersOfAValidAnswer(t *testing.T) {
	tests := []struct {
		name   string
		cfg    ClientConfig
		header []string
		ok     bool
		want   Params
	}{
		{"no header: no compression", ClientConfig{}, nil, false, Params{}},
		{"an empty header: no compression", ClientConfig{}, []string{"", " , "}, false, Params{}},
		{"bare", ClientConfig{}, []string{"permessage-deflate"}, true, defaults},
		{"server keeps no context, unasked", ClientConfig{}, []string{"permessage-deflate; server_no_context_takeover"},
			true, with(func(p *Params) { p.ServerNoContextTakeover = true })},
		{"server tells the client to keep no context", ClientConfig{}, []string{"permessage-deflate; client_no_context_takeover"},
			true, with(func(p *Params) { p.ClientNoContextTakeover = true })},
		{"server limits its window, unasked", ClientConfig{}, []string{"permessage-deflate; server_max_window_bits=8"},
			true, with(func(p *Params) { p.ServerMaxWindowBits = 8 })},
		{"server limits the client's window", ClientConfig{}, []string{"permessage-deflate; client_max_window_bits=9"},
			true, with(func(p *Params) { p.ClientMaxWindowBits = 9 })},
		{"quoted values", ClientConfig{}, []string{`permessage-deflate; client_max_window_bits="9"`},
			true, with(func(p *Params) { p.ClientMaxWindowBits = 9 })},
		{"no-takeover that was asked for", ClientConfig{ServerNoContextTakeover: true}, []string{"permessage-deflate; server_no_context_takeover"},
			true, with(func(p *Params) { p.ServerNoContextTakeover = true })},
		{"the client's own no-takeover", ClientConfig{ClientNoContextTakeover: true}, []string{"permessage-deflate"},
			true, with(func(p *Params) { p.ClientNoContextTakeover = true })},
		{"the server window asked for", ClientConfig{ServerMaxWindowBits: 10}, []string{"permessage-deflate; server_max_window_bits=10"},
			true, with(func(p *Params) { p.ServerMaxWindowBits = 10 })},
		{"a server window below the one asked for", ClientConfig{ServerMaxWindowBits: 10}, []string{"permessage-deflate; server_max_window_bits=9"},
			true, with(func(p *Params) { p.ServerMaxWindowBits = 9 })},
		{"the client keeps its own window when none is answered", ClientConfig{ClientMaxWindowBits: 10}, []string{"permessage-deflate"},
			true, with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"the client keeps its own window when a larger one is answered", ClientConfig{ClientMaxWindowBits: 10}, []string{"permessage-deflate; client_max_window_bits=12"},
			true, with(func(p *Params) { p.ClientMaxWindowBits = 10 })},
		{"the client takes a smaller window answered", ClientConfig{ClientMaxWindowBits: 10}, []string{"permessage-deflate; client_max_window_bits=8"},
			true, with(func(p *Params) { p.ClientMaxWindowBits = 8 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok, err := Accept(tt.header, tt.cfg)
			if err != nil {
				t.Fatalf("Accept(%q) failed: %v", tt.header, err)
			}
			if ok != tt.ok || p != tt.want {
				t.Fatalf("Accept(%q) = %+v, %t; want %+v, %t", tt.header, p, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAcceptFailsAnAnswerTheOfferDidNotAllow(t *testing.T) {
	tests := []struct {
		name   string
		cfg    ClientConfig
		header string
		why    string
	}{
		{"malformed", ClientConfig{}, "permessage-deflate;", "malformed"},
		{"another extension", ClientConfig{}, "x-webkit-deflate-frame", `extension "x-webkit-deflate-frame" was not offered`},
		{"another extension too", ClientConfig{}, "permessage-deflate, x-foo", `extension "x-foo" was not offered`},
		{"the name in another case", ClientConfig{}, "Permessage-Deflate", "was not offered"},
		{"accepted twice", ClientConfig{}, "permessage-deflate, permessage-deflate", "accepted 2 times"},
		{"an unknown parameter", ClientConfig{}, "permessage-deflate; foo", `unknown parameter "foo"`},
		{"a parameter twice", ClientConfig{}, "permessage-deflate; client_no_context_takeover; client_no_context_takeover", "given twice"},
		{"a window twice", ClientConfig{}, "permessage-deflate; server_max_window_bits=9; server_max_window_bits=9", "given twice"},
		{"a flag with a value", ClientConfig{}, "permessage-deflate; server_no_context_takeover=1", "with a value"},
		{"a bare client_max_window_bits", ClientConfig{}, "permessage-deflate; client_max_window_bits", "client_max_window_bits with value"},
		{"client_max_window_bits=16", ClientConfig{}, "permessage-deflate; client_max_window_bits=16", "want 8 to 15"},
		{"a bare server_max_window_bits", ClientConfig{}, "permessage-deflate; server_max_window_bits", "want 8 to 15"},
		{"server_max_window_bits=7", ClientConfig{}, "permessage-deflate; server_max_window_bits=7", "want 8 to 15"},
		{"server_max_window_bits=010", ClientConfig{}, "permessage-deflate; server_max_window_bits=010", "want 8 to 15"},
		{"server_no_context_takeover asked for, not given", ClientConfig{ServerNoContextTakeover: true}, "permessage-deflate", "server_no_context_takeover was offered but not accepted"},
		{"server window asked for, not answered", ClientConfig{ServerMaxWindowBits: 10}, "permessage-deflate", "server_max_window_bits=10 was offered but not accepted"},
		{"a larger server window than asked for", ClientConfig{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=11", "larger than the 10 offered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok, err := Accept([]string{tt.header}, tt.cfg)
			if err == nil {
				t.Fatalf("Accept(%q) = %+v, %t; want an error", tt.header, p, ok)
			}
			if ok || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("Accept(%q) = %t, %q; want an error saying %q", tt.header, ok, err, tt.why)
			}
		})
	}
}

// TestEveryOfferIsAcceptedAndBothSidesAgree negotiates every client
// configuration against every server configuration, the way a handshake
// does, and checks that each side keeps the other's promises.
func TestEveryOfferIsAcceptedAndBothSidesAgree(t *testing.T) {
	bits := []int{0, 8, 9, 12, 15}
	flags := []bool{false, true}
	n := 0
	for _, cs := range flags {
		for _, cc := range flags {
			for _, cS := range bits {
				for _, cC := range bits {
					ccfg := ClientConfig{cs, cc, cS, cC}
					for _, ss := range flags {
						for _, sc := range flags {
							for _, sS := range bits {
								for _, sC := range bits {
									scfg := ServerConfig{ss, sc, sS, sC}
									checkAgreement(t, ccfg, scfg)
									n++
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d configuration pairs", n)
}

func checkAgreement(t *testing.T, ccfg ClientConfig, scfg ServerConfig) {
	t.Helper()
	offer := Offer(ccfg)
	sp, answer, err := Negotiate([]string{offer}, scfg)
	if err != nil || answer == "" {
		t.Fatalf("server %+v declined %q: %v", scfg, offer, err)
	}
	cp, ok, err := Accept([]string{answer}, ccfg)
	if err != nil || !ok {
		t.Fatalf("client %+v refused %q (offer %q): %v", ccfg, answer, offer, err)
	}
	what := fmt.Sprintf("offer %q, answer %q: server %+v, client %+v", offer, answer, sp, cp)
	switch {
	case sp.ServerNoContextTakeover != cp.ServerNoContextTakeover, sp.ServerMaxWindowBits != cp.ServerMaxWindowBits:
		t.Fatalf("the two sides disagree on the server's sending: %s", what)
	case cp.ClientMaxWindowBits > sp.ClientMaxWindowBits:
		t.Fatalf("the client would use a larger window than the server keeps: %s", what)
	case sp.ClientNoContextTakeover && !cp.ClientNoContextTakeover:
		t.Fatalf("the client would keep context the server drops: %s", what)
	case ccfg.ServerNoContextTakeover && !sp.ServerNoContextTakeover, scfg.ServerNoContextTakeover && !sp.ServerNoContextTakeover:
		t.Fatalf("server_no_context_takeover not kept: %s", what)
	case scfg.ClientNoContextTakeover && !sp.ClientNoContextTakeover:
		t.Fatalf("client_no_context_takeover not asked for: %s", what)
	case sp.ServerMaxWindowBits > bitsOr15(ccfg.ServerMaxWindowBits), sp.ServerMaxWindowBits > bitsOr15(scfg.ServerMaxWindowBits):
		t.Fatalf("server window above a limit: %s", what)
	case cp.ClientMaxWindowBits > bitsOr15(ccfg.ClientMaxWindowBits), sp.ClientMaxWindowBits > bitsOr15(scfg.ClientMaxWindowBits):
		t.Fatalf("client window above a limit: %s", what)
	case strings.HasSuffix(answer, clientMaxWindowBits) || strings.Contains(answer, clientMaxWindowBits+";"):
		t.Fatalf("bare client_max_window_bits echoed: %s", what)
	}
}
