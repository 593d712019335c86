package rally

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Accept answers an opening handshake request inside an http.Handler and
// returns the open server-side connection. A nil opts means the defaults:
// same-origin browsers only, no subprotocol.
//
// It checks the request in this order and refuses the first rule broken:
// 405 (with Allow: GET) for a method other than GET; 400 for an Upgrade
// header without websocket, a Connection header without upgrade, or a
// Sec-WebSocket-Key that is missing, repeated or not 16 bytes in base64;
// 426 (with Sec-WebSocket-Version: 13) for any version but 13, or none;
// 403 for an Origin the policy refuses (see AcceptOptions); 400 for a
// request that carries a body. A refused request gets that status with a
// short plain-text body, and Accept returns a *HandshakeError; the handler
// must not write to w afterwards.
//
// The subprotocol is the first of opts.Subprotocols the client offered
// (none is not an error; see Conn.Subprotocol). Headers the handler set on
// w.Header() before calling Accept (Set-Cookie, ...) are sent with the 101
// response, except those the handshake itself sets.
//
// On success the connection is taken over from net/http (hijacked, which
// works through ResponseWriter wrappers that implement Unwrap), deadlines
// the server set on it are cleared, and every byte the server had already
// read past the request head is the start of the WebSocket stream. After
// Accept returns, w and r.Body must not be used; r's headers and URL may
// be. WebSockets over HTTP/2 (RFC 8441) are not supported: such a request
// has no Upgrade and Connection headers and gets a 400. A ResponseWriter
// that cannot be hijacked gets a 500.
func Accept(w http.ResponseWriter, r *http.Request, opts *AcceptOptions) (*Conn, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	// net/http keys headers in canonical form: "Sec-Websocket-Key".
	q := upgradeRequest{
		method:     r.Method,
		host:       r.Host,
		upgrade:    r.Header["Upgrade"],
		connection: r.Header["Connection"],
		key:        r.Header["Sec-Websocket-Key"],
		version:    r.Header["Sec-Websocket-Version"],
		origin:     r.Header["Origin"],
		protocol:   r.Header["Sec-Websocket-Protocol"],
		// net/http moves Transfer-Encoding out of the header; a chunked body
		// has ContentLength -1.
		hasBody: r.ContentLength != 0 || len(r.TransferEncoding) > 0,
	}
	key, rf := q.check(opts)
	if rf != nil {
		refuse(w, rf)
		return nil, &HandshakeError{Status: rf.status, Reason: rf.reason}
	}
	subprotocol := selectSubprotocol(opts.Subprotocols, q.protocol)

	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			refuse(w, &refusal{status: http.StatusInternalServerError, reason: "this connection cannot be upgraded to a WebSocket"})
		}
		return nil, fmt.Errorf("rally: accept: taking over the connection: %w", err)
	}
	// net/http may have set read and write deadlines (Server.ReadTimeout,
	// WriteTimeout); they must not cut a long-lived connection.
	if err := nc.SetDeadline(time.Time{}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("rally: accept: clearing deadlines: %w", err)
	}
	resp := appendSwitchingProtocols(make([]byte, 0, 160), key, subprotocol, w.Header())
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("rally: accept: writing the 101 response: %w", err)
	}
	// Whatever the server read past the request head is the start of the
	// stream (an eager client's first frames). Peek hands out bufio's own
	// buffer, without a copy; brw is not kept, so neither is that buffer
	// once newConn has consumed the bytes.
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
	}
	return startConn(nc, buffered, true, subprotocol, &opts.ConnOptions), nil
}

// refuse answers a declined handshake with rf's status, header lines and a
// plain-text body, and asks net/http to close the connection after it: the
// client meant to leave HTTP, so what it sends next is no request.
func refuse(w http.ResponseWriter, rf *refusal) {
	h := w.Header()
	for i := 0; i+1 < len(rf.headers); i += 2 {
		h.Set(rf.headers[i], rf.headers[i+1])
	}
	h.Set("Connection", "close")
	http.Error(w, rf.reason, rf.status)
}
