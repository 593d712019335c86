package conform

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// extension is one element of a Sec-WebSocket-Extensions header (RFC 6455
// 9.1): a name and its parameters in order (a value is "" when absent).
type extension struct {
	name   string
	params [][2]string
}

func (e extension) has(name string) (string, bool) {
	for _, p := range e.params {
		if p[0] == name {
			return p[1], true
		}
	}
	return "", false
}

func (e extension) String() string {
	var b strings.Builder
	b.WriteString(e.name)
	for _, p := range e.params {
		b.WriteString("; " + p[0])
		if p[1] != "" {
			b.WriteString("=" + p[1])
		}
	}
	return b.String()
}

// parseExtensions parses every Sec-WebSocket-Extensions line of h. Quoted
// values lose their quotes (RFC 7692 7.1 allows quoted window bits).
func parseExtensions(h http.Header) []extension {
	var out []extension
	for _, line := range h.Values("Sec-WebSocket-Extensions") {
		for item := range strings.SplitSeq(line, ",") {
			parts := strings.Split(item, ";")
			e := extension{name: strings.TrimSpace(parts[0])}
			if e.name == "" {
				continue
			}
			for _, p := range parts[1:] {
				k, v, _ := strings.Cut(p, "=")
				e.params = append(e.params, [2]string{strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)})
			}
			out = append(out, e)
		}
	}
	return out
}

// pmdParams are the negotiated parameters of permessage-deflate (RFC 7692
// 7.1). Window bits are 15 unless negotiated lower.
type pmdParams struct {
	serverNoContext, clientNoContext bool
	serverBits, clientBits           int
}

func windowBits(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 8 || n > 15 || strconv.Itoa(n) != v {
		return 0, fmt.Errorf("window bits %q: want 8 to 15", v)
	}
	return n, nil
}

// checkPMD validates the permessage-deflate parameters of e, as an offer
// (clients may send client_max_window_bits without a value) or a response.
func checkPMD(e extension, offer bool) (pmdParams, error) {
	p := pmdParams{serverBits: 15, clientBits: 15}
	seen := map[string]bool{}
	for _, kv := range e.params {
		k, v := kv[0], kv[1]
		if seen[k] {
			return p, fmt.Errorf("parameter %s given twice (RFC 7692 7)", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "server_no_context_takeover", "client_no_context_takeover":
			if v != "" {
				return p, fmt.Errorf("parameter %s has a value (RFC 7692 7.1.1)", k)
			}
			if k == "server_no_context_takeover" {
				p.serverNoContext = true
			} else {
				p.clientNoContext = true
			}
		case "server_max_window_bits":
			p.serverBits, err = windowBits(v)
		case "client_max_window_bits":
			if v == "" && offer {
				continue
			}
			p.clientBits, err = windowBits(v)
		default:
			return p, fmt.Errorf("unknown parameter %s (RFC 7692 7)", k)
		}
		if err != nil {
			return p, fmt.Errorf("%s: %w", k, err)
		}
	}
	return p, nil
}

// checkPMDResponse validates a server's Sec-WebSocket-Extensions answer to
// the suite's offers. It returns ok false when the server declined.
func checkPMDResponse(h http.Header, offers []extension) (pmdParams, string, bool, error) {
	exts := parseExtensions(h)
	if len(exts) == 0 {
		return pmdParams{}, "", false, nil
	}
	if len(exts) > 1 || exts[0].name != "permessage-deflate" {
		return pmdParams{}, "", false, fmt.Errorf("response extensions %v: want one permessage-deflate", exts)
	}
	resp := exts[0]
	p, err := checkPMD(resp, false)
	if err != nil {
		return p, resp.String(), false, err
	}
	// RFC 7692 7.1.2.2: client_max_window_bits only if the accepted offer
	// had it; 7.1.2.1: server_max_window_bits no larger than offered.
	fits := slices.ContainsFunc(offers, func(o extension) bool {
		if _, ok := resp.has("client_max_window_bits"); ok {
			if _, offered := o.has("client_max_window_bits"); !offered {
				return false
			}
		}
		if _, ok := o.has("server_no_context_takeover"); ok && !p.serverNoContext {
			return false
		}
		if v, ok := o.has("server_max_window_bits"); ok {
			if n, err := windowBits(v); err == nil && p.serverBits > n {
				return false
			}
			if _, ok := resp.has("server_max_window_bits"); !ok {
				return false
			}
		}
		for _, kv := range o.params {
			if _, err := checkPMD(extension{name: o.name, params: [][2]string{kv}}, true); err != nil {
				return false // an offer with a parameter the server cannot know must be declined
			}
		}
		return true
	})
	if !fits {
		return p, resp.String(), false, fmt.Errorf("response %q accepts none of the offers %v (RFC 7692 7.1)", resp, offers)
	}
	return p, resp.String(), true, nil
}

// firstPMDOffer returns the first valid permessage-deflate offer of a
// client's request, as a server picks one (RFC 7692 5.1).
func firstPMDOffer(h http.Header) (extension, pmdParams, bool) {
	for _, e := range parseExtensions(h) {
		if e.name != "permessage-deflate" {
			continue
		}
		if p, err := checkPMD(e, true); err == nil {
			return e, p, true
		}
	}
	return extension{}, pmdParams{}, false
}

// codec compresses what the suite sends and inflates what it receives, per
// the negotiated parameters. The suite compresses without back-references
// (Huffman only) whenever its window is limited below 15 bits, which any
// window admits; compress/flate cannot shrink its window otherwise.
type codec struct {
	sendNoContext, huffmanOnly bool
	recvNoContext              bool

	w       *flate.Writer
	out     bytes.Buffer
	history []byte
}

// newCodec builds the codec of the side that is the client (client) or the
// server with negotiated parameters p.
func newCodec(p pmdParams, client bool) *codec {
	if client {
		return &codec{sendNoContext: p.clientNoContext, huffmanOnly: p.clientBits < 15, recvNoContext: p.serverNoContext}
	}
	return &codec{sendNoContext: p.serverNoContext, huffmanOnly: p.serverBits < 15, recvNoContext: p.clientNoContext}
}

var tail = []byte{0x00, 0x00, 0xff, 0xff}

// compress returns the compressed payload of one message (RFC 7692 7.2.1):
// deflate, flush, and drop the final 00 00 ff ff.
func (c *codec) compress(p []byte) []byte { return c.compressParts(p)[0] }

// compressParts compresses one message given in parts, with a sync flush
// after each, and returns one chunk per part: each chunk inflates to
// exactly its part once the chunks before it are inflated, so a case
// decides what each frame (or each TCP write) of a compressed message
// inflates to. The last chunk drops the final 00 00 ff ff (RFC 7692
// 7.2.1).
func (c *codec) compressParts(parts ...[]byte) [][]byte {
	c.out.Reset()
	if c.w == nil || c.sendNoContext {
		level := flate.BestCompression
		if c.huffmanOnly {
			level = flate.HuffmanOnly
		}
		c.w, _ = flate.NewWriter(&c.out, level)
	}
	chunks := make([][]byte, len(parts))
	for i, p := range parts {
		c.w.Write(p)
		c.w.Flush()
		chunks[i] = bytes.Clone(c.out.Bytes())
		c.out.Reset()
	}
	last := len(chunks) - 1
	chunks[last] = bytes.TrimSuffix(chunks[last], tail)
	return chunks
}

// errInflateLimit is returned for a message that inflates past the limit.
var errInflateLimit = errors.New("inflated message exceeds 64 MiB")

// inflate returns the payload of one compressed message (RFC 7692 7.2.2):
// the data, 00 00 ff ff, and (so the reader ends) an empty final block,
// inflated with the previous messages' last 32 KiB as dictionary when the
// peer keeps its context.
func (c *codec) inflate(p []byte) ([]byte, error) {
	data := append(append(bytes.Clone(p), tail...), 0x01, 0x00, 0x00, 0xff, 0xff)
	var dict []byte
	if !c.recvNoContext {
		dict = c.history
	}
	const limit = 64 << 20
	out, err := io.ReadAll(io.LimitReader(flate.NewReaderDict(bytes.NewReader(data), dict), limit+1))
	if err != nil {
		return nil, err
	}
	if len(out) > limit {
		return nil, errInflateLimit
	}
	if !c.recvNoContext {
		c.history = append(c.history, out...)
		if n := len(c.history); n > 32<<10 {
			c.history = append([]byte(nil), c.history[n-32<<10:]...)
		}
	}
	return out, nil
}
