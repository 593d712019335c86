package deflate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ExtensionName is the extension token of RFC 7692.
const ExtensionName = "permessage-deflate"

// Window sizes, as the base-2 logarithm of the LZ77 window (RFC 7692 7.1.2).
const (
	MinWindowBits = 8
	MaxWindowBits = 15
)

// The parameters of RFC 7692 7.1.
const (
	serverNoContextTakeover = "server_no_context_takeover"
	clientNoContextTakeover = "client_no_context_takeover"
	serverMaxWindowBits     = "server_max_window_bits"
	clientMaxWindowBits     = "client_max_window_bits"
)

// Params are the negotiated parameters of one connection. Each direction
// has a sender, which compresses, and a receiver, which inflates: the
// server sends with the Server* parameters and the client with the Client*
// ones. A sender uses a window of at most 2^bits bytes; the receiver keeps
// a window of that size between messages unless the sender keeps no
// context.
//
// The server builds its codecs as
//
//	NewCompressor(level, p.ServerMaxWindowBits, !p.ServerNoContextTakeover)
//	NewDecompressor(p.ClientMaxWindowBits, !p.ClientNoContextTakeover)
//
// and the client the other way round.
type Params struct {
	// ServerNoContextTakeover: the server compresses every message on its
	// own, with an empty window.
	ServerNoContextTakeover bool
	// ClientNoContextTakeover: the client compresses every message on its
	// own, with an empty window.
	ClientNoContextTakeover bool
	// ServerMaxWindowBits is the largest window the server uses, 8 to 15.
	ServerMaxWindowBits int
	// ClientMaxWindowBits is the largest window the client uses, 8 to 15.
	ClientMaxWindowBits int
}

// ServerConfig is what a server is willing to negotiate. The zero value
// keeps context in both directions with 15-bit windows, and accepts every
// well-formed offer.
type ServerConfig struct {
	// ServerNoContextTakeover makes the server compress every message on
	// its own (it answers server_no_context_takeover to every offer): an
	// idle connection then keeps no window for sending, and a message for
	// many receivers can be compressed once (CompressOnce).
	ServerNoContextTakeover bool
	// ClientNoContextTakeover asks the client to compress every message on
	// its own, so the server keeps no window for the client's messages.
	ClientNoContextTakeover bool
	// ServerMaxWindowBits limits the server's window to 2^n bytes, 8 to 15;
	// 0 means 15. Offers asking for a smaller window get it.
	ServerMaxWindowBits int
	// ClientMaxWindowBits limits the client's window, and so what the server
	// keeps for the client's messages, to 2^n bytes, 8 to 15; 0 means 15.
	// Below 15, an offer without client_max_window_bits is declined: the
	// server could not tell that client to use a smaller window.
	ClientMaxWindowBits int
}

// ClientConfig is what a client offers. The zero value offers
// "permessage-deflate; client_max_window_bits", as Chrome does: context
// takeover both ways, 15-bit windows, and the server may limit the
// client's window.
type ClientConfig struct {
	// ServerNoContextTakeover asks the server to compress every message on
	// its own, so the client keeps no window for the server's messages.
	// A server that does not agree fails the handshake (Accept).
	ServerNoContextTakeover bool
	// ClientNoContextTakeover makes the client compress every message on
	// its own (and says so in the offer).
	ClientNoContextTakeover bool
	// ServerMaxWindowBits asks the server to use a window of at most 2^n
	// bytes, 8 to 15; 0 means 15 and is not offered.
	ServerMaxWindowBits int
	// ClientMaxWindowBits limits the client's own window to 2^n bytes,
	// 8 to 15; 0 means 15.
	ClientMaxWindowBits int
}

// Validate returns an error unless both window bits are 0 or 8 to 15. Call
// it when the configuration is set, so that Negotiate fails only on a
// client's header.
func (c ServerConfig) Validate() error {
	return validateBits(c.ServerMaxWindowBits, c.ClientMaxWindowBits)
}

// Validate returns an error unless both window bits are 0 or 8 to 15.
// Offer and Accept use 15 in place of a value out of range.
func (c ClientConfig) Validate() error {
	return validateBits(c.ServerMaxWindowBits, c.ClientMaxWindowBits)
}

func validateBits(server, client int) error {
	for _, b := range []struct {
		name string
		v    int
	}{{"ServerMaxWindowBits", server}, {"ClientMaxWindowBits", client}} {
		if b.v != 0 && (b.v < MinWindowBits || b.v > MaxWindowBits) {
			return fmt.Errorf("deflate: %s is %d, want 0 or %d to %d", b.name, b.v, MinWindowBits, MaxWindowBits)
		}
	}
	return nil
}

// bitsOr15 maps a configured window size to the one used: 0 (and, after
// Validate failed, anything out of range) means 15.
func bitsOr15(n int) int {
	if n < MinWindowBits || n > MaxWindowBits {
		return MaxWindowBits
	}
	return n
}

// Negotiate answers a client's Sec-WebSocket-Extensions header (all its
// lines): it takes the first permessage-deflate offer that it can honour
// and returns the parameters and the extension element to send back in
// the 101 response. answer is "" when nothing was accepted: the connection
// then runs without compression.
//
// Extensions other than permessage-deflate are ignored. An offer that RFC
// 7692 section 5 says to decline (an unknown parameter, a parameter twice,
// a bad value) is passed over, and so is an offer cfg cannot honour; the
// next one is tried. The answer never carries a bare
// client_max_window_bits, and carries server_max_window_bits whenever the
// offer did (RFC 7692 7.1.2.1).
//
// An 8-bit server window is honoured: the compressor keeps every match
// within 256 bytes.
//
// Negotiate returns an error for a header that does not parse (a server
// answers 400, as npm ws does) or for a cfg that fails Validate. It is safe
// for concurrent use.
func Negotiate(header []string, cfg ServerConfig) (p Params, answer string, err error) {
	if err := cfg.Validate(); err != nil {
		return Params{}, "", err
	}
	exts, err := parseExtensions(header)
	if err != nil {
		return Params{}, "", err
	}
	for _, e := range exts {
		if e.name != ExtensionName {
			continue
		}
		o, err := parseParams(e.params, false)
		if err != nil {
			continue // RFC 7692 5: decline
		}
		if p, answer, ok := acceptOffer(o, cfg); ok {
			return p, answer, nil
		}
	}
	return Params{}, "", nil
}

// offer holds the parameters of one offer or answer. Window bits are 0
// when absent; clientBitsPresent tells a bare client_max_window_bits from
// none.
type offer struct {
	serverNoContext, clientNoContext bool
	serverBits, clientBits           int
	clientBitsPresent                bool
}

// parseParams checks the parameters of one permessage-deflate element. In
// an answer, client_max_window_bits needs a value (RFC 7692 7.1.2.2).
func parseParams(params []param, answer bool) (offer, error) {
	var o offer
	var seen [4]bool
	for _, pr := range params {
		var i int
		switch pr.name {
		case serverNoContextTakeover:
			i = 0
			o.serverNoContext = true
		case clientNoContextTakeover:
			i = 1
			o.clientNoContext = true
		case serverMaxWindowBits:
			i = 2
			b, ok := windowBits(pr)
			if !ok {
				return offer{}, fmt.Errorf("%s with value %q, want 8 to 15", pr.name, pr.value)
			}
			o.serverBits = b
		case clientMaxWindowBits:
			i = 3
			o.clientBitsPresent = true
			if pr.hasValue || answer {
				b, ok := windowBits(pr)
				if !ok {
					return offer{}, fmt.Errorf("%s with value %q, want 8 to 15", pr.name, pr.value)
				}
				o.clientBits = b
			}
		default:
			return offer{}, fmt.Errorf("unknown parameter %q", pr.name)
		}
		if seen[i] {
			return offer{}, fmt.Errorf("parameter %s given twice", pr.name)
		}
		seen[i] = true
		if i < 2 && pr.hasValue {
			return offer{}, fmt.Errorf("parameter %s with a value", pr.name)
		}
	}
	return o, nil
}

// windowBits reads a window size: a decimal 8 to 15 without leading zeros
// (RFC 7692 7.1.2.1).
func windowBits(pr param) (int, bool) {
	if !pr.hasValue {
		return 0, false
	}
	switch v := pr.value; {
	case len(v) == 1 && (v[0] == '8' || v[0] == '9'):
		return int(v[0] - '0'), true
	case len(v) == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5':
		return 10 + int(v[1]-'0'), true
	}
	return 0, false
}

// acceptOffer builds the parameters and the answer for one valid offer, or
// declines it.
func acceptOffer(o offer, cfg ServerConfig) (Params, string, bool) {
	p := Params{
		ServerNoContextTakeover: o.serverNoContext || cfg.ServerNoContextTakeover,
		ClientNoContextTakeover: o.clientNoContext || cfg.ClientNoContextTakeover,
		ServerMaxWindowBits:     bitsOr15(cfg.ServerMaxWindowBits),
		ClientMaxWindowBits:     MaxWindowBits,
	}
	if o.serverBits != 0 {
		p.ServerMaxWindowBits = min(p.ServerMaxWindowBits, o.serverBits)
	}
	clientLimit := bitsOr15(cfg.ClientMaxWindowBits)
	switch {
	case o.clientBitsPresent && o.clientBits != 0:
		// The client said which window it will use; it may be told less.
		p.ClientMaxWindowBits = min(clientLimit, o.clientBits)
	case o.clientBitsPresent:
		p.ClientMaxWindowBits = clientLimit
	case clientLimit < MaxWindowBits:
		return Params{}, "", false
	}
	var b strings.Builder
	b.WriteString(ExtensionName)
	if p.ServerNoContextTakeover {
		b.WriteString("; " + serverNoContextTakeover)
	}
	if p.ClientNoContextTakeover {
		b.WriteString("; " + clientNoContextTakeover)
	}
	if o.serverBits != 0 || p.ServerMaxWindowBits < MaxWindowBits {
		b.WriteString("; " + serverMaxWindowBits + "=" + strconv.Itoa(p.ServerMaxWindowBits))
	}
	if p.ClientMaxWindowBits < MaxWindowBits {
		b.WriteString("; " + clientMaxWindowBits + "=" + strconv.Itoa(p.ClientMaxWindowBits))
	}
	return p, b.String(), true
}

// Offer returns the Sec-WebSocket-Extensions value a client sends for cfg:
// one permessage-deflate offer. It always carries client_max_window_bits,
// bare or with cfg's limit, so the server may ask for a smaller window.
// Window bits out of range count as 15.
func Offer(cfg ClientConfig) string {
	var b strings.Builder
	b.WriteString(ExtensionName)
	if cfg.ServerNoContextTakeover {
		b.WriteString("; " + serverNoContextTakeover)
	}
	if cfg.ClientNoContextTakeover {
		b.WriteString("; " + clientNoContextTakeover)
	}
	if s := bitsOr15(cfg.ServerMaxWindowBits); s < MaxWindowBits {
		b.WriteString("; " + serverMaxWindowBits + "=" + strconv.Itoa(s))
	}
	b.WriteString("; " + clientMaxWindowBits)
	if c := bitsOr15(cfg.ClientMaxWindowBits); c < MaxWindowBits {
		b.WriteString("=" + strconv.Itoa(c))
	}
	return b.String()
}

// errAnswer is the cause of every error Accept returns for a well-formed
// header.
var errAnswer = errors.New("deflate: server's Sec-WebSocket-Extensions answer")

// Accept checks the server's Sec-WebSocket-Extensions header (all its
// lines) against the offer Offer(cfg) made, and returns the parameters the
// client must use. ok is false when the server accepted no extension.
//
// The connection must fail (RFC 6455 4.1) when Accept returns an error:
// the header does not parse, names an extension other than
// permessage-deflate or names it twice, has a parameter that is unknown,
// repeated or badly valued, carries a bare client_max_window_bits, a
// server_max_window_bits larger than offered, or leaves out a
// server_no_context_takeover or server_max_window_bits that was offered.
//
// The server may ask for client_no_context_takeover and a smaller client
// window unprompted; a client_max_window_bits above cfg's limit is not an
// error (the client just keeps to its own, smaller window). It is safe for
// concurrent use.
func Accept(header []string, cfg ClientConfig) (p Params, ok bool, err error) {
	exts, err := parseExtensions(header)
	if err != nil {
		return Params{}, false, err
	}
	if len(exts) == 0 {
		return Params{}, false, nil
	}
	fail := func(format string, a ...any) (Params, bool, error) {
		return Params{}, false, fmt.Errorf("%w: "+format, append([]any{errAnswer}, a...)...)
	}
	for _, e := range exts {
		if e.name != ExtensionName {
			return fail("extension %q was not offered", e.name)
		}
	}
	if len(exts) > 1 {
		return fail("%s accepted %d times", ExtensionName, len(exts))
	}
	a, err := parseParams(exts[0].params, true)
	if err != nil {
		return fail("%v", err)
	}
	asked := bitsOr15(cfg.ServerMaxWindowBits)
	switch {
	case cfg.ServerNoContextTakeover && !a.serverNoContext:
		return fail("%s was offered but not accepted", serverNoContextTakeover)
	case asked < MaxWindowBits && a.serverBits == 0:
		return fail("%s=%d was offered but not accepted", serverMaxWindowBits, asked)
	case a.serverBits > asked:
		return fail("%s=%d is larger than the %d offered", serverMaxWindowBits, a.serverBits, asked)
	}
	p = Params{
		ServerNoContextTakeover: a.serverNoContext,
		ClientNoContextTakeover: a.clientNoContext || cfg.ClientNoContextTakeover,
		ServerMaxWindowBits:     MaxWindowBits,
		ClientMaxWindowBits:     bitsOr15(cfg.ClientMaxWindowBits),
	}
	if a.serverBits != 0 {
		p.ServerMaxWindowBits = a.serverBits
	}
	if a.clientBits != 0 {
		p.ClientMaxWindowBits = min(p.ClientMaxWindowBits, a.clientBits)
	}
	return p, true, nil
}
