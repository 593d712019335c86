package rally

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"
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
)

// ConnOptions are the settings of an open connection, shared by the server
// (AcceptOptions) and the client (DialOptions). The zero value is valid.
type ConnOptions struct {
	// ReadLimit is the largest message, in bytes, that Read, Reader and the
	// handler callbacks accept (1009 past it). 0 means DefaultReadLimit;
	// a negative value means no limit.
	ReadLimit int64

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

	// OnPing and OnPong, when set, are called on the reading goroutine with the
	// payload of each ping or pong that arrives (valid during the call only).
	// A pong answering each ping is sent automatically.
	OnPing func(c *Conn, payload []byte)
	OnPong func(c *Conn, payload []byte)

	// Logger receives what the connection cannot return to a caller (a
	// recovered panic in a callback). nil means slog.Default().
	Logger *slog.Logger

	// BufferLimit is how many bytes (payload and framing) may wait in the
	// send queue before a non-blocking Send applies BufferLimitAction.
	// 0 means DefaultBufferLimit; negative means no limit. Blocking Write
	// is not limited: it waits instead.
	BufferLimit int

	// BufferLimitAction says what a Send past BufferLimit does.
	BufferLimitAction BufferLimitAction

	// BufferLimitCloseCode is the close code for CloseConnection.
	// 0 means 1008 (policy violation).
	BufferLimitCloseCode uint16

	// OnDrain, when set, is called once the send queue has emptied after a
	// Send returned Queued. It runs on the goroutine that emptied the queue
	// (for a Server's connection, never at the same time as its other
	// callbacks).
	OnDrain func(c *Conn)
}

// AcceptOptions configure Accept. A nil *AcceptOptions is valid and means
// the defaults: same-origin browsers only, no subprotocol.
type AcceptOptions struct {
	ConnOptions

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
}

// DialOptions configure Dial. A nil *DialOptions is valid.
type DialOptions struct {
	ConnOptions

	// Header holds extra request headers (Authorization, Cookie, ...).
	Header http.Header

	// Subprotocols to offer, in order of preference.
	Subprotocols []string

	// TLSConfig is used for wss:// URLs. nil means a default config with the
	// URL's host as server name.
	TLSConfig *tls.Config

	// HandshakeTimeout bounds connecting and the opening handshake.
	// 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration

	// NetDialContext, when set, opens the TCP connection (a custom dialer,
	// a Unix socket, a test pipe).
	NetDialContext func(ctx context.Context, network, addr string) (net.Conn, error)
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
