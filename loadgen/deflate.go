package loadgen

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// permessage-deflate (RFC 7692) for loadgen, on the standard library's
// compress/flate: loadgen checks rally, so it does not share rally's
// deflate package.
//
// loadgen offers "permessage-deflate; client_no_context_takeover": its
// messages are compressed once before the run, each on its own, and sent
// from the pre-built batch as plain frames are. The server may keep context
// for its own messages; loadgen then inflates each reply in the stream of
// its connection.

// deflateOffer is the Sec-WebSocket-Extensions value loadgen sends. It
// offers no client_max_window_bits: compress/flate always uses a 32 KiB
// window, so the server may not ask for a smaller one.
const deflateOffer = "permessage-deflate; client_no_context_takeover"

// compressedConn is a connection on which permessage-deflate was
// negotiated; serverNoContext says the server compresses every message on
// its own.
type compressedConn struct {
	net.Conn
	serverNoContext bool
}

// parseDeflateAnswer checks the server's Sec-WebSocket-Extensions answer to
// deflateOffer (RFC 7692 7.1) and reports whether the server keeps no
// context. An empty answer is not an error: ok is false.
func parseDeflateAnswer(answer string) (serverNoContext, ok bool, err error) {
	if strings.TrimSpace(answer) == "" {
		return false, false, nil
	}
	if strings.Contains(answer, ",") {
		return false, false, fmt.Errorf("server chose several extensions %q", answer)
	}
	parts := strings.Split(answer, ";")
	if name := strings.TrimSpace(parts[0]); name != "permessage-deflate" {
		return false, false, fmt.Errorf("server chose extension %q, which was not offered", name)
	}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		name, value, hasValue := strings.Cut(strings.TrimSpace(p), "=")
		name = strings.TrimSpace(name)
		value = strings.Trim(strings.TrimSpace(value), `"`)
		if seen[name] {
			return false, false, fmt.Errorf("permessage-deflate parameter %s given twice", name)
		}
		seen[name] = true
		switch {
		case name == "server_no_context_takeover" && !hasValue:
			serverNoContext = true
		case name == "client_no_context_takeover" && !hasValue:
		case name == "server_max_window_bits" && hasValue:
			// Any window the server uses inflates with a 32 KiB one.
			if n, err := strconv.Atoi(value); err != nil || n < 8 || n > 15 {
				return false, false, fmt.Errorf("server_max_window_bits=%q is not 8 to 15", value)
			}
		default:
			// client_max_window_bits included: it was not offered.
			return false, false, fmt.Errorf("permessage-deflate parameter %q was not offered or is malformed", strings.TrimSpace(p))
		}
	}
	return serverNoContext, true, nil
}

// deflateMessage compresses one message on its own (no context), as its
// frame's payload: flushed to a byte boundary, the trailing 00 00 ff ff
// removed (RFC 7692 7.2.1).
func deflateMessage(p []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestSpeed)
	w.Write(p)
	w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
}

// windowSize is the largest LZ77 window of RFC 7692, 2^15 bytes.
const windowSize = 1 << 15

// maxInflated bounds what one reply may inflate to (a server sending a
// zip bomb fails the connection instead of exhausting loadgen).
const maxInflated = 64 << 20

// inflater inflates the compressed replies of one connection.
type inflater struct {
	takeover bool
	zmsg     []byte // the compressed message being gathered
	out      []byte
	window   []byte // the last windowSize bytes inflated, with takeover
	src      bytes.Reader
	fr       io.ReadCloser
}

// inflate inflates the gathered message and returns its payload, valid
// until the next call.
func (in *inflater) inflate() ([]byte, error) {
	// RFC 7692 7.2.2: append 00 00 ff ff; an empty final stored block
	// then ends the stream for the reader.
	in.zmsg = append(in.zmsg, 0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff)
	in.src.Reset(in.zmsg)
	var dict []byte
	if in.takeover {
		dict = in.window
	}
	if in.fr == nil {
		in.fr = flate.NewReaderDict(&in.src, dict)
	} else if err := in.fr.(flate.Resetter).Reset(&in.src, dict); err != nil {
		return nil, err
	}
	in.out = in.out[:0]
	for {
		if len(in.out) == cap(in.out) {
			in.out = append(in.out, make([]byte, max(4096, cap(in.out)))...)[:len(in.out)]
		}
		n, err := in.fr.Read(in.out[len(in.out):cap(in.out)])
		in.out = in.out[:len(in.out)+n]
		if len(in.out) > maxInflated {
			return nil, fmt.Errorf("%w: a reply inflates past %d bytes", errProtocol, maxInflated)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: corrupt compressed reply: %v", errProtocol, err)
		}
	}
	if in.takeover {
		in.keep(in.out)
	}
	return in.out, nil
}

// keep adds p to the window, keeping its last windowSize bytes.
func (in *inflater) keep(p []byte) {
	if len(p) >= windowSize {
		in.window = append(in.window[:0], p[len(p)-windowSize:]...)
		return
	}
	if drop := len(in.window) + len(p) - windowSize; drop > 0 {
		in.window = in.window[:copy(in.window, in.window[drop:])]
	}
	in.window = append(in.window, p...)
}
