package websocket

import (
	"bufio"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rallyws/rally"
)

// HandshakeError is a server's opening handshake that failed: the request
// broke a rule, and the client was answered with an HTTP error.
type HandshakeError struct {
	message string
}

// Error returns what was wrong.
func (e HandshakeError) Error() string { return e.message }

// Upgrader upgrades HTTP requests to WebSocket connections. Its zero value
// is ready to use: same-origin browsers only, no subprotocol, no
// compression. An Upgrader is safe for concurrent use.
type Upgrader struct {
	// HandshakeTimeout is accepted for compatibility; the handshake is
	// bounded by the http.Server's timeouts.
	HandshakeTimeout time.Duration

	// ReadBufferSize and WriteBufferSize are accepted for compatibility:
	// rally sizes and pools its buffers itself (an idle connection holds
	// none).
	ReadBufferSize, WriteBufferSize int

	// WriteBufferPool is accepted for compatibility and not used.
	WriteBufferPool BufferPool

	// Subprotocols are the server's subprotocols in order of preference.
	// When set, the first one the client also offers is chosen; when nil,
	// the Sec-Websocket-Protocol of the response header given to Upgrade
	// is (if the client offered it).
	Subprotocols []string

	// Error, when set, answers a request that fails the handshake, with
	// the HTTP status and the reason. nil answers with the status text.
	Error func(w http.ResponseWriter, r *http.Request, status int, reason error)

	// CheckOrigin returns whether the request's Origin may connect. nil
	// accepts a request without Origin and one whose Origin's host is the
	// request's Host (ASCII case-insensitive), which protects against
	// cross-site WebSocket hijacking.
	CheckOrigin func(r *http.Request) bool

	// EnableCompression accepts permessage-deflate (RFC 7692), without
	// context takeover on either side, when the client offers it.
	EnableCompression bool
}

const notWebSocket = "websocket: the client is not using the websocket protocol: "

func (u *Upgrader) fail(w http.ResponseWriter, r *http.Request, status int, reason string) (*Conn, error) {
	err := HandshakeError{reason}
	if u.Error != nil {
		u.Error(w, r, status, err)
	} else {
		w.Header().Set("Sec-Websocket-Version", "13")
		http.Error(w, http.StatusText(status), status)
	}
	return nil, err
}

// Upgrade upgrades the request to a WebSocket connection. responseHeader,
// which may be nil, is added to the 101 response (Set-Cookie, ...; its
// Sec-Websocket-Protocol chooses the subprotocol when u.Subprotocols is
// nil). A request that breaks a rule is answered with an HTTP error (see
// Upgrader.Error) and a HandshakeError is returned; the handler must not
// write to w after Upgrade, whatever it returned.
func (u *Upgrader) Upgrade(w http.ResponseWriter, r *http.Request, responseHeader http.Header) (*Conn, error) {
	if r.ProtoMajor < 2 {
		if !headerHasToken(r.Header, "Connection", "upgrade") {
			return u.fail(w, r, http.StatusBadRequest, notWebSocket+"'upgrade' token not found in 'Connection' header")
		}
		if !headerHasToken(r.Header, "Upgrade", "websocket") {
			return u.fail(w, r, http.StatusBadRequest, notWebSocket+"'websocket' token not found in 'Upgrade' header")
		}
		if r.Method != http.MethodGet {
			return u.fail(w, r, http.StatusMethodNotAllowed, notWebSocket+"request method is not GET")
		}
	}
	if !headerHasToken(r.Header, "Sec-Websocket-Version", "13") {
		return u.fail(w, r, http.StatusBadRequest, "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header")
	}
	if _, ok := responseHeader["Sec-Websocket-Extensions"]; ok {
		return u.fail(w, r, http.StatusInternalServerError, "websocket: application specific 'Sec-WebSocket-Extensions' headers are unsupported")
	}
	checkOrigin := u.CheckOrigin
	if checkOrigin == nil {
		checkOrigin = sameOrigin
	}
	if !checkOrigin(r) {
		return u.fail(w, r, http.StatusForbidden, "websocket: request origin not allowed by Upgrader.CheckOrigin")
	}
	if r.ProtoMajor < 2 && !validKey(r.Header.Get("Sec-Websocket-Key")) {
		return u.fail(w, r, http.StatusBadRequest, "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length")
	}

	c := newConn()
	opts := &rally.AcceptOptions{
		ConnOptions:             c.connOptions(),
		InsecureSkipOriginCheck: true, // checked above, gorilla's way
		SelectSubprotocol: func(r *http.Request, offered []string) string {
			return u.selectSubprotocol(offered, responseHeader)
		},
	}
	if u.EnableCompression {
		opts.Compression = &rally.CompressionOptions{ServerNoContextTakeover: true, ClientNoContextTakeover: true}
	}
	h := w.Header()
	for k, vs := range responseHeader {
		if http.CanonicalHeaderKey(k) != "Sec-Websocket-Protocol" {
			h[k] = append(h[k], vs...)
		}
	}
	rc, err := rally.Accept(&hijackRecorder{ResponseWriter: w, c: c}, r, opts)
	if err != nil {
		// rally has answered the request.
		return nil, HandshakeError{"websocket: " + err.Error()}
	}
	c.rc = rc
	c.subprotocol = rc.Subprotocol()
	return c, nil
}

func (u *Upgrader) selectSubprotocol(offered []string, responseHeader http.Header) string {
	if u.Subprotocols == nil {
		want := responseHeader.Get("Sec-Websocket-Protocol")
		for _, p := range offered {
			if p == want {
				return p
			}
		}
		return ""
	}
	for _, s := range u.Subprotocols {
		for _, p := range offered {
			if p == s {
				return p
			}
		}
	}
	return ""
}

// hijackRecorder keeps the network connection rally hijacks, for NetConn.
type hijackRecorder struct {
	http.ResponseWriter
	c *Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.c.nc = nc
	return nc, brw, err
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Upgrade upgrades the request with an Upgrader that accepts every origin
// and answers a failed handshake with nothing but the error returned (the
// handler writes the response). Deprecated in gorilla: use Upgrader.
func Upgrade(w http.ResponseWriter, r *http.Request, responseHeader http.Header, readBufSize, writeBufSize int) (*Conn, error) {
	u := Upgrader{
		ReadBufferSize:  readBufSize,
		WriteBufferSize: writeBufSize,
		Error:           func(http.ResponseWriter, *http.Request, int, error) {},
		CheckOrigin:     func(*http.Request) bool { return true },
	}
	return u.Upgrade(w, r, responseHeader)
}

// Subprotocols returns the subprotocols the client offered in the
// request's Sec-Websocket-Protocol headers, in order.
func Subprotocols(r *http.Request) []string {
	var out []string
	for _, v := range r.Header.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// IsWebSocketUpgrade reports whether the request asks for a WebSocket: its
// Connection header holds "upgrade" and its Upgrade header "websocket".
func IsWebSocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether the comma-separated values of header name
// hold token (ASCII case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// sameOrigin is CheckOrigin's default.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return true
	}
	u, err := url.Parse(origin[0])
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(k)
	return err == nil && len(b) == 16
}

var errMalformedURL = errors.New("websocket: malformed ws or wss URL")
