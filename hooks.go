package rally

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/rallyws/rally/deflate"
)

// Rejection is how an AcceptOptions.Authorize hook refuses an opening
// handshake: the client gets Status, Header and Body, and the connection
// is closed after them.
type Rejection struct {
	// Status is the HTTP status to answer with, 300 to 599 (a 3xx with a
	// Location header redirects a client that follows redirects). 0 means
	// 403 Forbidden. Any other value is a bug in the hook: the client gets
	// 500 and AcceptOptions.OnHandshakeError is told.
	Status int

	// Header holds headers to send (WWW-Authenticate, Retry-After,
	// Location, Content-Type, ...). Connection, Content-Length,
	// Transfer-Encoding and Upgrade are rally's and are not sent.
	Header http.Header

	// Body is sent as it is; keep it short. Content-Type is
	// text/plain; charset=utf-8 unless Header names another.
	Body string
}

// decide runs the application's hooks on a request that passed the
// handshake rules (q is what the rules saw of r) and returns what the
// answer carries: the data to attach to the connection and the subprotocol
// chosen, or the refusal. header is the 101's extra headers, which
// o.ResponseHeader may add to.
//
// The order is Authorize, then SelectSubprotocol (or Subprotocols), then
// ResponseHeader: nothing is chosen or added for a request that is refused.
func (o *AcceptOptions) decide(r *http.Request, q *upgradeRequest, header http.Header) (data any, subprotocol string, rf *refusal) {
	if o.Authorize != nil {
		d, rej := o.Authorize(r)
		if rej != nil {
			return nil, "", rej.refusal()
		}
		data = d
	}
	if o.SelectSubprotocol != nil {
		offered := slices.Collect(listElements(q.protocol))
		subprotocol = o.SelectSubprotocol(r, offered)
		if subprotocol != "" && !slices.Contains(offered, subprotocol) {
			return nil, "", &refusal{
				status: http.StatusInternalServerError,
				reason: fmt.Sprintf("AcceptOptions.SelectSubprotocol chose %q, which the client did not offer", subprotocol),
			}
		}
	} else {
		subprotocol = selectSubprotocol(o.Subprotocols, q.protocol)
	}
	if o.ResponseHeader != nil {
		o.ResponseHeader(r, header)
	}
	return data, subprotocol, nil
}

// negotiation is what an opening handshake settles once its request passed
// the rules of its HTTP version: the data for Conn.Data, the subprotocol,
// and compression (the extension to answer with, "" when declined).
type negotiation struct {
	data        any
	subprotocol string
	ext         string
	params      deflate.Params
}

// negotiate settles a handshake whose request rf did not refuse (q is what
// the rules saw of r): the server's own options are checked, a memory
// budget under pressure refuses with 503, then the application's hooks
// run (see decide), then compression is negotiated.
// header is the answer's extra headers. Every handshake (Accept, Upgrade,
// over HTTP/2) goes through it.
func (o *AcceptOptions) negotiate(r *http.Request, q *upgradeRequest, header http.Header, rf *refusal) (negotiation, *refusal) {
	var n negotiation
	if rf == nil {
		rf = o.ConnOptions.refusal()
	}
	if rf == nil {
		rf = o.MemoryBudget.refuseNew() // 503 under memory pressure
	}
	if rf == nil {
		n.data, n.subprotocol, rf = o.decide(r, q, header)
	}
	if rf == nil {
		n.ext, n.params, rf = negotiateCompression(o.Compression, r.Header["Sec-Websocket-Extensions"])
	}
	return n, rf
}

// refused is the error a refused handshake returns: told to
// OnHandshakeError unless the application's own hook refused it.
func (o *AcceptOptions) refused(r *http.Request, err error, rf *refusal) error {
	if rf.byHook {
		return err
	}
	return o.handshakeFailed(r, err)
}

// refusal turns the hook's rejection into the answer rally sends.
func (rej *Rejection) refusal() *refusal {
	status := rej.Status
	if status == 0 {
		status = http.StatusForbidden
	}
	if status < 300 || status > 599 {
		return &refusal{
			status: http.StatusInternalServerError,
			reason: fmt.Sprintf("AcceptOptions.Authorize rejected with status %d, which is not 300 to 599", rej.Status),
		}
	}
	body := rej.Body
	return &refusal{
		status: status,
		reason: "rejected by AcceptOptions.Authorize",
		header: rej.Header,
		body:   &body,
		byHook: true,
	}
}

// handshakeFailed tells o.OnHandshakeError about a failed handshake, and
// returns err.
func (o *AcceptOptions) handshakeFailed(r *http.Request, err error) error {
	if o.OnHandshakeError != nil {
		o.OnHandshakeError(r, err)
	}
	return err
}
