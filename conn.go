package rally

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally/frame"
)

// Conn is one WebSocket connection, server or client side.
//
// Writing is safe from many goroutines at once: Write, Send, Writer, Ping
// and Close may be called concurrently, and frames leave in the order the
// calls were accepted. Reading (Read, ReadAppend, Reader) is for one
// goroutine at a time; a second concurrent reader waits for the first. A
// Conn served by a Server is read by the Server; the read methods refuse.
type Conn struct {
	t    transport    // and through it the net.Conn (transport.netConn)
	opts *ConnOptions // shared, never written (see sharedOptions)
	z    *compression // permessage-deflate, when negotiated
	data any          // Conn.Data; set before the connection is served, then never written

	rd readSide  // owned by whoever holds rd.sem
	wr writeSide // guarded by wr.mu
	cl closeSide
	cb callbackState
	// waiting is what waits for a peer that takes nothing, as sends see it
	// without the write lock (see noteWaitingLocked); it packs with cb.
	waiting atomic.Int32
	dl      deadlineWatch
	x       atomic.Pointer[connExtras] // made by the first use of one of its parts
}

// readSide is the state of receiving, owned by the goroutine that holds
// sem (a Read call, or a Server's goroutine for the connection).
type readSide struct {
	sem  chan struct{}  // nil once a Server reads the connection (see driven)
	g    atomic.Uintptr // the goroutine holding sem (see goroutine.go)
	p    parser
	in   []byte  // unconsumed input: a slice of buf or of the handshake leftovers
	buf  *[]byte // the read buffer; nil while idle on a socket
	end  *CloseError
	last atomic.Int64

	msg message // a message being gathered, see message.go

	ended  bool // the end was delivered to a read method
	linger bool // the read side ended with a close frame; TCP still to wind down
	batch  bool // the read batch is corked
	corks  bool // the reader corks each read batch (a Server's goroutine)
	met    bool // an event loop delivered to it (its first delivery reads less: loopFirstShare)

	// msg's small fields, here so that they pack with the flags above.
	msgTyp    frame.Opcode // Text or Binary
	msgHanded bool         // msg.buf holds a whole message handed out by nextMessage
	// msgCat is the MemoryCategory msg.charged is charged to:
	// MemoryInflate for a compressed message (its inflated bytes), else
	// MemoryAssembly.
	msgCat uint8
}

// writeSide is the state of sending, guarded by mu. mu is held only for
// non-blocking work.
type writeSide struct {
	mu         sync.Mutex
	q          sendQueue
	hdr        [frame.MaxHeaderSize]byte
	flushing   bool  // a goroutine is writing the queue: nothing else writes to the transport (packed next to hdr)
	drainArmed bool  // a send was queued under backpressure
	err        error // once set, every send fails with it
	lastPing   int64 // when the keepalive last pinged (unix ns)

	more     *writeMore // made on first use: what an idle connection never needs
	corks    *corkState // made by the first cork
	loopMark uint64     // the loop turn that gathered sends to this connection, unless its own loop (gatherLocked)

	charged atomic.Int64 // the queue's memory charged to ConnOptions.MemoryBudget
}

// writeMore is the write side's state that an idle connection never
// needs, made on first use under the write lock (writeSide.moreLocked):
// the flusher's, a streaming Writer's, a
// waiting writer's, the write-stall timer's and the close handshake's.
// It is kept once made: a connection that needed it once (it queued under
// backpressure, streamed, or is closing) is likely to need it again, and
// what it holds while unused (timers stopped, slices emptied) is small.
type writeMore struct {
	flushFn func() // c.flushLoop, made once
	until   uint64 // the flusher's goal: frame until has left (0: the queue is empty)
	stepErr error  // the transport's error seen by flushStep
	// taken is the bytes the transport took since writeMore was made:
	// progress for the stall timer, which makes writeMore before it
	// first reads it (armStallLocked), so that bytes taken before do not
	// matter.
	taken      uint64
	stallAt    uint64         // taken when the stall timer was last armed
	stall      *time.Timer    // the write-stall timer (ConnOptions.WriteStallTimeout)
	progress   chan struct{}  // closed when the queue moves, for the writers waiting for it
	slot       chan struct{}  // held by a streaming Writer
	writer     *messageWriter // made by the first Writer
	streamZ    bool           // the streamed message is compressed
	filed      int64          // the size the memory budget last filed the queue under, whose bucket (queueBucket) is what counts (chargeQueueLocked)
	closeSeq   uint64         // the close frame's sequence number, once queued
	closeTimer *time.Timer    // cuts the close handshake short (ConnOptions.CloseTimeout)
}

// moreLocked returns the write side's cold state, made the first time.
func (w *writeSide) moreLocked() *writeMore {
	if w.more == nil {
		w.more = new(writeMore)
	}
	return w.more
}

// tookLocked records that the transport took n bytes, for the stall
// timer (writeMore.taken).
func (w *writeSide) tookLocked(n int) {
	if w.more != nil {
		w.more.taken += uint64(n)
	}
}

// closeSeqLocked is the close frame's sequence number, or 0 if none was
// queued.
func (w *writeSide) closeSeqLocked() uint64 {
	if w.more == nil {
		return 0
	}
	return w.more.closeSeq
}

// closeSide is how the connection ends.
type closeSide struct {
	done    atomic.Pointer[chan struct{}] // made by the first Done; closed (or closedChan) once ended
	final   atomic.Pointer[CloseError]    // how the connection ended: set once, by the finish that ends it
	readEnd atomic.Pointer[CloseError]    // the read side's end, once it came with a close frame or a failure was announced with one
}

// connExtras is the state few connections need, made on first use (see
// Conn.extras): an idle connection an event loop drives has none, so that
// it costs less memory.
type connExtras struct {
	subprotocol string            // set by newConn, then never written
	reader      *messageReader    // owned by whoever holds rd.sem
	keepalive   *time.Timer       // the ping and idle timer (goroutine mode); guarded by wr.mu
	onClose     func(*CloseError) // what OnClose registered, all in one (see OnClose); guarded by wr.mu
	control     controlBucket     // owned by the reader (see pong.go)
}

// extras returns the connection's connExtras, making them if needed.
func (c *Conn) extras() *connExtras {
	if x := c.x.Load(); x != nil {
		return x
	}
	c.x.CompareAndSwap(nil, &connExtras{})
	return c.x.Load()
}

// callbackState serialises a connection's callbacks (see callback.go).
type callbackState struct {
	mu    sync.Mutex
	flags atomic.Uint32 // callbackRunning, drainPending
}

// The flags of callbackState.
const (
	callbackRunning = 1 << iota // a callback is running (where goroutines cannot be told apart)
	drainPending                // OnDrain is due (see runPendingDrain)
)

// newConn starts a connection over nc once the opening handshake is done.
// buffered holds the bytes already read past the handshake (an eager client's
// first frames, or what followed a 101 response); they are the start of the
// WebSocket stream, read before nc. newConn takes ownership of them: rally
// unmasks payload in place there.
func newConn(nc net.Conn, buffered []byte, server bool, subprotocol string, o *ConnOptions) *Conn {
	c := &Conn{t: newTransport(nc)}
	if subprotocol != "" {
		c.extras().subprotocol = subprotocol
	}
	c.rd.sem = make(chan struct{}, 1)
	c.rd.in = buffered
	c.opts = sharedOptions(o)
	if b := c.opts.MemoryBudget; b != nil {
		c.wr.q.budget = b.id
	}
	reclaimOpened()
	c.rd.p = parser{server: server}
	c.startKeepalive()
	return c
}

// logger is where the connection logs what it cannot return to a caller.
func (c *Conn) logger() *slog.Logger {
	if l := c.opts.Logger; l != nil {
		return l
	}
	return slog.Default()
}

// Subprotocol returns the subprotocol chosen in the handshake, or "".
func (c *Conn) Subprotocol() string {
	if x := c.x.Load(); x != nil {
		return x.subprotocol
	}
	return ""
}

// Data returns the value attached to the connection when it was accepted
// (see Server.Upgrade), or nil.
func (c *Conn) Data() any { return c.data }

// setData attaches v to the connection (Conn.Data), before it is served.
func (c *Conn) setData(v any) { c.data = v }

// LocalAddr returns the local network address.
func (c *Conn) LocalAddr() net.Addr { return c.netConn().LocalAddr() }

// RemoteAddr returns the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.netConn().RemoteAddr() }

// netConn is the network connection under c.
func (c *Conn) netConn() net.Conn { return c.t.netConn() }

// Done returns a channel that is closed once the connection has ended
// (close handshake finished, failed, or cut).
func (c *Conn) Done() <-chan struct{} {
	if d := c.cl.done.Load(); d != nil {
		return *d
	}
	// Made on first use: an idle connection nobody waits for holds none.
	ch := make(chan struct{})
	c.cl.done.CompareAndSwap(nil, &ch)
	return *c.cl.done.Load()
}

// closedChan is the Done channel of a connection that ended before anyone
// asked for it.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// isDone reports whether the connection has ended (Done is closed).
func (c *Conn) isDone() bool {
	d := c.cl.done.Load()
	if d == nil {
		return false
	}
	select {
	case <-*d:
		return true
	default:
		return false
	}
}

// closeDone closes Done (finish, once).
func (c *Conn) closeDone() {
	if !c.cl.done.CompareAndSwap(nil, &closedChan) {
		close(*c.cl.done.Load())
	}
}

// closeReason trims a rule text to fit a close frame's reason, on a UTF-8
// boundary (a reason cut inside a sequence would not be valid UTF-8, and
// the close frame could not be sent).
func closeReason(s string) string {
	if len(s) <= frame.MaxCloseReason {
		return s
	}
	n := frame.MaxCloseReason
	for n > 0 && s[n]&0xC0 == 0x80 {
		n-- // s[n] continues a sequence: cut before the sequence starts
	}
	return s[:n]
}
