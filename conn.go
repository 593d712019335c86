package rally

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rallyws/rally/frame"
)

// errAgain is a full socket buffer on write, or no data yet on read.
var errAgain = errors.New("rally: would block")

// Conn is one WebSocket connection, server or client side.
//
// Writing is safe from many goroutines at once: Write, Writer, Ping and
// Close may be called concurrently, and frames leave in the order the calls
// were accepted. Reading (Read, ReadAppend, Reader) is for one goroutine at a
// time; a second concurrent reader waits for the first. A Conn served by a
// Server is read by the Server; its callbacks must not call the read methods.
type Conn struct {
	nc          net.Conn
	rc          syscall.RawConn // nil when rally cannot reach the socket (TLS, pipes)
	server      bool
	subprotocol string
	opts        ConnOptions
	data        any
	log         *slog.Logger

	// Read side, owned by whoever holds rsem.
	rsem     chan struct{}
	p        parser
	in       []byte  // unconsumed input: a slice of rbuf or of the handshake leftovers
	rbuf     *[]byte // borrowed read buffer; nil while idle
	rn       int
	busyRead bool // the last read filled its buffer: more is coming
	rerr     error
	readFn   func(fd uintptr) bool
	rdone    bool // the read side has ended and its error was delivered
	rend     *CloseError
	msgr     *messageReader // made by the first Reader
	lastRead atomic.Int64   // unix nanoseconds of the last bytes in, for keepalive

	partial     *[]byte      // a message being gathered across reads
	z           *compression // permessage-deflate, when negotiated
	zmsg        *[]byte      // a compressed message being gathered
	infl        *[]byte      // the last inflated message, valid until the next event
	partialType MessageType
	lingering   bool // the read side ended with a close frame; TCP still to wind down
	serving     bool // a Server's loop owns the read side

	// Context watching for reads: see watch in read.go.
	dmu            sync.Mutex
	dactive        bool
	dinterrupted   bool
	stopWatch      func() bool
	wdactive       bool
	wdinterrupted  bool
	stopWriteWatch func() bool
	interruptFn    func()
	unwatchFn      func() bool

	// Write side, guarded by wmu (see write.go).
	wmu            sync.Mutex
	wq             *[]byte // queued frames, borrowed while non-empty
	wpos           int     // bytes of wq already written
	wlocked        int     // bytes of wq a flusher is writing outside the lock
	wf             []qframe
	wfh            int // first record not yet fully written
	wfStart        int // where record wfh starts in wq (negative once compacted mid-frame)
	hdr            [frame.MaxHeaderSize]byte
	seq            uint64
	doneSeq        uint64
	flushing       bool
	werr           error // once set, every send fails with it
	progress       chan struct{}
	writerOpen     bool
	wslot          chan struct{}
	mw             *messageWriter // made by the first Writer
	iov            [2]syscall.Iovec
	wa, wb         []byte
	wn             int
	wioErr         error
	writeFn        func(fd uintptr) bool
	flushFn        func(fd uintptr) bool
	corked         int
	inlineWrite    bool     // a blocking write on a TLS-like transport writes from its own goroutine
	corkBypass     bool     // a blocking write goes past the cork (it flushed it first)
	corkPeers      []*Conn  // connections that joined this one's cork (JoinCork)
	corkOwners     [4]*Conn // the connections whose corks this one joined (JoinCork)
	nOwners        int
	spareCorkPeers []*Conn
	dones          []doneCall // completions to run once wmu is released
	spareDones     []doneCall
	drainArmed     bool // a send was queued under backpressure
	drainDue       bool
	held           []heldFrame // sends accepted while a Writer streams
	closeSent      bool
	closeSeq       uint64
	closeTimer     *time.Timer
	lastPing       time.Time

	// Close state.
	done         chan struct{} // closed when the connection has ended
	endOnce      sync.Once
	final        *CloseError
	keepalive    *time.Timer
	onClose      []func(*CloseError)
	cbmu         sync.Mutex // a Server's callbacks of this connection run under it
	drainPending atomic.Bool
	batchCorked  bool // a Server's read batch is corked
}

// newConn starts a connection over nc once the opening handshake is done.
// buffered holds the bytes already read past the handshake (an eager client's
// first frames, or what followed a 101 response); they are the start of the
// WebSocket stream, read before nc. newConn takes ownership of them: rally
// unmasks payload in place there.
func newConn(nc net.Conn, buffered []byte, server bool, subprotocol string, o *ConnOptions) *Conn {
	c := &Conn{
		nc:          nc,
		rc:          rawConnOf(nc),
		server:      server,
		subprotocol: subprotocol,
		rsem:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		in:          buffered,
	}
	if o != nil {
		c.opts = *o
	}
	c.log = c.opts.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.opts.CloseTimeout <= 0 {
		c.opts.CloseTimeout = DefaultCloseTimeout
	}
	c.p = parser{server: server, readLimit: c.opts.ReadLimit, maxFragments: c.opts.MaxFragments}
	switch {
	case c.opts.ReadLimit == 0:
		c.p.readLimit = DefaultReadLimit
	case c.opts.ReadLimit < 0:
		c.p.readLimit = 0
	}
	switch {
	case c.opts.MaxFragments == 0:
		c.p.maxFragments = DefaultMaxFragments
	case c.opts.MaxFragments < 0:
		c.p.maxFragments = 0
	}
	if c.rc != nil {
		c.readFn = c.rawRead
		c.writeFn = c.rawWrite
	}
	c.startKeepalive()
	return c
}

// Subprotocol returns the subprotocol chosen in the handshake, or "".
func (c *Conn) Subprotocol() string { return c.subprotocol }

// Data returns the value attached to the connection when it was accepted
// (see Server.Upgrade), or nil.
func (c *Conn) Data() any { return c.data }

// LocalAddr returns the local network address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done returns a channel that is closed once the connection has ended
// (close handshake finished, failed, or cut).
func (c *Conn) Done() <-chan struct{} { return c.done }

// closeReason trims a rule text to fit a close frame's reason.
func closeReason(s string) string {
	if len(s) > frame.MaxCloseReason {
		s = s[:frame.MaxCloseReason]
	}
	return s
}
