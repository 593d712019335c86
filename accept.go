package rally

import (
	"errors"
	"fmt"
	"io"
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
// request that carries a body. Then opts.Authorize, when set, may reject
// the request with a status, headers and body of its choosing. A refused
// request gets that status with a short plain-text body (or the
// rejection's), and Accept returns a *HandshakeError; the handler must not
// write to w afterwards. Every failure but a rejection by Authorize is
// also told to opts.OnHandshakeError.
//
// The subprotocol is opts.SelectSubprotocol's choice, or else the first of
// opts.Subprotocols the client offered (none is not an error; see
// Conn.Subprotocol). Headers the handler set on w.Header() before calling
// Accept (Set-Cookie, ...) and those opts.ResponseHeader adds are sent
// with the 101 response, except those the handshake itself sets. The data
// Authorize returned is the connection's Conn.Data.
//
// On success the connection is taken over from net/http (hijacked, which
// works through ResponseWriter wrappers that implement Unwrap), deadlines
// the server set on it are cleared, and every byte the server had already
// read past the request head is the start of the WebSocket stream. After
// Accept returns, w and r.Body must not be used; r's headers and URL may
// be. A ResponseWriter that cannot be hijacked gets a 500. To upgrade a
// net.Conn without net/http, see Upgrade.
//
// An HTTP/2 request (r.ProtoMajor 2) is a WebSocket over HTTP/2 (RFC
// 8441): an extended CONNECT with :protocol websocket, checked for
// Sec-WebSocket-Version and Origin and negotiated (Authorize, subprotocol,
// compression) as above, answered with 200 instead of 101 (405 with
// Allow: CONNECT for another method, 400 without :protocol websocket).
// The connection is then that stream of the HTTP/2 connection, which
// other requests share; it has the same contract and options. The stream
// lives in the handler: over HTTP/2 the handler must not return before
// the connection has ended (wait for <-c.Done()), and must register its
// pattern without a method ("/ws", not "GET /ws"), or net/http answers
// CONNECT with 405. net/http accepts these requests only when the process
// starts with GODEBUG=http2xconnect=1 (see CheckHTTP2); without it, an
// HTTP/2 request to a WebSocket endpoint gets a 400 saying so, and a
// warning is logged once.
func Accept(w http.ResponseWriter, r *http.Request, opts *AcceptOptions) (*Conn, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	if r.ProtoMajor == 2 && r.Method != "PRI" { // PRI: a preface sent to an HTTP/1.1 server
		return acceptH2(w, r, opts)
	}
	q := upgradeRequestOf(r)
	key, rf := q.check(opts)
	n, rf := opts.negotiate(r, &q, w.Header(), rf)
	if rf != nil {
		refuse(w, rf)
		return nil, opts.refused(r, &HandshakeError{Status: rf.status, Reason: rf.reason}, rf)
	}

	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			refuse(w, &refusal{status: http.StatusInternalServerError, reason: "this connection cannot be upgraded to a WebSocket"})
		}
		return nil, opts.handshakeFailed(r, fmt.Errorf("rally: accept: taking over the connection: %w", err))
	}
	// net/http may have set read and write deadlines (Server.ReadTimeout,
	// WriteTimeout); they must not cut a long-lived connection.
	if err := nc.SetDeadline(time.Time{}); err != nil {
		nc.Close()
		return nil, opts.handshakeFailed(r, fmt.Errorf("rally: accept: clearing deadlines: %w", err))
	}
	resp := appendSwitchingProtocols(make([]byte, 0, 160), key, n.subprotocol, n.ext, w.Header())
	if _, err := nc.Write(resp); err != nil {
		nc.Close()
		return nil, opts.handshakeFailed(r, fmt.Errorf("rally: accept: writing the 101 response: %w", err))
	}
	// Whatever the server read past the request head is the start of the
	// stream (an eager client's first frames). Peek hands out bufio's own
	// buffer, without a copy; brw is not kept, so neither is that buffer
	// once newConn has consumed the bytes.
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
	}
	c := startConn(nc, buffered, true, n.subprotocol, &opts.ConnOptions)
	if n.ext != "" {
		c.enableCompression(opts.Compression, n.params)
	}
	c.setData(n.data)
	return c, nil
}

// refuse answers a declined handshake on w with rf's status, headers and
// body (see refusal.setHeader), and so makes net/http close the
// connection after it.
func refuse(w http.ResponseWriter, rf *refusal) {
	rf.setHeader(w.Header())
	w.WriteHeader(rf.status)
	io.WriteString(w, rf.text())
}
