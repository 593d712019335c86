package rally

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rallyws/rally/internal/bufpool"
)

// Defaults of the raw upgrade, applied when AcceptOptions leaves the
// setting at its zero value.
const (
	// DefaultUpgradeTimeout bounds how long Upgrade waits for a request
	// head and takes to answer it.
	DefaultUpgradeTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds the request head Upgrade reads.
	DefaultMaxHeaderBytes = 16 << 10
)

// upgradeReadSize is how much Upgrade asks the connection for at a time.
const upgradeReadSize = 4 << 10

// Upgrade performs the server side of the opening handshake on nc, a
// connection fresh from a net.Listener (or a *tls.Conn), without net/http:
// it reads the request straight from nc, answers it, and returns the open
// server-side connection together with the request. A nil opts means the
// defaults, as for Accept.
//
// The request head may take at most opts.MaxHeaderBytes
// (DefaultMaxHeaderBytes when 0; 431 past it) and must arrive, and the
// answer be written, within opts.HandshakeTimeout (DefaultUpgradeTimeout
// when 0), which is the defence against clients that hold connections
// open by sending slowly. With opts.MemoryBudget set, the head is charged
// to the budget at its largest while it arrives, and a new connection gets
// 503 (with Retry-After) when the budget is under pressure or has no room
// for it; at most the budget's MaxPendingHandshakes heads are read at once,
// the oldest one still arriving answered 503 and closed past it (see
// MemoryBudgetOptions). A malformed head gets 400 (505 for an HTTP
// version other than 1.x). A well-formed request then meets the same
// rules and hooks as in Accept, in the same order, and a refused one gets
// the same answers. Bytes the client sent after the request head (an
// eager client's first frames) are the start of the WebSocket stream.
//
// Upgrade owns nc from the call on: when it fails, nc has been answered
// (if the failure allows it) and closed. The request is returned whenever
// a well-formed head was read, also with an error: its URL and headers say
// what was asked, its Body is empty, RemoteAddr is nc's, and TLS is set
// for a *tls.Conn. Every failure but a rejection by opts.Authorize is also
// told to opts.OnHandshakeError. Upgrade blocks until the handshake is
// done; to serve many connections, call it on a goroutine per connection.
func Upgrade(nc net.Conn, opts *AcceptOptions) (*Conn, *http.Request, error) {
	if opts == nil {
		opts = &AcceptOptions{}
	}
	timeout := opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultUpgradeTimeout
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		nc.Close()
		return nil, nil, opts.handshakeFailed(nil, fmt.Errorf("rally: accept: setting the handshake deadline: %w", err))
	}

	p := requestParser{max: opts.MaxHeaderBytes}
	if p.max <= 0 {
		p.max = DefaultMaxHeaderBytes
	}
	// The head is charged to the memory budget at its largest: the read
	// buffer and a head of p.max bytes.
	budget := opts.MemoryBudget
	headCost := int64(upgradeReadSize + p.max)
	h, rf := budget.admitHead(nc, headCost)
	if rf != nil {
		return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, rf))
	}
	buf := bufpool.Get(upgradeReadSize)
	*buf = (*buf)[:cap(*buf)]
	var rest []byte
	for {
		k, err := nc.Read(*buf)
		if k > 0 {
			n, done, perr := p.feed((*buf)[:k])
			if perr != nil {
				bufpool.Put(buf)
				budget.headDone(h, headCost)
				return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, perr.(*refusalError).rf))
			}
			if done {
				rest = (*buf)[n:k]
				break
			}
		}
		if err != nil {
			bufpool.Put(buf)
			if budget.headDone(h, headCost) {
				return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, headsCut()))
			}
			nc.Close()
			return nil, nil, opts.handshakeFailed(nil, readRequestError(err, p.used, timeout))
		}
	}
	if budget.headDone(h, headCost) {
		bufpool.Put(buf)
		return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, headsCut()))
	}
	if len(rest) == 0 {
		bufpool.Put(buf)
		rest = nil
	}
	// Otherwise the buffer is handed over with the bytes in it: newConn
	// takes ownership of them, and the buffer is never put back.

	r, rf := p.request(nc)
	if rf != nil {
		return nil, nil, opts.handshakeFailed(nil, refuseRaw(nc, rf))
	}
	q := upgradeRequestOf(r)
	key, rf := q.check(opts)
	header := http.Header{}
	n, rf := opts.negotiate(r, &q, header, rf)
	if rf != nil {
		return nil, r, opts.refused(r, refuseRaw(nc, rf), rf)
	}
	if _, err := nc.Write(appendSwitchingProtocols(make([]byte, 0, 160), key, n.subprotocol, n.ext, header)); err != nil {
		nc.Close()
		return nil, r, opts.handshakeFailed(r, fmt.Errorf("rally: accept: writing the 101 response: %w", err))
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		nc.Close()
		return nil, r, opts.handshakeFailed(r, fmt.Errorf("rally: accept: clearing the handshake deadline: %w", err))
	}
	c := startConn(nc, rest, true, n.subprotocol, &opts.ConnOptions)
	if n.ext != "" {
		c.enableCompression(opts.Compression, n.params)
	}
	c.setData(n.data)
	return c, r, nil
}

// admitHead admits a request head that Upgrade is about to read on nc, of
// at most size bytes with its buffer: it charges them to the budget and
// counts the head among those in progress (cutting the oldest one if that
// makes more than MaxPendingHandshakes). It refuses with 503 when the
// budget does not admit new connections or has no room for the head. A
// nil budget admits every head and tracks none.
func (b *MemoryBudget) admitHead(nc net.Conn, size int64) (*pendingHead, *refusal) {
	if b == nil {
		return nil, nil
	}
	if rf := b.refuseNew(); rf != nil {
		return nil, rf
	}
	if !b.charge(MemoryHandshakes, size) {
		return nil, memoryBusy()
	}
	return b.heads.start(nc, b.opts.MaxPendingHandshakes), nil
}

// refuseNew returns the answer to a new connection when the budget does
// not admit new ones (see AdmitsNew), or nil.
func (b *MemoryBudget) refuseNew() *refusal {
	if b == nil || b.AdmitsNew() {
		return nil
	}
	return memoryBusy()
}

// memoryBusy is the answer to a new connection the memory budget has no
// room for.
func memoryBusy() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, reason: "server busy: memory budget under pressure; retry later",
		headers: []string{"Retry-After", "5"}}
}

// headDone ends a head admitHead admitted (it arrived, or will not):
// its charge is given back. It reports whether the head had been cut to
// make room for newer ones, in which case it must be refused with
// headsCut.
func (b *MemoryBudget) headDone(h *pendingHead, size int64) (cut bool) {
	if b == nil {
		return false
	}
	b.release(MemoryHandshakes, size)
	return b.heads.finish(h)
}

// headsCut is the answer to a head cut to make room for newer ones.
func headsCut() *refusal {
	return &refusal{status: http.StatusServiceUnavailable, reason: "server busy: too many request heads in progress; retry later",
		headers: []string{"Retry-After", "5"}}
}

// headQueue holds the request heads Upgrade reads at once for the
// connections of one MemoryBudget, oldest first. Past a bound, the oldest
// head still arriving is cut: its read is woken (a read deadline in the
// past) and its Upgrade answers 503. A client that sends its head at once
// is served while slow ones (a slowloris) give way, oldest first.
type headQueue struct {
	mu      sync.Mutex
	pending int
	queue   []*pendingHead // in the order they started; finished ones are skipped
}

// pendingHead is one head in progress. Its fields are guarded by the
// queue's mutex.
type pendingHead struct {
	nc   net.Conn
	done bool // finished, or cut
	cut  bool
}

// start counts a new head on nc, cutting the oldest other one if that
// makes more than limit (limit <= 0: no bound).
func (q *headQueue) start(nc net.Conn, limit int) *pendingHead {
	h := &pendingHead{nc: nc}
	q.mu.Lock()
	q.queue = append(q.queue, h)
	q.pending++
	var oldest *pendingHead
	if limit > 0 && q.pending > limit {
		oldest = q.oldestLocked(h)
	}
	if len(q.queue) > 2*max(q.pending, 512) {
		q.compactLocked()
	}
	q.mu.Unlock()
	if oldest != nil {
		oldest.nc.SetReadDeadline(time.Now())
	}
	return h
}

// oldestLocked cuts and returns the oldest head in progress other than
// h, or nil, dropping it and the finished heads before it from the queue.
func (q *headQueue) oldestLocked(h *pendingHead) *pendingHead {
	for i, o := range q.queue {
		if o == h || o.done {
			continue
		}
		o.done, o.cut = true, true
		q.pending--
		clear(q.queue[:i+1])
		q.queue = q.queue[i+1:]
		return o
	}
	return nil
}

// compactLocked drops finished heads from the queue.
func (q *headQueue) compactLocked() {
	k := q.queue[:0]
	for _, o := range q.queue {
		if !o.done {
			k = append(k, o)
		}
	}
	clear(q.queue[len(k):])
	q.queue = k
}

// finish ends h and reports whether it had been cut.
func (q *headQueue) finish(h *pendingHead) (cut bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !h.done {
		h.done = true
		q.pending--
	}
	return h.cut
}

// pendingHeads returns how many request heads Upgrade is reading now on
// connections charged to the budget.
func (b *MemoryBudget) pendingHeads() int {
	b.heads.mu.Lock()
	defer b.heads.mu.Unlock()
	return b.heads.pending
}

// readRequestError describes why the request head could not be read, after
// used bytes of it had arrived.
func readRequestError(err error, used int, timeout time.Duration) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("rally: accept: the request head did not arrive within %v (%d bytes came): %w", timeout, used, err)
	case used == 0:
		return fmt.Errorf("rally: accept: reading the request: %w", err)
	}
	return fmt.Errorf("rally: accept: the connection ended within the request head (%d bytes came): %w", used, err)
}

// refuseRaw answers a declined handshake on nc, closes nc, and returns the
// error Upgrade reports.
func refuseRaw(nc net.Conn, rf *refusal) error {
	nc.Write(appendRefusal(make([]byte, 0, 256), rf))
	lingerClose(nc)
	return &HandshakeError{Status: rf.status, Reason: rf.reason}
}

// lingerLimit bounds what lingerClose reads and how long it waits for it.
const (
	lingerBytes = 64 << 10
	lingerTime  = 500 * time.Millisecond
)

// lingerClose closes nc after an answer was written to it, so that the
// client reads the answer: closing a TCP socket with unread bytes in it
// sends a reset, which may destroy the answer in flight. So it closes the
// sending side first and drops what the client still sends, up to a bound
// in bytes and time, before closing.
func lingerClose(nc net.Conn) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		nc.Close()
		return
	}
	deadline := time.Now().Add(lingerTime)
	nc.SetReadDeadline(deadline)
	var b [512]byte
	for n := 0; n < lingerBytes; {
		k, err := nc.Read(b[:])
		n += k
		if err != nil {
			break
		}
	}
	nc.Close()
}

// refusalError carries the refusal of a malformed head out of the parser.
type refusalError struct{ rf *refusal }

func (e *refusalError) Error() string { return e.rf.reason }

// malformed is the parser's error for a head that is not HTTP/1.x.
func malformed(status int, reason string) error {
	return &refusalError{&refusal{status: status, reason: reason}}
}

// requestParser reads an HTTP/1.x request head (RFC 9112 sections 2 to 5)
// fed to it in pieces, as they arrive: feed says whether it needs more,
// or where the head ended, or what was wrong. It never blocks and does no
// I/O, so a goroutine reading a connection drives it today and an event
// loop can tomorrow. It keeps the bytes of a line cut by the end of a
// piece; the pieces themselves are the caller's again when feed returns.
//
// It is strict where leniency would let two parsers disagree on what a
// request says (RFC 9112 11.2, request smuggling): no space before a
// header's colon, no obsolete line folding, no control characters in
// values, exactly one Host, Content-Length as digits only and never
// together with Transfer-Encoding. It accepts a bare LF as a line end and
// skips empty lines before the request line (RFC 9112 2.2).
type requestParser struct {
	max  int    // the head may take at most this many bytes
	used int    // bytes of the head consumed so far
	line []byte // the start of a line cut by the end of a piece

	method, target, proto string
	major, minor          int
	header                http.Header
	values                []string // backing array of the headers' first values
	started               bool     // the request line has been read
	done                  bool
	err                   error
}

// feed consumes the bytes of b that belong to the request head. It returns
// how many it used, and whether the head is complete: then b[n:] is what
// followed the head (the start of the WebSocket stream). Otherwise n is
// len(b) and the parser wants more. An error is a head that breaks HTTP's
// rules (n then counts the line that broke them) or exceeds the size bound
// (n then brings the head to exactly the bound), with the status to answer
// it with; the parser keeps returning it. A complete parser takes nothing
// more.
func (p *requestParser) feed(b []byte) (n int, done bool, err error) {
	if p.err != nil {
		return 0, false, p.err
	}
	if p.done {
		return 0, true, nil
	}
	for n < len(b) {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			if fit, err := p.take(len(b) - n); err != nil {
				return n + fit, false, err
			}
			p.line = append(p.line, b[n:]...)
			return len(b), false, nil
		}
		seg := b[n : n+i+1]
		if fit, err := p.take(len(seg)); err != nil {
			return n + fit, false, err
		}
		n += len(seg)
		line := seg
		if len(p.line) > 0 {
			p.line = append(p.line, seg...)
			line = p.line
		}
		line = line[:len(line)-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		err := p.parseLine(line)
		p.line = p.line[:0]
		if err != nil {
			p.err = err
			return n, false, err
		}
		if p.done {
			p.line = nil
			return n, true, nil
		}
	}
	return n, false, nil
}

// take counts k more bytes of the head against the bound. Past it, it
// says how many of the k still fitted: those are taken, the rest are not.
func (p *requestParser) take(k int) (fit int, err error) {
	if p.used+k > p.max {
		fit = p.max - p.used
		p.used = p.max
		p.err = malformed(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request head is longer than %d bytes", p.max))
		return fit, p.err
	}
	p.used += k
	return k, nil
}

// parseLine handles one line of the head, without its line end.
func (p *requestParser) parseLine(line []byte) error {
	if !p.started {
		if len(line) == 0 {
			return nil
		}
		p.started = true
		return p.parseRequestLine(line)
	}
	if len(line) == 0 {
		p.done = true
		return nil
	}
	if line[0] == ' ' || line[0] == '\t' {
		// RFC 9112 5.2: a server may reject obsolete line folding.
		return malformed(http.StatusBadRequest, "obsolete line folding in the request head")
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return malformed(http.StatusBadRequest, "a header line has no colon")
	}
	if !isToken(string(name)) {
		// RFC 9112 5.1: no whitespace between the name and the colon.
		return malformed(http.StatusBadRequest, "a header name is not a token")
	}
	v := string(bytes.Trim(value, " \t"))
	if !validHeaderValue(v) {
		return malformed(http.StatusBadRequest, "a header value holds a control character")
	}
	if p.header == nil {
		p.header = make(http.Header, 16)
		p.values = make([]string, 0, 16)
	}
	key, ok := commonHeaders[string(name)] // no allocation for the lookup
	if !ok {
		key = http.CanonicalHeaderKey(string(name))
	}
	if prev := p.header[key]; len(prev) > 0 {
		p.header[key] = append(prev, v)
		return nil
	}
	// First values share one backing array, as net/http's reader does.
	p.values = append(p.values, v)
	n := len(p.values)
	p.header[key] = p.values[n-1 : n : n]
	return nil
}

// commonHeaders maps the spellings of a handshake's usual headers, as
// browsers and HTTP/2-minded clients write them, to their canonical keys,
// so that parsing them allocates no name.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, name := range []string{
		"Host", "Upgrade", "Connection", "Origin", "User-Agent", "Pragma",
		"Cache-Control", "Accept-Encoding", "Accept-Language", "Cookie",
		"Authorization", "Content-Length", "Transfer-Encoding",
		"Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol",
		"Sec-WebSocket-Extensions", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-IP",
	} {
		canonical := http.CanonicalHeaderKey(name)
		m[name] = canonical
		m[strings.ToLower(name)] = canonical
		m[canonical] = canonical
	}
	return m
}()

// parseRequestLine reads "method SP request-target SP HTTP-version"
// (RFC 9112 3).
func (p *requestParser) parseRequestLine(line []byte) error {
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !isToken(string(method)) || len(target) == 0 {
		return malformed(http.StatusBadRequest, "malformed request line")
	}
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return malformed(http.StatusBadRequest, "malformed request line")
		}
	}
	major, minor, ok := http.ParseHTTPVersion(string(proto))
	if !ok {
		return malformed(http.StatusBadRequest, "malformed request line")
	}
	if major != 1 {
		return malformed(http.StatusHTTPVersionNotSupported, "HTTP version must be 1.x")
	}
	p.method, p.target, p.proto = string(method), string(target), string(proto)
	p.major, p.minor = major, minor
	return nil
}

// request builds the *http.Request of a complete head read from nc, or
// the refusal of a head whose framing is wrong: no or several Host
// headers, a malformed Content-Length, or both Content-Length and
// Transfer-Encoding (RFC 9112 3.2 and 6).
func (p *requestParser) request(nc net.Conn) (*http.Request, *refusal) {
	h := p.header
	if h == nil {
		h = http.Header{}
	}
	// RFC 9112 3.2: a GET's target is in origin-form (a path) or in
	// absolute-form (a URL).
	u, err := url.ParseRequestURI(p.target)
	if err != nil || !strings.HasPrefix(p.target, "/") && (u.Scheme == "" || u.Host == "") {
		return nil, &refusal{status: http.StatusBadRequest, reason: "the request target is not a valid URI"}
	}
	r := &http.Request{
		Method:     p.method,
		URL:        u,
		Proto:      p.proto,
		ProtoMajor: p.major,
		ProtoMinor: p.minor,
		Header:     h,
		Body:       http.NoBody,
		RequestURI: p.target,
		RemoteAddr: nc.RemoteAddr().String(),
	}
	switch hosts := h["Host"]; {
	case len(hosts) > 1:
		return nil, &refusal{status: http.StatusBadRequest, reason: "Host appears more than once"}
	case u.Host != "":
		// RFC 9112 3.2.2: an absolute-form target's authority is the host.
		r.Host = u.Host
	case len(hosts) == 1:
		if !validHost(hosts[0]) {
			return nil, &refusal{status: http.StatusBadRequest, reason: "Host is not a valid host"}
		}
		r.Host = hosts[0]
	case p.major == 1 && p.minor >= 1:
		return nil, &refusal{status: http.StatusBadRequest, reason: "Host is missing"}
	}
	if te := h["Transfer-Encoding"]; len(te) > 0 {
		if len(h["Content-Length"]) > 0 {
			return nil, &refusal{status: http.StatusBadRequest, reason: "both Content-Length and Transfer-Encoding are present"}
		}
		r.TransferEncoding = te
		r.ContentLength = -1
		delete(h, "Transfer-Encoding")
	}
	if cl := h["Content-Length"]; len(cl) > 0 {
		n, err := contentLength(cl)
		if err != nil {
			return nil, &refusal{status: http.StatusBadRequest, reason: err.Error()}
		}
		r.ContentLength = n
	}
	if tc, ok := nc.(*tls.Conn); ok {
		state := tc.ConnectionState()
		r.TLS = &state
	}
	return r, nil
}

// validHost reports whether h may be a Host header: the characters of an
// RFC 3986 authority (host and port, an IP literal in brackets), no user.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~%!$&'()*+,;=:[]", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// contentLength reads Content-Length lines: digits only, and the same
// value on every line (RFC 9110 8.6).
func contentLength(values []string) (int64, error) {
	var n int64 = -1
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			e = strings.Trim(e, " \t")
			k, err := strconv.ParseInt(e, 10, 64)
			if err != nil || k < 0 || e == "" || e[0] == '+' {
				return 0, errors.New("Content-Length is not a number")
			}
			if n >= 0 && k != n {
				return 0, errors.New("Content-Length has differing values")
			}
			n = k
		}
	}
	return n, nil
}
