package rally

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
	"unsafe"

	"github.com/rallyws/rally/frame"
)

// Defaults applied when an option is left at its zero value.
const (
	// DefaultReadLimit is the largest message a connection accepts unless
	// ConnOptions.ReadLimit says otherwise. A message of exactly this size is accepted.
	DefaultReadLimit = 16 << 20
	// DefaultMaxFragments is the number of frames one message may span.
	DefaultMaxFragments = 131072
	// DefaultCloseTimeout bounds how long Close waits for the peer's close frame,
	// and how long a client waits for the server to close TCP afterwards.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultHandshakeTimeout bounds a Dial's whole opening handshake.
	DefaultHandshakeTimeout = 30 * time.Second
	// DefaultControlRate is how many ping and pong frames a second a peer
	// may send on average (bursts of ten times as many): far more than a
	// peer that pings to keep a connection alive or to measure latency.
	DefaultControlRate = 100
)

// ConnOptions are the settings of an open connection, shared by the server
// (AcceptOptions) and the client (DialOptions). The zero value is valid.
type ConnOptions struct {
	// ReadLimit is the largest message, in bytes, that Read, Reader and the
	// handler callbacks accept (1009 past it). 0 means DefaultReadLimit;
	// a negative value means no limit.
	ReadLimit int64

	// ReadLimitReason, when set, is the reason of the 1009 close a message
	// larger than ReadLimit gets, instead of "message larger than the read
	// limit": say the limit and what raises it, so that the peer's user
	// can act ("message larger than 1 MiB; raise it with --max-bytes").
	// A reason longer than 123 bytes is cut there.
	ReadLimitReason string

	// MaxFragments is the largest number of frames one message may span
	// (1008 past it). 0 means DefaultMaxFragments; negative means no limit.
	MaxFragments int

	// PingInterval, when positive, sends a ping after this much time without
	// any frame from the peer.
	PingInterval time.Duration

	// IdleTimeout, when positive, closes the connection with 1001 (going away)
	// after this much time without any frame from the peer. With PingInterval
	// set, a live peer answers the pings and so is never idle.
	IdleTimeout time.Duration

	// CloseTimeout bounds the close handshake. 0 means DefaultCloseTimeout.
	CloseTimeout time.Duration

	// ControlRate bounds the ping and pong frames the peer may send: this
	// many a second on average, in bursts of up to ten times as many (a
	// token bucket). Every ping is owed a pong, and a flood of them would
	// take the CPU, an event loop and the send queue from the other
	// connections: past the rate the connection is closed with 1008
	// (policy violation), and the read side ends with a *CloseError whose
	// Err is ErrControlRate. 0 means DefaultControlRate; negative means no
	// limit.
	ControlRate int

	// OnPing and OnPong, when set, are called on the reading goroutine with the
	// payload of each ping or pong that arrives (valid during the call only).
	// A pong answering each ping is sent automatically.
	OnPing func(c *Conn, payload []byte)
	OnPong func(c *Conn, payload []byte)

	// Logger receives what the connection cannot return to a caller (a
	// recovered panic in a callback). nil means slog.Default().
	Logger *slog.Logger

	// BufferLimit is how many bytes may wait in the send queue before a
	// non-blocking Send applies BufferLimitAction: each waiting frame's
	// payload and framing, and its bookkeeping (about 100 bytes a record,
	// see Conn.BufferedCost), so that the limit bounds the memory the
	// queue holds however small its frames are. Over a socket a frame
	// waits only for what the kernel refused; over an HTTP/2 stream, which
	// cannot be offered bytes without possibly blocking, every frame waits
	// until the stream's writer has taken it, so a burst of sends larger
	// than the limit made at once can drop its last frames even to a peer
	// that reads. 0 means DefaultBufferLimit; negative means no limit.
	// Blocking Write is not limited: it waits instead.
	BufferLimit int

	// BufferLimitAction says what a Send past BufferLimit does.
	BufferLimitAction BufferLimitAction

	// BufferLimitCloseCode is the close code for CloseConnection.
	// 0 means 1008 (policy violation).
	BufferLimitCloseCode uint16

	// OnDrain, when set, is called once the send queue has emptied after a
	// Send returned Queued. It runs on the goroutine that emptied the queue,
	// never at the same time as the connection's other callbacks and hooks
	// (if one is running, right after it). Its sends are corked and leave
	// when it returns; a Close in it sends and returns at once, as from any
	// callback (see Conn.Close).
	OnDrain func(c *Conn)

	// ValidateUTF8OnSend makes every send of a Text message check that it
	// is valid UTF-8, at the call: an invalid one is refused with an
	// *InvalidUTF8Error and nothing is queued. Off by default (text goes
	// out as the caller's bytes, unchecked, as in npm ws).
	ValidateUTF8OnSend bool

	// MemoryBudget, when set, bounds the memory this connection (and every
	// other one sharing the budget) may hold for its peer: a message being
	// gathered grows only after a charge on the budget succeeds (past it
	// the message fails with 1013), and the send queue is charged as it
	// grows; a Send that would queue past the budget applies
	// BufferLimitAction, and when the budget runs out the connections with
	// the largest send queues are cut first. nil means no budget.
	MemoryBudget *MemoryBudget

	// WriteStallTimeout, when positive, ends the connection (1006, its
	// CloseError's Err wrapping ErrWriteStalled) when bytes have waited to
	// be sent this long without the peer taking a single one: a peer that
	// stopped reading is let go instead of holding its queue forever. 0
	// means no limit.
	WriteStallTimeout time.Duration
}

// validate checks the options where they are given: a value that cannot
// mean anything is an error, never silently something else.
func (o *ConnOptions) validate() error {
	switch {
	case o.BufferLimitAction != DropMessage && o.BufferLimitAction != CloseConnection:
		return fmt.Errorf("rally: BufferLimitAction %d is neither DropMessage nor CloseConnection", o.BufferLimitAction)
	case o.BufferLimitCloseCode != 0 && !frame.ValidCloseCode(o.BufferLimitCloseCode):
		return fmt.Errorf("rally: BufferLimitCloseCode %d cannot be sent in a close frame", o.BufferLimitCloseCode)
	case o.PingInterval < 0:
		return fmt.Errorf("rally: PingInterval %v is negative", o.PingInterval)
	case o.IdleTimeout < 0:
		return fmt.Errorf("rally: IdleTimeout %v is negative", o.IdleTimeout)
	case o.CloseTimeout < 0:
		return fmt.Errorf("rally: CloseTimeout %v is negative", o.CloseTimeout)
	case o.WriteStallTimeout < 0:
		return fmt.Errorf("rally: WriteStallTimeout %v is negative", o.WriteStallTimeout)
	}
	return nil
}

// refusal is how a server answers a handshake when its own options are
// invalid: 500, and the reason for OnHandshakeError.
func (o *ConnOptions) refusal() *refusal {
	if err := o.validate(); err != nil {
		return &refusal{status: http.StatusInternalServerError, reason: "the server's connection options are invalid: " + err.Error()}
	}
	return nil
}

// AcceptOptions configure Accept. A nil *AcceptOptions is valid and means
// the defaults: same-origin browsers only, no subprotocol.
type AcceptOptions struct {
	ConnOptions

	// Compression, when set, accepts permessage-deflate (RFC 7692) from
	// clients that offer it. nil declines it (the default, as npm ws).
	Compression *CompressionOptions

	// Subprotocols the server speaks, in order of preference. The first one
	// the client also offers is selected; none selected is not an error.
	Subprotocols []string

	// OriginPatterns lists the hosts (path.Match patterns, e.g.
	// "*.example.com" or "localhost:*") whose pages may connect besides the
	// server's own host. Requests without an Origin header (non-browser
	// clients) are always allowed.
	OriginPatterns []string

	// InsecureSkipOriginCheck accepts every Origin. Use it only when the
	// server authenticates requests by other means than cookies.
	InsecureSkipOriginCheck bool

	// Authorize, when set, runs on each request that passed the handshake
	// rules, before anything is answered. Returning a non-nil *Rejection
	// refuses the request with the rejection's status, headers and body;
	// otherwise data is attached to the connection (Conn.Data), e.g. the
	// authenticated user. It runs on the goroutine of Accept or Upgrade.
	Authorize func(r *http.Request) (data any, reject *Rejection)

	// SelectSubprotocol, when set, chooses the subprotocol instead of
	// Subprotocols: offered lists the client's offers in its order, and
	// the result must be one of them, or "" for none. Choosing one the
	// client did not offer is a server bug: the client gets 500.
	SelectSubprotocol func(r *http.Request, offered []string) string

	// ResponseHeader, when set, may add headers to the 101 response in h
	// (for Accept, h is the ResponseWriter's header, holding what the
	// handler set). Upgrade, Connection, Content-Length, Transfer-Encoding
	// and the Sec-WebSocket-* headers are rally's and are not sent.
	ResponseHeader func(r *http.Request, h http.Header)

	// OnHandshakeError, when set, is told about every handshake that
	// failed, once, with the error Accept or Upgrade returns: a request
	// that broke a rule (malformed, oversized, too slow, ...) or an I/O
	// failure. r is nil when Upgrade could not read a request. A refusal
	// by Authorize is the application's own decision and is not reported.
	OnHandshakeError func(r *http.Request, err error)

	// HandshakeTimeout bounds how long Upgrade waits for the whole request
	// head and takes to answer it (a defence against clients that send a
	// request slowly to hold connections open). 0 means
	// DefaultUpgradeTimeout. Accept leaves this to http.Server's
	// ReadHeaderTimeout.
	HandshakeTimeout time.Duration

	// MaxHeaderBytes bounds the request head Upgrade reads: request line
	// and headers. A longer head gets 431. 0 means DefaultMaxHeaderBytes.
	// Accept leaves this to http.Server's MaxHeaderBytes.
	MaxHeaderBytes int
}

// DialOptions configure Dial. A nil *DialOptions is valid.
type DialOptions struct {
	ConnOptions

	// Compression configures the permessage-deflate offer. nil offers it
	// with the defaults (as npm ws and browsers do); set Disabled to send
	// no offer.
	Compression *CompressionOptions

	// Header holds extra request headers (Authorization, Cookie, ...).
	Header http.Header

	// Subprotocols to offer, in order of preference.
	Subprotocols []string

	// TLSConfig is used for wss:// URLs. nil means a default config with the
	// URL's host as server name. It is used for an https:// proxy too,
	// with the proxy's host as server name.
	TLSConfig *tls.Config

	// HandshakeTimeout bounds connecting and the opening handshake.
	// 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration

	// NetDialContext, when set, opens the TCP connection (a custom dialer,
	// a Unix socket, a test pipe): to the server, or to the proxy when one
	// is used.
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Proxy chooses the proxy for a connection, as in http.Transport: it
	// gets a GET request for the URL's http or https form (ws becomes
	// http, wss https) and returns the proxy's URL, or nil to connect
	// directly. The proxy URL's user and password never appear in an
	// error. Its scheme says how the connection goes through:
	//
	//   - http://: an HTTP CONNECT tunnel; user and password are sent as
	//     Basic credentials (Proxy-Authorization).
	//   - https://: the same inside TLS to the proxy, checked against the
	//     proxy's host name with TLSConfig's other settings.
	//   - socks5://: SOCKS5 CONNECT (RFC 1928), the host name resolved
	//     here; user and password, if any, with RFC 1929.
	//   - socks5h://: the same, the proxy resolving the host name.
	//
	// nil means the environment, with the rules of
	// http.ProxyFromEnvironment (HTTPS_PROXY for wss, HTTP_PROXY for ws,
	// NO_PROXY, never a proxy for localhost or a loopback address), plus
	// ALL_PROXY when the variable for the scheme is empty, read at each
	// Dial. An explicit choice is always used:
	// http.ProxyURL(u) sends every connection through u, loopback
	// included. To ignore the environment, return nil, nil.
	Proxy func(*http.Request) (*url.URL, error)

	// FollowRedirects makes Dial follow redirects (301, 302, 303, 307,
	// 308 with a Location), at most 10 in a row. Location may be a ws://,
	// wss://, http:// or https:// URL or a reference relative to the URL
	// redirected from. When the host, port or scheme changes, the
	// Authorization and Cookie headers (and credentials from the URL) are
	// not sent on, nor is a Host header. HandshakeTimeout covers the whole
	// chain. Off by default: a redirect is a failed handshake whose
	// response is returned.
	FollowRedirects bool

	// HTTP2 says whether the WebSocket may be a stream of an HTTP/2
	// connection (RFC 8441) shared with other WebSockets and requests to
	// the same origin: HTTP2Never (the default), HTTP2Prefer or
	// HTTP2Require. wss:// negotiates h2 with TLS; ws:// speaks HTTP/2
	// without TLS (h2c) by prior knowledge.
	HTTP2 HTTP2Mode

	// HTTP2Transport, when set, holds the HTTP/2 connections of Dials
	// with HTTP2 set: Dials with the same transport share one connection
	// per origin (more once the server's stream limit is reached), and
	// share it with the transport's own HTTP/2 requests. Its DialContext
	// and TLSClientConfig are used unless NetDialContext and TLSConfig
	// are set. nil means a transport rally keeps per TLSConfig (one for
	// all Dials with a nil TLSConfig), until the TLSConfig is collected.
	// rally keeps a small record per transport given here for the life of
	// the program: reuse one rather than making one per Dial.
	HTTP2Transport *http.Transport
}

// DefaultBufferLimit is how many bytes may wait in a connection's send
// queue before a non-blocking Send applies the BufferLimitAction.
const DefaultBufferLimit = 1 << 20

// BufferLimitAction is what a non-blocking Send does when the send queue
// would grow past ConnOptions.BufferLimit.
type BufferLimitAction int

const (
	// DropMessage refuses the new message: Send returns Dropped and the
	// connection carries on.
	DropMessage BufferLimitAction = iota
	// CloseConnection refuses the message and closes the slow peer with
	// ConnOptions.BufferLimitCloseCode (1008 unless set; 1013 "try again
	// later" is the other usual choice).
	CloseConnection
)

// A connection refers to its options instead of holding a copy of them
// (120 bytes per connection otherwise): sharedOptions hands out one
// frozen copy, defaults applied, for every connection made with equal
// options. A Server's connections all get the same pointer.

// readLimits are ReadLimit and MaxFragments as the parser checks them:
// defaults applied, no limit as 0.
func (o *ConnOptions) readLimits() readLimits {
	var lim readLimits
	switch {
	case o.ReadLimit == 0:
		lim.size = DefaultReadLimit
	case o.ReadLimit > 0:
		lim.size = o.ReadLimit
	}
	switch {
	case o.MaxFragments == 0:
		lim.fragments = DefaultMaxFragments
	case o.MaxFragments > 0:
		lim.fragments = uint32(min(o.MaxFragments, math.MaxInt32))
	}
	return lim
}

// optionsKey is ConnOptions as a comparable value: a function is compared
// by identity (the same function value, closure included), the way a
// connection would call it.
type optionsKey struct {
	readLimit                int64
	readLimitReason          string
	maxFragments             int
	ping, idle, close, stall time.Duration
	onPing, onPong, onDrain  unsafe.Pointer
	logger                   *slog.Logger
	bufferLimit              int
	action                   BufferLimitAction
	closeCode                uint16
	controlRate              int
	validateUTF8             bool
	budget                   *MemoryBudget
}

// funcID is the identity of a function value: its closure.
func funcID[F any](f F) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

func (o *ConnOptions) key() optionsKey {
	return optionsKey{
		readLimit: o.ReadLimit, readLimitReason: o.ReadLimitReason, maxFragments: o.MaxFragments,
		ping: o.PingInterval, idle: o.IdleTimeout, close: o.CloseTimeout, stall: o.WriteStallTimeout,
		onPing: funcID(o.OnPing), onPong: funcID(o.OnPong), onDrain: funcID(o.OnDrain),
		logger: o.Logger, bufferLimit: o.BufferLimit, action: o.BufferLimitAction,
		closeCode: o.BufferLimitCloseCode, controlRate: o.ControlRate, validateUTF8: o.ValidateUTF8OnSend, budget: o.MemoryBudget,
	}
}

// sharedOptionsSize is how many distinct option sets sharedOptions keeps:
// a few servers' worth. Options that differ on every connection (a
// closure made per request) just get a copy each.
const sharedOptionsSize = 8

var optionsCache struct {
	mu   sync.Mutex
	keys [sharedOptionsSize]optionsKey
	opts [sharedOptionsSize]*ConnOptions
	next int
}

// sharedOptions returns the options a connection made with o uses: a copy
// of o (nil: the zero value) with CloseTimeout's default applied, shared
// with the other connections made with equal options. Nobody writes to it.
func sharedOptions(o *ConnOptions) *ConnOptions {
	var v ConnOptions
	if o != nil {
		v = *o
	}
	if v.CloseTimeout <= 0 {
		v.CloseTimeout = DefaultCloseTimeout
	}
	k := v.key()
	m := &optionsCache
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.opts {
		if p != nil && m.keys[i] == k {
			return p
		}
	}
	p := new(ConnOptions) // only now: a connection that finds its options makes nothing
	*p = v
	m.keys[m.next], m.opts[m.next] = k, p
	m.next = (m.next + 1) % sharedOptionsSize
	return p
}
