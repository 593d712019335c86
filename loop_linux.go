//go:build linux

package rally

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rallyws/rally/internal/bufpool"
	"github.com/rallyws/rally/internal/netpoll"
	"golang.org/x/sys/unix"
)

// The event-loop mode (Server.EventLoop). A loop is one goroutine with an
// epoll instance (internal/netpoll) that owns the sockets of many
// connections. A connection in a loop is the same Conn as in goroutine
// mode, with a loopTransport: no goroutine, no read buffer and no send
// buffer while it is idle. The loop drives the same engine a reading
// goroutine does:
//
//   - Reading. When a socket is readable the loop reads it into the
//     loop's one buffer and runs the connection's parser and callbacks
//     (nextMessage, as a Server's goroutine does) until the buffer is used
//     up; the transport's read then reports the loop dry (errLoopDry)
//     instead of waiting. A message spread over reads is gathered in a
//     borrowed buffer (message.go), a header cut by the end of a read in
//     the parser's own arrays: nothing refers to the loop's buffer once the
//     connection is done with it.
//   - Writing. A loop turn is a cork held by the loop goroutine over every
//     connection: what the turn's callbacks send, to any connection, is
//     gathered, and after the turn each connection that got something is
//     written once (one writev for all its frames), whatever the number
//     of senders. A connection of another loop that is busy turning is
//     not written by the turn that gathered for it but handed to its own
//     loop (the outbox: once per turn and loop, not per frame, and
//     without a wake-up), which writes it after its own turn with what
//     that turn gathered for it: two loops publishing to the same
//     connections do not take turns writing a frame or two each under
//     its lock. A loop that waits for events is not woken for it: the
//     turn that gathered writes it. Sends from other goroutines write at
//     once, as in goroutine mode. What the kernel does not take waits in the send
//     queue and the loop asks epoll for writability instead of starting a
//     flushing goroutine; it writes the rest when the socket is writable.
//   - Closing. Only the loop closes a socket it owns, after removing it
//     from epoll, so a descriptor number cannot be reused while another
//     goroutine may still write to it (every write is made under the
//     connection's write lock and checks the descriptor, which the loop
//     clears under that lock first). Events carry the descriptor and a
//     generation, so a stale event for a reused descriptor is dropped.
//
// A loop's goroutine and epoll instance exist only while it has
// connections: the last one closing stops it.

// loopReadSize is how much a loop reads at once when the parser has no
// wish (small frames, many per read), and the length of the loop's
// buffer as its other readers (TLS records, request heads) see it.
const loopReadSize = 63 << 10

// loopBufferSize is the capacity of a loop's read buffer: room for a read
// of whole large frames as the parser asks for it (readSize, up to
// readAhead), as a reading goroutine's buffer has, so that a 16 KiB or 64
// KiB message arrives whole in one read and is handed to the callback
// from the buffer, not cut by the end of a read and gathered (copied) into
// a buffer of its own. It is deliberately not a size of the buffer pool's
// classes: the engine gives read buffers back to the pool
// (releaseReadBuffer), and bufpool.Put drops a buffer of any other
// capacity, so the loop's buffer can never end up in the pool.
const loopBufferSize = readAhead + 1<<10

// loopReadsPerEvent bounds the reads of one connection per readiness event,
// so that a fast sender cannot starve the loop's other connections
// (epoll, level-triggered, reports it again).
const loopReadsPerEvent = 4

// loopInflatePerEvent bounds what one connection inflates per readiness
// event (permessage-deflate): a few KiB of input can inflate to a GiB, and
// the loop's other connections, and its closes, would wait for it. A
// connection past it yields (yieldInflating) and is resumed in the next turn.
const loopInflatePerEvent = 1 << 20

// loopTurnBytes bounds what one turn reads from its connections, shared
// out between the connections it has events for (each may read at least
// loopMinShare): clients that stream large messages as fast as they can
// would otherwise read loopReadsPerEvent full buffers each (1 MiB), and a
// thousand of them made a turn of a GiB copied, seconds long, before the
// loop saw a fresh client's request. What a connection leaves in its
// socket is reported again by the next wait (level-triggered), so it
// reads on in the next turn.
const loopTurnBytes = 16 << 20

// testHookTurnRead, when a test sets it, is called at the end of each
// turn with what the turn read and how many connections it had ready.
var testHookTurnRead atomic.Pointer[func(read, ready int)]

// loopMinShare is the least a connection may read per readiness event:
// a 64 KiB message in one read.
const loopMinShare = 64<<10 + 1<<10

// loopSharePerEvent bounds how long one connection's callbacks run per
// readiness event. loopReadsPerEvent bounds the bytes, not the work they
// cause: a publish fanned out to a thousand subscribers costs a thousand
// sends, and four reads of publishes held the loop for seconds, while its
// other connections (their requests, their hangups, their closes) waited
// and the sends the turn gathered piled up. A connection past it yields
// as one past loopInflatePerEvent does. (In goroutine mode the Go
// scheduler shares the processor between connections the same way.)
const loopSharePerEvent = time.Millisecond

// loopGatherMax is how much a loop turn gathers for one connection before
// it writes at once: as much as a cork gathers (corkMax). A prepared
// message gathered is a reference, not a copy, so gathering more costs
// records rather than memory and saves system calls (one writev of up to
// iovMax slices per connection and turn).
const loopGatherMax = 256 << 10

// loopWriteCopies is how many bytes copied into a connection's queue
// the turn gathers for it before they leave ahead of the turn's end:
// before the connection's next read, and when its delivery ends (see
// writeCopies). Past it, holding them to the end of the turn saves no
// system call worth the cache: the turn goes on to read and copy for its
// other connections, and the bytes cool before the kernel copies them
// out. Measured on echo 16 KiB (64 connections): the copy into the queue
// and the kernel's copy out of it took 2.2-3.1 µs a reply when written
// at the end of the turn, 0.8-1.0 when written before the next read, as
// a reading goroutine's batch is. Frames the queue refers to (a
// PreparedMessage's) do not count: they are one buffer for every
// receiver, and a chat's turn still writes each receiver once.
const loopWriteCopies = 16 << 10

// loopRaw says that the loops read and write their sockets without
// telling the Go scheduler (RawSyscall, see sysIO). The sockets are
// non-blocking, so a call never waits; told, the scheduler takes the
// processor of a loop whose call it finds still running at its next look
// (the other processors busy, as on a loaded loop) and hands it to a
// thread it wakes for the purpose, which finds nothing to do and sleeps
// again, while the loop's thread, back from the kernel, must get a
// processor back. A loop also waits for events without a system call of
// its own (netpoll.Poller.Wait parks it), so it never holds a processor
// in the kernel.
const loopRaw = true

// loopStreamTime bounds how long one turn delivers to its streaming
// connections (those whose last delivery left input behind: it used its
// share of the turn, or yielded). A turn first delivers to every other
// connection it has an event for (a fresh client's request, a reply, a
// close), then to streaming ones until this much time has gone, starting
// at a random one of them so that none is always last; the rest are
// reported again by the next wait (level-triggered), and those holding
// input are resumed in the next turn. Before, a turn delivered in the
// order epoll reported, and a thousand clients streaming messages of 1
// MiB − 1 made turns of 20-390 ms on this project's 2-core machine (the
// copies fault in fresh pages): a fresh client's echo waited for a whole
// round of them, 0.5-1.3 s.
const loopStreamTime = 5 * time.Millisecond

// loopFirstShare is what a connection's first delivery reads before the
// turn's others, and so does every delivery once the turn has spent
// loopStreamTime on the others: a thousand clients that connect and
// stream at once are a thousand first deliveries, and each took
// loopMinShare (65 KiB) ahead of a fresh client's request; clients that
// send 65 KiB bursts and pause (their sockets drain, so they are not
// streaming) made the first part of a turn 15-23 ms. A lean delivery that
// leaves input behind is a streaming one from then on and goes on after
// the turn's others, within the same turn while loopStreamTime lasts.
const loopFirstShare = 4 << 10

// testHookDeliver, when a test sets it, is called as the loop begins a
// delivery to c, saying whether c was streaming.
var testHookDeliver atomic.Pointer[func(c *Conn, streaming bool, turn uint64)]

// loopEvents is the most events one wait returns.
const loopEvents = 256

// loopWatchdog is how long a loop turn may run before it is logged as
// blocked by a callback.
const loopWatchdog = time.Second

// loopGroup is a Server's event loops.
type loopGroup struct {
	mu    sync.Mutex
	slots []*loop // nil where no loop runs
	next  int
}

// loop is one running event loop.
type loop struct {
	grp  *loopGroup
	srv  *Server
	slot int
	p    *netpoll.Poller
	log  *slog.Logger

	n int // connections adopted and not yet closed; guarded by grp.mu

	taskMu  sync.Mutex
	tasks   []loopTask
	spare   []loopTask
	stopped bool // guarded by taskMu

	// The outbox: connections of this loop that other loops' turns
	// gathered sends for, for this loop to write after its turn (see
	// flushDirty). Guarded by taskMu; outSpare is the loop goroutine's.
	// busy says the loop will take the outbox again: set when a turn
	// begins, cleared under taskMu by its last take.
	outbox   []*loopTransport
	outSpare []*loopTransport
	busy     atomic.Bool

	gen   atomic.Uint32
	local atomic.Pointer[loopAddrs] // see sharedLocal

	// Owned by the loop goroutine.
	g         uintptr
	table     []*loopTransport // by descriptor
	buf       []byte
	inTurn    bool
	mark      uint64 // this turn's mark (see gatherLocked)
	dirty     []gathered
	outs      []loopOut // the turn's connections of other loops, by loop (handOut)
	closing   []*loopTransport
	again     []*loopTransport // yielded (yield): resumed in the next turn
	streams   []*loopTransport // the turn's streaming connections (serveStreams)
	drained   bool             // the delivery in progress found its socket empty
	serving   bool             // serveStreams is delivering
	turnBegan time.Time        // when the turn began (loopStreamTime)
	floor     int              // what a read of the delivery in progress may take at least (loopMinShare, loopFirstShare)
	began     time.Time        // when the delivery in progress began (loopSharePerEvent)
	share     int              // what a connection may read per readiness event in this turn (loopTurnBytes)
	left      int              // what the delivery in progress may still read
	read      int              // what the turn read from its connections (testHookTurnRead)
	spare2    []*loopTransport

	writes    atomic.Uint64 // write system calls on its connections
	reads     atomic.Uint64 // read system calls on its connections (benchmarks: reads per message)
	turnStart atomic.Int64  // when the running turn began (unix ns); 0 while waiting
	turns     atomic.Uint64
	watch     *time.Timer
	logged    uint64 // the turn last logged as blocked

	// The keepalive sweep: every sweepEvery the loop pings and times out
	// the connections that are due (keepaliveDue), instead of a timer
	// per connection. Owned by the loop goroutine but for the timer.
	sweeper    *time.Timer
	sweepEvery time.Duration

	acc loopAccept // request heads of Serve's connections (loop_accept_linux.go)
}

// sharedLocal returns the addresses of a TCP connection with local
// address a, the same ones for every connection of the loop with the
// last local address seen (a server's connections mostly share theirs).
func (l *loop) sharedLocal(a netip.AddrPort) *loopAddrs {
	if p := l.local.Load(); p != nil && p.tcp == a {
		return p
	}
	p := &loopAddrs{tcp: a}
	l.local.Store(p)
	return p
}

// gathered is a connection a turn gathered sends for, and its transport
// if it belongs to another loop (which writes it), else nil.
type gathered struct {
	c     *Conn
	other *loopTransport
}

// loopOut is what a turn hands to another loop: the connections of that
// loop it gathered sends for.
type loopOut struct {
	to *loop
	ts []*loopTransport
}

type loopTask struct {
	t     *loopTransport
	close bool      // else adopt (or, with t nil, sweep)
	h     *loopHead // a request head to read, or to cut (loop_accept_linux.go)
}

// loopTurns numbers the turns of every loop, so that a turn's mark on a
// connection (gatherLocked) is never another turn's.
var loopTurns atomic.Uint64

// stoppedWrites counts the write system calls of the connections of loops
// that have stopped (see loopWriteCalls).
var stoppedWrites atomic.Uint64

// loopWriteCalls is the number of write system calls made on loop
// connections so far, for the benchmarks (writes per delivered message).
// Each loop counts its own, so that writers on many cores do not share
// one counter.
func loopWriteCalls() uint64 {
	n := stoppedWrites.Load()
	if p := running.loops.Load(); p != nil {
		for _, l := range *p {
			n += l.writes.Load()
		}
	}
	return n
}

// loopReadCalls is the number of read system calls made on loop
// connections of the loops running now, for the benchmarks (reads per
// message).
func loopReadCalls() uint64 {
	var n uint64
	if p := running.loops.Load(); p != nil {
		for _, l := range *p {
			n += l.reads.Load()
		}
	}
	return n
}

// writeCalls is the number of write system calls made by the group's
// running loops so far.
func (g *loopGroup) writeCalls() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n uint64
	for _, l := range g.slots {
		if l != nil {
			n += l.writes.Load()
		}
	}
	return n
}

// running is the loops that run in the process, for gatherLocked to find
// the loop of the calling goroutine. Copied on write.
var running struct {
	mu    sync.Mutex
	loops atomic.Pointer[[]*loop]
}

// loopOfG returns the loop whose goroutine g is, or nil.
func loopOfG(g uintptr) *loop {
	p := running.loops.Load()
	if p == nil || g == 0 {
		return nil
	}
	for _, l := range *p {
		if l.g == g {
			return l
		}
	}
	return nil
}

// inLoopTurn reports whether g is an event loop's goroutine in its turn,
// which gathers its callbacks' sends (see gatherLocked).
func inLoopTurn(g uintptr) bool {
	l := loopOfG(g)
	return l != nil && l.inTurn
}

// mayWait reports whether the calling goroutine may wait for a peer: not
// an event loop's, whose other connections would wait with it.
func mayWait() bool { return loopOfG(currentG()) == nil }

func setRunning(l *loop, on bool) {
	running.mu.Lock()
	defer running.mu.Unlock()
	var now []*loop
	if p := running.loops.Load(); p != nil {
		now = *p
	}
	next := make([]*loop, 0, len(now)+1)
	for _, x := range now {
		if x != l {
			next = append(next, x)
		}
	}
	if on {
		next = append(next, l)
	}
	if len(next) == 0 {
		running.loops.Store(nil)
		return
	}
	running.loops.Store(&next)
}

// gatherLocked reports whether a send from goroutine g to c is gathered by
// the turn of the loop g runs, and puts c on that turn's list of
// connections to write after it. The caller holds c's write lock.
func (c *Conn) gatherLocked(g uintptr) bool {
	l := loopOfG(g)
	if l == nil || !l.inTurn {
		return false
	}
	if c.wr.q.queued() >= loopGatherMax {
		// Enough for one write: it goes now (what the kernel does not
		// take waits as backpressure, and counts against the buffer
		// limit), rather than piling up in memory until the turn ends.
		return false
	}
	// A connection of this loop is marked in its transport, any other in
	// the connection: two loops gathering for one connection in
	// overlapping turns would otherwise take the mark from each other and
	// list the connection again for every send.
	t, _ := c.t.(*loopTransport)
	switch {
	case t != nil && t.l == l:
		if t.mark != l.mark {
			t.mark = l.mark
			l.dirty = append(l.dirty, gathered{c: c})
		}
	case c.wr.loopMark != l.mark:
		c.wr.loopMark = l.mark
		if t == nil {
			l.dirty = append(l.dirty, gathered{c: c})
		} else {
			l.dirty = append(l.dirty, gathered{c: c, other: t})
		}
	}
	return true
}

// adopt hands c to one of the loops and reports whether it did; false
// leaves c to a goroutine of its own (a connection over HTTP/2 or over TLS
// not made by rally, or a socket the loop could not take). A connection
// over rally's TLS socket is adopted too (loop_tls_linux.go).
func (grp *loopGroup) adopt(s *Server, c *Conn) bool {
	st, ok := c.t.(*socketTransport)
	tt, isTLS := c.t.(*tlsTransport)
	if !ok && !isTLS {
		return false
	}
	grp.mu.Lock()
	l, err := grp.pick(s)
	if err != nil {
		grp.mu.Unlock()
		c.logger().Warn("rally: no event loop could be started; the connection is served by a goroutine", "err", err)
		return false
	}
	l.n++
	grp.mu.Unlock()
	var moved bool
	if isTLS {
		moved = c.toLoopTLS(tt, l)
	} else {
		moved = c.toLoop(st, l)
	}
	if !moved {
		grp.mu.Lock()
		l.n--
		grp.mu.Unlock()
		l.wake() // a loop started for it stops again
		return false
	}
	lt, _ := c.loopT()
	l.post(loopTask{t: lt})
	return true
}

// toLoop moves c onto loop l: its socket is taken from the Go runtime
// (a duplicate descriptor; the net.Conn is closed) and its transport
// becomes l's. It reports false, changing nothing, if a flushing
// goroutine writes through the socket already (Shutdown began during
// the handshake) or the socket cannot be taken.
func (c *Conn) toLoop(st *socketTransport, l *loop) bool {
	c.wr.mu.Lock()
	if c.wr.flushing || c.wr.err != nil {
		c.wr.mu.Unlock()
		return false
	}
	fd, err := netpoll.Take(st.rc)
	if err != nil {
		c.wr.mu.Unlock()
		return false
	}
	orig := c.netConn()
	t := &loopTransport{fd: int32(fd), c: c, l: l}
	t.tag = uint64(l.gen.Add(1))<<32 | uint64(uint32(fd))
	t.setAddrs(l, orig.LocalAddr(), orig.RemoteAddr())
	c.t = t
	// Nobody reads but the loop (Read refuses, Close does not read on a
	// served connection): the read lock is not needed.
	c.drive()
	c.keepaliveToLoop(t)
	c.wr.mu.Unlock()
	orig.Close() // the duplicate keeps the socket
	return true
}

// keepaliveToLoop hands c's pings and idle timeout to t's loop, whose sweep
// looks after its connections: no timer per connection, and no connExtras
// kept for the timer alone. The caller holds c's write lock.
func (c *Conn) keepaliveToLoop(t *loopTransport) {
	x := c.x.Load()
	if x == nil || x.keepalive == nil {
		return
	}
	x.keepalive.Stop()
	x.keepalive = nil
	t.swept = true
	if x.subprotocol == "" && x.reader == nil && x.onClose == nil {
		c.x.Store(nil) // nothing else was needed: the connection holds none
	}
}

// defaultEventLoops is the number of loops of a Server that does not say:
// half the Ps, rounded up. A loop keeps a P while it turns; the other
// half is left to what runs beside the loops (handshakes, the garbage
// collector's workers, the program's own goroutines). Fewer loops also
// cost less per message: what one loop's turn sends to another loop's
// connections is handed over or written under their locks, and each
// turn gathers more. On two cores one loop cost less server CPU per
// message than two in 14 of 16 comparisons of the bench module on a
// quiet machine, chat by a quarter to a half; two loops echoed faster,
// using both cores (docs/BENCHMARKS.md, "How many event loops").
func defaultEventLoops() int {
	return (runtime.GOMAXPROCS(0) + 1) / 2
}

// pick chooses the loop for a new connection, the least loaded, starting
// it if it does not run. The caller holds grp.mu.
func (grp *loopGroup) pick(s *Server) (*loop, error) {
	if grp.slots == nil {
		n := s.EventLoops
		if n <= 0 {
			n = max(defaultEventLoops(), testEventLoops)
		}
		grp.slots = make([]*loop, n)
	}
	best := -1
	for i := range grp.slots {
		k := (grp.next + i) % len(grp.slots)
		l := grp.slots[k]
		if l == nil {
			best = k
			break
		}
		if best < 0 || l.n < grp.slots[best].n {
			best = k
		}
	}
	grp.next = (best + 1) % len(grp.slots)
	if l := grp.slots[best]; l != nil {
		return l, nil
	}
	p, err := netpoll.New(loopEvents)
	if err != nil {
		return nil, err
	}
	l := &loop{grp: grp, srv: s, slot: best, p: p, log: slog.Default()}
	if s.Options != nil && s.Options.Logger != nil {
		l.log = s.Options.Logger
	}
	grp.slots[best] = l
	started := make(chan struct{})
	go l.run(started)
	<-started // l.g is set: gatherLocked can find it
	return l, nil
}

// wake makes the loop turn, unless it has stopped.
func (l *loop) wake() {
	l.taskMu.Lock()
	defer l.taskMu.Unlock()
	if !l.stopped {
		l.p.Wake()
	}
}

// post hands a task to the loop from any goroutine and wakes it. A loop
// that stopped takes nothing more (a timer may still fire): its eventfd
// is closed, and its number may belong to another file by now.
func (l *loop) post(task loopTask) {
	l.taskMu.Lock()
	defer l.taskMu.Unlock()
	if l.stopped {
		return
	}
	l.tasks = append(l.tasks, task)
	l.p.Wake()
}

func (l *loop) run(started chan<- struct{}) {
	l.g = currentG()
	l.buf = make([]byte, loopReadSize, loopBufferSize)
	l.floor = loopMinShare
	setRunning(l, true)
	l.taskMu.Lock() // the watchdog reads l.watch under it, and may fire before this returns
	l.watch = time.AfterFunc(loopWatchdog, l.watchdog)
	l.taskMu.Unlock()
	l.sweepEvery = loopSweep
	close(started)
	defer func() {
		l.watch.Stop()
		if l.sweeper != nil {
			l.sweeper.Stop()
		}
		setRunning(l, false)
		stoppedWrites.Add(l.writes.Load())
		l.p.Close()
	}()
	for {
		wait := -1
		if len(l.again) > 0 {
			wait = 0 // connections that yielded go on at once
		}
		events, woken, err := l.p.Wait(wait)
		if err != nil {
			// Not expected of epoll_wait but for a bug: cut the loop's
			// connections rather than spin.
			l.log.Error("rally: event loop: waiting for events failed; its connections are cut", "err", err)
			l.cutAll(err)
			time.Sleep(10 * time.Millisecond)
			woken = true
		}
		l.turnBegan = time.Now()
		l.turnStart.Store(l.turnBegan.UnixNano())
		l.busy.Store(true)
		l.turns.Add(1)
		l.mark = loopTurns.Add(1)
		l.inTurn = true
		again := l.again
		l.again = l.spare2[:0]
		ready := len(events) + len(again)
		l.share = max(loopTurnBytes/max(ready, 1), loopMinShare)
		l.read = 0
		for _, e := range events {
			l.event(e)
		}
		l.resume(again)
		l.spare2 = again[:0]
		if woken {
			l.runTasks()
		}
		l.serveStreams()
		l.inTurn = false
		if h := testHookTurnRead.Load(); h != nil {
			(*h)(l.read, ready)
		}
		l.flushDirty()
		l.closePending()
		l.turnStart.Store(0)
		if l.stopIfEmpty() {
			return
		}
	}
}

// stopIfEmpty ends the loop when it has no connection left.
func (l *loop) stopIfEmpty() bool {
	l.grp.mu.Lock()
	defer l.grp.mu.Unlock()
	if l.n > 0 {
		return false
	}
	l.taskMu.Lock()
	defer l.taskMu.Unlock()
	if len(l.tasks) > 0 {
		return false
	}
	l.stopped = true
	clear(l.outbox) // connections of its that ended
	l.outbox = nil
	l.grp.slots[l.slot] = nil
	return true
}

// cutAll cuts every connection of the loop.
func (l *loop) cutAll(err error) {
	for _, t := range l.table {
		if t != nil {
			t.c.finish(&CloseError{Code: CloseAbnormal, Err: err})
		}
	}
}

func (l *loop) runTasks() {
	l.taskMu.Lock()
	tasks := l.tasks
	l.tasks = l.spare[:0]
	l.taskMu.Unlock()
	for i, task := range tasks {
		if task.h != nil {
			l.headTask(task.h)
		} else if task.t == nil {
			l.sweep()
		} else if task.close {
			l.closing = append(l.closing, task.t)
		} else {
			l.register(task.t)
		}
		tasks[i] = loopTask{}
	}
	l.taskMu.Lock()
	l.spare = tasks[:0]
	l.taskMu.Unlock()
}

// register puts an adopted connection in the loop: its socket in epoll,
// then its Open callback and the bytes that came with the handshake.
func (l *loop) register(t *loopTransport) {
	c := t.c
	fd := int(uint32(t.tag))
	for fd >= len(l.table) {
		l.table = append(l.table, make([]*loopTransport, max(64, len(l.table)))...)
	}
	l.table[fd] = t
	c.rd.g.Store(l.g)
	c.wr.mu.Lock()
	var err error
	if t.fd >= 0 && !t.registered { // a socket whose head the loop read is in epoll already
		t.registered = true
		err = l.p.Add(int(t.fd), t.tag, t.armed)
	}
	c.wr.mu.Unlock()
	if err != nil {
		c.finish(&CloseError{Code: CloseAbnormal, Err: err})
		return
	}
	if t.swept {
		period := c.keepalivePeriod()
		t.due = time.Now().Add(period).UnixNano()
		l.armSweep(period)
	}
	if s := l.srv; s.Open != nil {
		c.callOpen(s.Open)
	}
	if _, isTLS := c.t.(*loopTLSTransport); isTLS || len(c.rd.in) > 0 {
		// crypto/tls may hold records read before the loop took the
		// socket: epoll will not report them.
		l.deliver(t)
	}
}

// loopSweep is how often a loop looks for keepalive work at most: pings
// and idle timeouts are that coarse (finer when a connection's period is
// short).
const loopSweep = time.Second

// armSweep makes sure the sweep runs, at least every quarter of period.
func (l *loop) armSweep(period time.Duration) {
	every := min(l.sweepEvery, max(period/4, 5*time.Millisecond))
	if l.sweeper == nil {
		l.sweepEvery = every
		l.sweeper = time.AfterFunc(every, func() { l.post(loopTask{}) })
		return
	}
	if every < l.sweepEvery {
		l.sweepEvery = every
		l.sweeper.Reset(every)
	}
}

// sweep does the keepalive work of the connections that are due.
func (l *loop) sweep() {
	now := time.Now()
	l.sweepHeads(now)
	ns := now.UnixNano()
	for _, t := range l.table {
		if t == nil || !t.swept || t.closed || ns < t.due {
			continue
		}
		next, ok := t.c.keepaliveDue(now)
		if !ok {
			t.swept = false
			continue
		}
		t.due = ns + int64(next)
	}
	l.sweeper.Reset(l.sweepEvery)
}

// event handles one readiness report.
func (l *loop) event(e netpoll.Event) {
	fd := int(uint32(e.Tag))
	if h := l.headOf(fd, e.Tag); h != nil {
		l.headEvent(h)
		return
	}
	if fd >= len(l.table) {
		return
	}
	t := l.table[fd]
	if t == nil || t.tag != e.Tag {
		return // a stale event: the descriptor was closed (and reused)
	}
	if e.Flags&netpoll.Writable != 0 {
		l.writable(t)
	}
	if e.Flags&(netpoll.Readable|netpoll.Hangup|netpoll.Error) != 0 {
		if t.streaming() {
			l.queueStream(t)
			return
		}
		l.readable(t)
	}
}

// resume queues the connections that yielded in an earlier turn
// (yieldInflating) and have not been delivered since with the turn's
// streaming ones.
func (l *loop) resume(again []*loopTransport) {
	for i, t := range again {
		again[i] = nil
		if t.again && t.y.turn != l.mark {
			l.queueStream(t)
		}
	}
}

// streaming reports whether the connection's last delivery left input
// behind (see loopStreamTime).
func (t *loopTransport) streaming() bool { return t.y != nil && t.y.streaming }

// queueStream has the turn deliver to t after its other connections, once.
func (l *loop) queueStream(t *loopTransport) {
	if t.y.queued == l.mark {
		return // an event and a resumption in one turn
	}
	t.y.queued = l.mark
	l.streams = append(l.streams, t)
}

// serveStreams delivers to the turn's streaming connections, once the
// others were served, for loopStreamTime at most (at least one of them),
// starting at a random one: those left out and holding input are resumed
// in the next turn, the others epoll reports again.
func (l *loop) serveStreams() {
	ss := l.streams
	if len(ss) == 0 {
		return
	}
	first := 0
	if len(ss) > 1 {
		first = rand.IntN(len(ss))
	}
	start := time.Now()
	l.serving = true
	for i := range ss {
		t := ss[(first+i)%len(ss)]
		switch {
		case t.again && t.y.turn == l.mark:
			// It yielded in this turn already: the next one resumes it.
		case i > 0 && time.Since(start) >= loopStreamTime:
			if t.again {
				l.again = append(l.again, t) // its input is held, not in its socket
			}
		default:
			l.readable(t)
		}
	}
	l.serving = false
	clear(ss)
	l.streams = ss[:0]
}

// yieldInflating counts n more bytes the connection inflated in this
// readiness event and reports whether it has had its share of the loop's
// turn (yield).
func (t *loopTransport) yieldInflating(n int) bool {
	t.inflated += int32(min(n, loopInflatePerEvent))
	return t.yield()
}

// yield reports whether the connection has had its share of the loop's
// turn: it inflated loopInflatePerEvent, or its callbacks ran for
// loopSharePerEvent, in this readiness event. If so, what is left of its
// input (of the chunk being inflated, and after it) is moved out of the
// loop's buffer into one of the connection's own, which the next read
// gives back, and the loop resumes the connection in its next turn.
func (t *loopTransport) yield() bool {
	if t.inflated < loopInflatePerEvent && time.Since(t.l.began) < loopSharePerEvent {
		return false
	}
	if t.y == nil {
		t.y = new(loopYield)
	}
	if t.y.held == nil {
		c := t.c
		var rest []byte
		z := c.z
		inflating := z != nil && z.inflating
		if inflating {
			rest = z.decomp.Unread()
		}
		held := bufpool.Get(len(rest) + len(c.rd.in))
		b := append(append((*held)[:0], rest...), c.rd.in...)
		if inflating {
			z.decomp.Rebase(b[:len(rest)])
		}
		c.rd.in = b[len(rest):]
		*held = b
		t.y.held = held
	}
	t.yielded()
	return true
}

// yielded has the loop resume the connection in its next turn.
func (t *loopTransport) yielded() {
	if t.y == nil {
		t.y = new(loopYield)
	}
	t.again = true
	t.y.turn = t.l.mark
	t.l.again = append(t.l.again, t)
}

// dropHeld gives back the input the connection was left with when it
// yielded, and reports whether it had any.
func (t *loopTransport) dropHeld() bool {
	if t.y == nil || t.y.held == nil {
		return false
	}
	bufpool.Put(t.y.held)
	t.y.held = nil
	return true
}

// readable reads what arrived and runs the connection's callbacks on it.
func (l *loop) readable(t *loopTransport) {
	if t.closed {
		return
	}
	if t.winding {
		l.windDown(t)
		return
	}
	l.deliver(t)
}

// deliver runs the parser and the callbacks over what is buffered and
// what the socket has, until the loop's buffer is used up (a Server's
// goroutine does the same, see Conn.serve).
func (l *loop) deliver(t *loopTransport) {
	c := t.c
	s := l.srv
	if h := testHookDeliver.Load(); h != nil {
		(*h)(c, t.streaming(), l.mark)
	}
	t.reads = loopReadsPerEvent
	t.inflated, t.again = 0, false
	l.began = time.Now()
	l.left, l.floor = max(l.share, loopMinShare), loopMinShare
	// A first delivery, or one that comes once the turn's others have
	// had loopStreamTime, reads loopFirstShare and goes on after them.
	lean := !c.rd.met || (l.inTurn && !l.serving && l.began.Sub(l.turnBegan) >= loopStreamTime)
	c.rd.met = true
	if lean {
		l.left, l.floor = loopFirstShare, loopFirstShare
	}
	l.drained = false
	for c.rd.end == nil && !c.ended() {
		typ, p, err := c.nextMessage(nil)
		if err != nil {
			break
		}
		if s.Message != nil {
			c.callMessage(s.Message, typ, p)
		}
		if c.rd.end == nil && t.yield() {
			break
		}
	}
	if c.rd.msgHanded || (c.rd.msg.buf != nil && c.rd.end != nil) {
		c.releaseMessage()
	}
	t.writeCopies()
	c.rd.buf = nil
	if t.y == nil || t.y.held == nil {
		c.rd.in = nil
	}
	// Input left behind: its share of the turn ran out before its socket
	// did, or it yielded. Its next delivery waits for the others'.
	streaming := t.again || (!l.drained && c.rd.end == nil && !c.ended())
	if streaming && t.y == nil {
		t.y = new(loopYield)
	}
	if t.y != nil {
		t.y.streaming = streaming
	}
	if streaming && lean && !l.serving && l.inTurn {
		l.queueStream(t) // what it left goes on after the turn's others
	}
	if c.rd.end != nil && c.rd.linger {
		c.rd.linger = false
		t.winding = true
		l.windDown(t)
	}
}

// ended reports whether the connection has ended (a callback called
// CloseNow, say): what is left of the input is not delivered.
func (c *Conn) ended() bool { return c.isDone() }

// windDown is the loop's linger (close.go): once the close frames were
// exchanged, the server's close frame must leave, then the loop shuts its
// sending side (FIN first, RFC 6455 7.1.1) and reads and drops whatever
// still arrives until the client closes. CloseTimeout bounds it.
func (l *loop) windDown(t *loopTransport) {
	c := t.c
	if !t.shut {
		c.wr.mu.Lock()
		left := c.wr.q.doneSeq >= c.wr.closeSeqLocked() || c.wr.err != nil
		switch {
		case left && t.muted:
			t.muted = false
			if t.fd >= 0 {
				l.p.Mod(int(t.fd), t.tag, true, t.armed)
			}
		case !left && c.wr.flushing && !t.muted && t.fd >= 0:
			// The close frame waits for the peer to read: stop reading
			// until it has left (writable calls back), or an end of stream
			// read meanwhile would close before it, and a level-triggered
			// readable socket would be reported turn after turn.
			t.muted = true
			l.p.Mod(int(t.fd), t.tag, false, t.armed)
		}
		c.wr.mu.Unlock()
		if !left {
			// Not before the close frame has left (flushDirty or writable
			// calls back): reading now could find the peer's end first.
			return
		}
		t.shut = true
		unix.Shutdown(int(t.fd), unix.SHUT_WR)
	}
	for range loopReadsPerEvent {
		n, err := readFd(uintptr(t.fd), l.buf, loopRaw)
		if err == errAgain {
			return
		}
		t.dropped += int32(n)
		// At most lingerBytes are dropped, as in goroutine mode: a peer
		// that keeps sending after the close is cut, not read until the
		// close timeout.
		if err != nil || n == 0 || t.dropped >= lingerBytes {
			c.finish(c.rd.end)
			return
		}
	}
}

// writable writes what waits in the send queue of a connection whose
// socket became writable.
func (l *loop) writable(t *loopTransport) {
	c := t.c
	c.wr.mu.Lock()
	q := &c.wr.q
	if !c.wr.flushing || t.fd < 0 {
		t.disarmLocked()
		c.wr.mu.Unlock()
		return
	}
	var werr error
	for c.wr.err == nil && q.queued() > 0 {
		g := q.gatherLent()
		n, err := c.t.tryWritev(*g) // the connection's: TLS encrypts first
		putGather(g)
		if err != nil {
			werr = err
			break
		}
		if n == 0 {
			q.blocked = true
			break
		}
		c.advanceLocked(n)
	}
	if werr != nil {
		c.failWriteLocked(werr) // still flushing: no goroutine is started to end it
	}
	if werr != nil || c.wr.err != nil || q.queued() == 0 {
		c.wr.flushing = false
		t.disarmLocked()
	}
	c.unlockWrite()
	if werr != nil {
		c.endAbnormal(werr)
		return
	}
	if t.winding {
		l.windDown(t)
	}
}

// flushDirty writes, once each, the connections of this loop that the
// turn's callbacks sent to or that other loops' turns handed over (the
// outbox), and the connections of no loop the turn sent to; it hands the
// connections of other loops to them. Then it takes the outbox a last
// time, for what was handed over while it wrote.
func (l *loop) flushDirty() {
	l.takeOutbox(false)
	l.flushGathered()
	l.sendOuts()
	for l.takeOutbox(true) {
		l.flushGathered()
	}
}

func (l *loop) flushGathered() {
	for i := 0; i < len(l.dirty); i++ { // completions may add more
		d := l.dirty[i]
		l.dirty[i] = gathered{}
		if d.other != nil {
			l.handOut(d.other)
			continue
		}
		c := d.c
		c.wr.mu.Lock()
		c.uncorkedLocked()
		c.unlockWrite()
		if t, ok := c.loopT(); ok && t.l == l && t.winding {
			l.windDown(t)
		}
	}
	l.dirty = l.dirty[:0]
}

// takeOutbox adds the connections other loops handed over to the turn's
// list, each once with what the turn gathered for it, and reports
// whether there were any. The last take of a turn tells the other loops
// that this one takes no more: they write its connections themselves
// until its next turn.
func (l *loop) takeOutbox(last bool) bool {
	l.taskMu.Lock()
	in := l.outbox
	l.outbox = l.outSpare
	if last {
		l.busy.Store(false)
	}
	l.taskMu.Unlock()
	if last && len(in) > 0 {
		// Written in this turn already, some of them: a new mark lists
		// each once again.
		l.mark = loopTurns.Add(1)
	}
	for i, t := range in {
		in[i] = nil
		if t.mark != l.mark {
			t.mark = l.mark
			l.dirty = append(l.dirty, gathered{c: t.c})
		}
	}
	l.outSpare = in[:0]
	return len(l.dirty) > 0
}

// handOut puts t, a connection of another loop, in the turn's hand-over
// to that loop.
func (l *loop) handOut(t *loopTransport) {
	for i := range l.outs {
		if o := &l.outs[i]; o.to == t.l {
			o.ts = append(o.ts, t)
			return
		}
	}
	if n := len(l.outs); n < cap(l.outs) {
		l.outs = l.outs[:n+1] // keeps the spare slice of a past turn
		l.outs[n].to = t.l
		l.outs[n].ts = append(l.outs[n].ts[:0], t)
		return
	}
	l.outs = append(l.outs, loopOut{to: t.l, ts: []*loopTransport{t}})
}

// sendOuts hands the turn's connections of other loops to their loops'
// outboxes, one hand-over per loop, or writes them here if their loop is
// not turning.
func (l *loop) sendOuts() {
	for i := range l.outs {
		o := &l.outs[i]
		if !o.to.receive(o.ts) {
			for _, t := range o.ts {
				c := t.c
				c.wr.mu.Lock()
				c.uncorkedLocked()
				c.unlockWrite()
			}
		}
		clear(o.ts)
		o.ts = o.ts[:0]
		o.to = nil
	}
	l.outs = l.outs[:0]
}

// outboxHold is how long a loop's turn may have run for other loops to
// still hand it their sends to its connections: what they hand over
// waits for the end of the turn, and a turn that runs this long is held
// up by a callback (the watchdog writes what waits in its outbox).
const outboxHold = 2 * time.Millisecond

// receive puts ts in the loop's outbox, for it to write after its turn,
// and reports whether it did. It takes nothing from a loop that is not
// turning (waking it costs more than the writes it would save) or whose
// turn has run for outboxHold.
func (l *loop) receive(ts []*loopTransport) bool {
	if !l.busy.Load() {
		return false
	}
	if start := l.turnStart.Load(); start == 0 || time.Now().UnixNano()-start > int64(outboxHold) {
		return false
	}
	l.taskMu.Lock()
	defer l.taskMu.Unlock()
	if !l.busy.Load() {
		return false
	}
	l.outbox = append(l.outbox, ts...)
	return true
}

// writeOutbox writes what other loops handed over to a loop whose turn
// has run too long (see outboxHold), from the watchdog's goroutine.
func (l *loop) writeOutbox() {
	l.taskMu.Lock()
	in := l.outbox
	l.outbox = nil
	l.taskMu.Unlock()
	for _, t := range in {
		c := t.c
		c.wr.mu.Lock()
		c.uncorkedLocked()
		c.unlockWrite()
	}
}

// closePending closes the sockets of the connections that ended, and
// tells the Server.
func (l *loop) closePending() {
	for i := 0; i < len(l.closing); i++ { // a Close callback may end more
		t := l.closing[i]
		l.closing[i] = nil
		if t.closed {
			continue
		}
		t.closed = true
		c := t.c
		c.wr.mu.Lock()
		fd := int(t.fd)
		t.fd = -1
		registered := t.registered
		c.wr.mu.Unlock()
		if registered {
			l.p.Del(fd)
		}
		unix.Close(fd)
		if idx := int(uint32(t.tag)); idx < len(l.table) && l.table[idx] == t {
			l.table[idx] = nil
		}
		if c.rd.end == nil {
			// Cut from elsewhere (CloseNow, a timer, a failed write): the
			// read side ends as a reading goroutine's would.
			c.endRead(c.ioEnd(net.ErrClosed), false)
		}
		if c.rd.msg.buf != nil {
			c.releaseMessage()
		}
		if t.dropHeld() {
			c.rd.in = nil
		}
		if s := l.srv; s.Close != nil {
			c.callClose(s.Close, c.cl.final.Load())
		}
		l.srv.set.remove(c)
		l.grp.mu.Lock()
		l.n--
		l.grp.mu.Unlock()
	}
	l.closing = l.closing[:0]
}

// watchdog logs a loop turn that has run for longer than loopWatchdog: a
// callback blocks the loop, and with it every connection of the loop.
func (l *loop) watchdog() {
	start := l.turnStart.Load()
	turn := l.turns.Load()
	if start != 0 && time.Since(time.Unix(0, start)) > outboxHold {
		l.writeOutbox()
	}
	if start != 0 && turn != l.logged {
		if d := time.Since(time.Unix(0, start)); d >= loopWatchdog {
			l.logged = turn
			l.log.Warn("rally: an event loop is blocked: a callback has run for too long, and the loop's other connections wait for it",
				"loop", l.slot, "blocked", d.Round(time.Millisecond).String())
		}
	}
	l.taskMu.Lock()
	if !l.stopped {
		l.watch.Reset(loopWatchdog / 4)
	}
	l.taskMu.Unlock()
}

// loopTransport is a connection's socket owned by a loop: with its Conn,
// all an idle connection holds, so it is kept small (the small fields
// together, the local address shared, the remote one as its bytes, what
// only a connection that yielded needs made when it first does): 96
// bytes, a size class (TestALoopTransportFitsThe96ByteSizeClass).
type loopTransport struct {
	c   *Conn
	l   *loop
	tag uint64 // generation << 32 | descriptor, as epoll reports it

	// Set by toLoop, then read only.
	addrs *loopAddrs // shared with the loop's other connections on the same TCP address

	// Owned by the loop goroutine.
	mark uint64 // the last of the loop's turns that gathered sends for it (gatherLocked, takeOutbox)
	due  int64  // when the sweep looks next (unix ns)

	// Guarded by the connection's write lock.
	fd int32 // -1 once the loop closed it

	// Set by toLoop, then read only: the remote TCP address (local's
	// shape: netip.AddrPort without a zone, 16 bytes and a port).
	remoteIP   [16]byte
	remotePort uint16
	remote4    bool // remoteIP holds an IPv4 address

	// Guarded by the connection's write lock.
	armed      bool
	muted      bool // not watched for readability (winding down behind backpressure)
	registered bool

	// Owned by the loop goroutine.
	swept   bool  // the sweep looks after its pings and idle timeout (keepaliveToLoop)
	reads   uint8 // reads left for this readiness event
	winding bool  // the read side ended with a close frame: winding TCP down
	shut    bool  // the sending side is shut
	closed  bool
	again   bool  // yielded (see yieldInflating): the loop resumes it
	dropped int32 // bytes read and dropped while winding down (at most lingerBytes)

	// Owned by the loop goroutine: the turn's share of inflating (see
	// yieldInflating).
	inflated int32      // bytes inflated in this readiness event (loopInflatePerEvent and one piece at most)
	y        *loopYield // made when it first yields
}

// loopYield is what a connection that yielded its share of a turn (see
// yield) keeps; owned by the loop goroutine.
type loopYield struct {
	turn      uint64  // the mark of the turn it yielded in
	held      *[]byte // its input, moved out of the loop's buffer when it yielded
	queued    uint64  // the mark of the turn that last queued it (queueStream)
	streaming bool    // its last delivery left input behind (loopStreamTime)
}

// loopAddrs are a loop connection's addresses, but for a TCP
// connection's remote one (kept in its transport as its bytes): a TCP
// local address, shared by the loop's connections on it, or both
// addresses of a connection of another kind, its own.
type loopAddrs struct {
	tcp           netip.AddrPort
	local, remote net.Addr // other than TCP
}

// tryWrite writes a then b at once, without blocking. The caller holds
// the connection's write lock.
func (t *loopTransport) tryWrite(a, b []byte) (int, error) {
	if t.fd < 0 {
		return 0, net.ErrClosed
	}
	t.l.writes.Add(1)
	var iov [2]syscall.Iovec // does not escape: no allocation, and no room in every idle connection
	n, err := writeFd(uintptr(t.fd), &iov, a, b, loopRaw)
	if err == errAgain {
		return 0, nil
	}
	return n, err
}

// tryWritev writes the slices of a gathered queue at once, in one
// system call, without blocking. The caller holds the connection's write
// lock.
func (t *loopTransport) tryWritev(bufs [][]byte) (int, error) {
	if t.fd < 0 {
		return 0, net.ErrClosed
	}
	t.l.writes.Add(1)
	n, err := writevFd(uintptr(t.fd), bufs, loopRaw)
	if err == errAgain {
		return 0, nil
	}
	return n, err
}

func (t *loopTransport) canTry() bool       { return true }
func (t *loopTransport) netConn() net.Conn  { return t }
func (t *loopTransport) resumable() bool    { return true }
func (t *loopTransport) aheadOfKernel() int { return 0 }

// read reads into the loop's buffer, at most loopReadsPerEvent times per
// readiness event, as much as size asks for (whole large frames, see
// readSize) or loopReadSize; errLoopDry says there is nothing more for
// now.
func (t *loopTransport) read(_ *[]byte, size int) (*[]byte, int, error) {
	t.dropHeld() // what the connection was left with when it yielded is used up
	if t.reads == 0 || t.fd < 0 || t.l.left <= 0 {
		return nil, 0, errLoopDry
	}
	t.writeCopies()
	t.reads--
	buf := t.l.buf
	if size > 0 {
		buf = buf[:min(size, cap(buf))]
	}
	buf = buf[:min(len(buf), max(t.l.left, t.l.floor))]
	t.l.reads.Add(1)
	n, err := readFd(uintptr(t.fd), buf, loopRaw)
	switch {
	case err == errAgain:
		t.reads = 0
		t.l.drained = true
		return nil, 0, errLoopDry
	case err != nil:
		return nil, 0, err
	case n == 0:
		return nil, 0, io.EOF
	}
	if n < len(buf) {
		t.reads = 0 // most likely drained; epoll says if not
		t.l.drained = true
	}
	t.l.left -= n
	t.l.read += n
	return &t.l.buf, n, nil
}

// writeCopies writes what the turn gathered for the connection once the
// queue holds loopWriteCopies bytes of copies, instead of at the end of
// the turn (the connection stays on the turn's list: what is gathered
// for it later leaves then). The loop calls it before each read of the
// connection and when its delivery ends: the replies of one read leave
// before the next read, as a reading goroutine's batch does. A queue that
// waits for the peer (backpressure) or that a cork holds is left alone.
func (t *loopTransport) writeCopies() {
	if t.mark != t.l.mark {
		// The turn gathered nothing for it (only this loop's goroutine
		// sets either mark): no lock to take, no queue to look at.
		return
	}
	c := t.c
	c.wr.mu.Lock()
	if !c.wr.q.copiedAtLeast(loopWriteCopies) {
		c.wr.mu.Unlock()
		return
	}
	c.uncorkedLocked()
	c.unlockWrite()
}

// flush asks the loop to write the queue when the socket is writable
// (writable), and reports later: no goroutine waits for it, whatever
// wait says. The caller holds the connection's write lock.
func (t *loopTransport) flush(*sync.Mutex, outbox, bool) (bool, error) {
	if t.armed || t.fd < 0 {
		return true, nil
	}
	t.armed = true
	if t.registered {
		t.l.p.Mod(int(t.fd), t.tag, !t.muted, true)
	}
	return true, nil
}

func (t *loopTransport) disarmLocked() {
	if !t.armed || t.fd < 0 {
		return
	}
	t.armed = false
	if t.registered {
		t.l.p.Mod(int(t.fd), t.tag, !t.muted, false)
	}
}

// closeFromAnywhere has the loop close the socket: at the end of the turn
// when called on the loop, else as a task.
func (t *loopTransport) closeFromAnywhere() {
	if l := loopOfG(currentG()); l == t.l {
		l.closing = append(l.closing, t)
		return
	}
	t.l.post(loopTask{t: t, close: true})
}

// The loopTransport is the connection's net.Conn too (Conn.nc): its
// addresses, and Close, which the loop carries out. Reading and writing
// go through the loop. TCP addresses are kept as values, not as the
// *net.TCPAddr pair (two more allocations per connection).

func (t *loopTransport) setAddrs(l *loop, local, remote net.Addr) {
	lt, ok1 := local.(*net.TCPAddr)
	rt, ok2 := remote.(*net.TCPAddr)
	if ok1 && ok2 && lt.Zone == "" && rt.Zone == "" {
		t.addrs = l.sharedLocal(lt.AddrPort())
		ra := rt.AddrPort()
		t.remoteIP, t.remotePort, t.remote4 = ra.Addr().As16(), ra.Port(), ra.Addr().Is4()
		return
	}
	t.addrs = &loopAddrs{local: local, remote: remote}
}

func (t *loopTransport) LocalAddr() net.Addr {
	if a := t.addrs; a.local != nil {
		return a.local
	}
	return net.TCPAddrFromAddrPort(t.addrs.tcp)
}

func (t *loopTransport) RemoteAddr() net.Addr {
	if a := t.addrs.remote; a != nil {
		return a
	}
	a := netip.AddrFrom16(t.remoteIP)
	if t.remote4 {
		a = a.Unmap()
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, t.remotePort))
}

func (t *loopTransport) Read([]byte) (int, error)         { return 0, errLoopRead }
func (t *loopTransport) Write([]byte) (int, error)        { return 0, errLoopRead }
func (t *loopTransport) SetDeadline(time.Time) error      { return nil }
func (t *loopTransport) SetReadDeadline(time.Time) error  { return nil }
func (t *loopTransport) SetWriteDeadline(time.Time) error { return nil }

// Close has the loop close the socket (once; finish calls it once).
func (t *loopTransport) Close() error {
	t.closeFromAnywhere()
	return nil
}
