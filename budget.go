package rally

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"

	"github.com/rallyws/rally/internal/shrinkmap"
)

// MemoryCategory is one kind of memory a client can make a server hold.
type MemoryCategory int

// The categories a MemoryBudget accounts.
const (
	// MemoryHandshakes is request heads in progress: bytes read (or
	// reserved for reading) before a handshake completes.
	MemoryHandshakes MemoryCategory = iota
	// MemoryAssembly is messages being assembled from their frames.
	MemoryAssembly
	// MemoryInflate is compressed messages (permessage-deflate) being
	// assembled: what they inflate to, as it is gathered, not the bytes
	// that arrived. A message streamed with Conn.Reader is not gathered:
	// the inflater hands it out 32 KiB at most at a time. The inflater's
	// own state (36 KiB while a message is inflated, and the 32 KiB
	// window a connection with context takeover keeps between messages)
	// is a cost per connection, not charged.
	MemoryInflate
	// MemorySendQueues is what waits in connections' send queues, capacity
	// included, a frame shared by many queues (a PreparedMessage's) once.
	MemorySendQueues
	// MemoryStreams is HTTP/2 streams carrying WebSockets: what each
	// holds whatever it carries (its goroutines, read buffer and the
	// HTTP/2 server's state), a fixed cost per stream; and, from its first
	// WebSocket stream to its last, what net/http holds for the HTTP/2
	// connection under them: its state, its frame buffer and its receive
	// window, as the http.Server's HTTP2 configuration sets them
	// (MaxReadFrameSize and MaxReceiveBufferPerConnection, 1 MiB each by
	// default; set them lower to charge less).
	MemoryStreams
	// MemorySubscriptions is subscriptions and the topic names they keep,
	// charged by whoever keeps them (a pubsub hub, a server's presence
	// entries and history subscriptions).
	MemorySubscriptions
	// MemoryRecovery is messages held for a subscriber that recovers
	// what it missed: those read from a history to be replayed to it,
	// and those that arrive meanwhile and wait until its replay is
	// written.
	MemoryRecovery

	numMemoryCategories
)

var memoryCategoryNames = [numMemoryCategories]string{"handshakes", "assembly", "inflate", "send_queues", "h2_streams", "subscriptions", "recovery"}

// String returns the category's name as metrics label it: handshakes,
// assembly, inflate, send_queues, h2_streams, subscriptions or recovery.
func (c MemoryCategory) String() string {
	if c < 0 || c >= numMemoryCategories {
		return fmt.Sprintf("MemoryCategory(%d)", int(c))
	}
	return memoryCategoryNames[c]
}

// MemoryCategories lists every category, in the order of their values.
func MemoryCategories() []MemoryCategory {
	return []MemoryCategory{MemoryHandshakes, MemoryAssembly, MemoryInflate, MemorySendQueues, MemoryStreams, MemorySubscriptions, MemoryRecovery}
}

// Pressure is how close a MemoryBudget is to its limit.
type Pressure int

// Pressure levels, each a share of the limit (the higher of what is
// charged and what was last observed, see MemoryBudget.Observe).
const (
	// PressureNormal: below 80%. Everything is admitted that fits.
	PressureNormal Pressure = iota
	// PressureElevated: 80% or more. The largest send queues and the
	// largest messages being gathered are shed, a few at a time (see
	// Relieve); new connections are still admitted.
	PressureElevated
	// PressureHigh: 90% or more. New connections are refused (a server
	// answers 503) when what is charged is this high (see AdmitsNew).
	PressureHigh
	// PressureCritical: 95% or more: as PressureHigh, nearer the limit.
	PressureCritical
)

// clientPercent is the share of the limit that messages being gathered,
// inflated output and send queues may take together. The rest is the
// reserve for new clients: request heads, and the control frames that
// forceCharge accounts, so that a budget full of what open connections
// hold still answers a fresh client.
const clientPercent = 85

// gatherReserve is the part of clientPercent that send queues leave to
// messages being gathered: queues stop at clientPercent-gatherReserve, so
// that subscribers' queues filling the budget under a flood cannot refuse
// the publisher's next message (1013) and end the flood's source with
// them; the queues are shed instead.
const gatherReserve = 10

// String returns "normal", "elevated", "high" or "critical".
func (p Pressure) String() string {
	switch p {
	case PressureNormal:
		return "normal"
	case PressureElevated:
		return "elevated"
	case PressureHigh:
		return "high"
	case PressureCritical:
		return "critical"
	}
	return fmt.Sprintf("Pressure(%d)", int(p))
}

// MemoryBudget bounds the memory that clients can make one or more
// servers hold: request heads in progress, messages being assembled,
// inflated output and send queues. Each grows only after a charge on the
// budget succeeds, and gives its bytes back when it shrinks or ends; past
// the limit a server refuses instead of growing (a new handshake gets 503,
// a message that would need more memory is failed with 1009 or 1013, the
// largest slow send queues are shed first).
//
// Send queues are the exception to "charged before memory is taken": what
// a user can rely on is
//   - a non-blocking send (Conn.Send, SendCompress, a PreparedMessage)
//     that would wait in the queue (the peer is not taking bytes) is
//     checked first: if its frame does not fit in what connections may
//     hold, the connection's buffer-limit policy applies at once, as past
//     ConnOptions.BufferLimit (Dropped, or closed with the policy's code),
//     and the largest queues are cut as below;
//   - the queue's buffers grow first and are charged right after (within
//     the same call, before the write lock is released), at their
//     capacity, not the bytes in them. So one growth (a buffer doubling,
//     or a blocking Write, a Writer's fragment or a control frame, which
//     are not checked first) may take the budget past its share for
//     connections, or past the limit, by that much;
//   - when a growth takes what is charged past that share, the largest
//     queues (64 KiB or more, up to four at a time) are cut at once,
//     whatever the buffer-limit policy: their peers are not reading, so
//     no close frame is sent; the application sees a *CloseError with
//     code 1006;
//   - Relieve sheds the same way from PressureElevated, which observed
//     memory (Observe) reaches first.
//
// A PreparedMessage's frame that many queues refer to is charged once,
// by what the process holds: to the budget of the first connection whose
// queue takes a reference to it, until the last queue lets go of it (it
// was written, withdrawn, or its connection ended). Each connection still
// counts it in full in BufferedAmount and its BufferLimit.
//
// One budget may be shared by several servers of a process, so that their
// sum is bounded. Charging and releasing are lock-free; every method is
// safe for concurrent use. The zero value is not usable: use
// NewMemoryBudget.
type MemoryBudget struct {
	limit    atomic.Int64
	total    atomic.Int64
	observed atomic.Int64
	gathered atomic.Int64 // MemoryAssembly and MemoryInflate together
	used     [numMemoryCategories]atomic.Int64
	peak     [numMemoryCategories]atomic.Int64
	refused  [numMemoryCategories]atomic.Uint64
	shed     atomic.Uint64
	opts     MemoryBudgetOptions

	queues   sizeRegistry[queueOwner]
	messages sizeRegistry[messageOwner]
	heads    headQueue

	h2mu    sync.Mutex
	h2conns shrinkmap.Map[h2ConnKey, *h2ConnCharge] // HTTP/2 connections carrying WebSockets

	id uint32 // names the budget in a shared frame's charge (see frameShare)
}

// MemoryBudgetOptions tune how a MemoryBudget shares its limit and how
// long it lets clients hold memory. A nil *MemoryBudgetOptions, and each
// field left at 0, mean the default.
type MemoryBudgetOptions struct {
	// AssemblyShare is the percentage of the limit that messages being
	// gathered and their inflated output may hold together. Past it, a
	// message that needs more is failed with 1013 (try again later) and
	// the largest messages being gathered are failed with 1013 too, so
	// that messages that never end cannot take the room of send queues
	// and new clients. Default 50; at most 85 (what connections may hold
	// together: the rest of the limit is the reserve for request heads
	// and control frames).
	AssemblyShare int

	// MessageTimeout and MinMessageRate bound how long a message may take
	// to arrive: every MessageTimeout from its first frame, a message
	// being gathered must have brought at least MinMessageRate bytes a
	// second over that period, or be whole; otherwise it is failed with
	// 1008 (policy violation) and its memory given back. A peer that
	// sends most of a large message and then stops holds it at most twice
	// MessageTimeout. Defaults 10 s and 1 KiB/s; a negative MessageTimeout
	// means no bound. Messages read with Conn.Reader are not gathered and
	// not bounded.
	MessageTimeout time.Duration
	MinMessageRate int

	// MaxPendingHandshakes bounds the request heads that Upgrade reads at
	// once on connections charged to this budget: past it, the oldest head
	// still arriving is answered 503 and closed, so that clients that send
	// their head at once are served while slow ones give way. Default
	// 1024; negative means no bound. (A net/http server bounds its own
	// heads: see Accept.)
	MaxPendingHandshakes int
}

// Defaults of MemoryBudgetOptions.
const (
	DefaultAssemblyShare        = 50
	DefaultMessageTimeout       = 10 * time.Second
	DefaultMinMessageRate       = 1 << 10
	DefaultMaxPendingHandshakes = 1024
)

// NewMemoryBudget returns a budget of limit bytes with the default
// options. A limit of 0 or less means no limit: charges always succeed
// and are still counted, so that metrics show what clients hold.
func NewMemoryBudget(limit int64) *MemoryBudget { return NewMemoryBudgetWith(limit, nil) }

// NewMemoryBudgetWith returns a budget of limit bytes with opts (nil: the
// defaults). Out-of-range options are brought to the nearest allowed
// value.
func NewMemoryBudgetWith(limit int64, opts *MemoryBudgetOptions) *MemoryBudget {
	b := &MemoryBudget{}
	if opts != nil {
		b.opts = *opts
	}
	o := &b.opts
	if o.AssemblyShare <= 0 {
		o.AssemblyShare = DefaultAssemblyShare
	}
	o.AssemblyShare = min(o.AssemblyShare, clientPercent)
	if o.MessageTimeout == 0 {
		o.MessageTimeout = DefaultMessageTimeout
	}
	if o.MinMessageRate <= 0 {
		o.MinMessageRate = DefaultMinMessageRate
	}
	if o.MaxPendingHandshakes == 0 {
		o.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	}
	b.limit.Store(limit)
	budgets.register(b)
	return b
}

// Options returns the budget's options, defaults filled in.
func (b *MemoryBudget) Options() MemoryBudgetOptions { return b.opts }

// Limit returns the budget's limit in bytes (0 or less: no limit).
func (b *MemoryBudget) Limit() int64 { return b.limit.Load() }

// SetLimit changes the limit. What is already charged stays charged; if
// it is over the new limit, charges fail until enough is released.
func (b *MemoryBudget) SetLimit(limit int64) { b.limit.Store(limit) }

// Used returns the bytes charged now, all categories together.
func (b *MemoryBudget) Used() int64 { return b.total.Load() }

// Observe tells the budget how much memory the process holds by another
// measure (for example the Go runtime's heap and stacks, read every few
// hundred milliseconds). Pressure then takes the higher of this and what
// is charged, so that memory the budget does not account (the program's
// own, garbage not yet collected) still counts toward shedding the
// largest queues and messages and, at the limit itself, toward refusing
// new connections. Charges are checked against what is charged only:
// observed memory includes garbage, and refusing every connection's
// charge because of it would fail the healthy connections (a fast
// subscriber, a publisher) along with the slow ones that caused it.
func (b *MemoryBudget) Observe(bytes int64) { b.observed.Store(bytes) }

// Pressure returns the budget's pressure level now.
func (b *MemoryBudget) Pressure() Pressure {
	limit := b.limit.Load()
	if limit <= 0 {
		return PressureNormal
	}
	used := max(b.total.Load(), b.observed.Load())
	// Compare in hundredths without overflow: used*100 may not fit.
	switch pct := used / max(limit/100, 1); {
	case pct >= 95:
		return PressureCritical
	case pct >= 90:
		return PressureHigh
	case pct >= 80:
		return PressureElevated
	}
	return PressureNormal
}

// AdmitsNew reports whether a new connection or handshake should be
// accepted: what is charged is below 90% of the limit (PressureHigh), and
// what was observed (see Observe) below the limit itself. Observed memory
// includes garbage not yet collected and is what sheds the largest
// queues first, from 80%; new clients are refused only when the
// accounted memory or the process itself is at the end of the budget. A
// server that answers false refuses with 503 and counts it.
func (b *MemoryBudget) AdmitsNew() bool {
	limit := b.limit.Load()
	if limit <= 0 {
		return true
	}
	return b.total.Load() < percentOf(limit, 90) && b.observed.Load() < limit
}

// Reserve charges n bytes to cat if they fit, and reports whether they
// did. Request heads (MemoryHandshakes) fit up to the limit; the other
// categories together up to 85% of it (the rest is the reserve for new
// clients), send queues and the rest up to 75% (the last 10% stays for
// messages being gathered), and messages being gathered with their
// inflated output up to AssemblyShare. A program that holds memory on behalf of clients (a
// buffer of its own) can account it with Reserve and Release. A refused
// reservation is counted (see Stats); n <= 0 always succeeds.
func (b *MemoryBudget) Reserve(cat MemoryCategory, n int64) bool { return b.charge(cat, n) }

// Release gives back n bytes that Reserve charged to cat.
func (b *MemoryBudget) Release(cat MemoryCategory, n int64) { b.release(cat, n) }

// MemoryStats are a budget's counters for one category.
type MemoryStats struct {
	Category MemoryCategory
	// Used is the bytes charged now; Peak the most ever charged at once.
	Used, Peak int64
	// Refused counts charges refused because they did not fit.
	Refused uint64
}

// Stats returns the counters of every category, in the order of
// MemoryCategories. It is cheap enough for every metrics scrape.
func (b *MemoryBudget) Stats() []MemoryStats {
	s := make([]MemoryStats, numMemoryCategories)
	for i := range s {
		s[i] = MemoryStats{
			Category: MemoryCategory(i),
			Used:     b.used[i].Load(),
			Peak:     b.peak[i].Load(),
			Refused:  b.refused[i].Load(),
		}
	}
	return s
}

// Relieve sheds up to 8 of the largest send queues and up to 8 of the
// largest messages being gathered if the pressure is PressureElevated or
// more, and returns how many it shed. A server calls it every few hundred
// milliseconds (with Observe), so that memory held by slow peers gives
// way before new clients are refused.
func (b *MemoryBudget) Relieve() int {
	if b.Pressure() < PressureElevated {
		return 0
	}
	return b.shedLargest(2*maxShedPerCall) + b.shedMessages(2*maxShedPerCall)
}

// Shed returns how many send queues and messages being gathered the
// budget has shed to make room.
func (b *MemoryBudget) Shed() uint64 { return b.shed.Load() }

// charge reserves n bytes in cat before the memory is allocated, and
// reports whether it may be: false means the caller must not grow (fail
// the message with 1009 or 1013, apply the buffer-limit policy, refuse the
// handshake). A true charge is given back with release(cat, n) when the
// memory is freed or handed on (a message delivered, a queue written). A
// nil budget admits everything.
//
// The engine calls it where a buffer grows by n bytes of capacity (not of
// length: real memory held is capacity): message assembly before
// appending a fragment, inflate before growing its output, the send queue
// before copying a record in, the raw upgrade before reading a head. A
// request head may take the budget to its limit; what connections hold
// only to clientPercent of it (send queues to gatherReserve less), and
// messages being gathered only to their share
// (MemoryBudgetOptions.AssemblyShare). A send-queue charge that
// fails also sheds the largest registered queues (see track), an assembly
// charge the largest messages being gathered (see trackMessage), so that
// the slowest peers give way first.
func (b *MemoryBudget) charge(cat MemoryCategory, n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	limit := b.limit.Load()
	if limit <= 0 {
		b.total.Add(n)
		if gathering(cat) {
			b.gathered.Add(n)
		}
		b.grow(cat, n)
		return true
	}
	ceiling := limit
	switch {
	case gathering(cat):
		ceiling = percentOf(limit, clientPercent)
	case cat != MemoryHandshakes:
		ceiling = percentOf(limit, clientPercent-gatherReserve)
	}
	if gathering(cat) {
		share := percentOf(limit, b.opts.AssemblyShare)
		for {
			g := b.gathered.Load()
			if g+n > share || g+n < g {
				return b.refuse(cat)
			}
			if b.gathered.CompareAndSwap(g, g+n) {
				break
			}
		}
	}
	for {
		t := b.total.Load()
		if t+n > ceiling || t+n < t {
			if gathering(cat) {
				b.gathered.Add(-n)
			}
			return b.refuse(cat)
		}
		if b.total.CompareAndSwap(t, t+n) {
			break
		}
	}
	b.grow(cat, n)
	return true
}

// percentOf returns pct percent of n without overflowing.
func percentOf(n int64, pct int) int64 {
	return n/100*int64(pct) + n%100*int64(pct)/100
}

// gathering reports whether cat is memory of messages being received,
// which AssemblyShare bounds.
func gathering(cat MemoryCategory) bool { return cat == MemoryAssembly || cat == MemoryInflate }

// refuse counts a refused charge to cat, sheds what holds the most of its
// kind, and returns false.
func (b *MemoryBudget) refuse(cat MemoryCategory) bool {
	b.refused[cat].Add(1)
	switch {
	case cat == MemorySendQueues:
		b.shedLargest(maxShedPerCall)
	case gathering(cat):
		b.shedMessages(maxShedPerCall)
	}
	return false
}

// forceCharge charges n bytes to cat whether or not they fit: for memory
// already held when it is discovered (a frame the kernel handed over), or
// for the small reserve a close or pong frame needs. It reports whether
// the budget is still within its limit.
func (b *MemoryBudget) forceCharge(cat MemoryCategory, n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	t := b.total.Add(n)
	if gathering(cat) {
		b.gathered.Add(n)
	}
	b.grow(cat, n)
	limit := b.limit.Load()
	if cat == MemorySendQueues && limit > 0 && t > percentOf(limit, clientPercent) {
		// A queue's buffer grew past what connections may hold (its
		// capacity doubles): the largest give way at once.
		b.shedLargest(maxShedPerCall)
	}
	return limit <= 0 || t <= limit
}

func (b *MemoryBudget) grow(cat MemoryCategory, n int64) {
	u := b.used[cat].Add(n)
	for {
		p := b.peak[cat].Load()
		if u <= p || b.peak[cat].CompareAndSwap(p, u) {
			return
		}
	}
}

// release gives back n bytes of cat that charge or forceCharge took.
// Releasing more than was charged is a bug in the caller; the counters
// then go negative, which metrics show.
func (b *MemoryBudget) release(cat MemoryCategory, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used[cat].Add(-n)
	b.total.Add(-n)
	if gathering(cat) {
		b.gathered.Add(-n)
	}
}

// queueOwner is what owns a send queue charged to the budget (a Conn):
// the budget can ask how much it holds and ask it to give memory back.
type queueOwner interface {
	// queuedBytes returns the bytes its send queue holds (as charged).
	queuedBytes() int64
	// shedQueue applies the owner's buffer-limit policy to its queue now:
	// drop what is queued (DropMessage) or close the connection
	// (CloseConnection, with its close code). It is called from any
	// goroutine, possibly one that holds another owner's locks, so it
	// must not block nor call the budget: it marks the owner and lets
	// the owner's own goroutine act. It reports false if the owner was
	// already ending (cut by someone else): that is not counted as shed.
	shedQueue() bool
}

// maxShedPerCall bounds how many queues one failed charge sheds (Envoy
// resets at most 50 streams per worker per invocation; a failed charge
// is far more frequent than its timer).
const maxShedPerCall = 4

// track files owner under the size its queue now holds, after it grew or
// shrank from old to now bytes. The engine calls it after charging or
// releasing send-queue bytes; it only takes a lock when the size crosses a
// power of two (a bucket boundary) at or above minTrackedQueue, so small
// queues cost nothing. now == 0 removes the owner.
func (b *MemoryBudget) track(owner queueOwner, old, now int64) {
	if b != nil {
		b.queues.refile(owner, old, now)
	}
}

// shedLargest sheds up to n owners, largest buckets first, and returns
// how many it shed.
func (b *MemoryBudget) shedLargest(n int) int {
	return b.countShed(b.queues.shed(n, queueOwner.shedQueue))
}

// messageOwner is what gathers a message charged to the budget (a Conn).
type messageOwner interface {
	// shedMessage fails the message being gathered with 1013 and ends the
	// connection, which gives its memory back. It is called from any
	// goroutine, possibly one that holds another owner's locks: it must
	// not block nor call the budget. It reports false, as shedQueue does,
	// if there was nothing left to shed.
	shedMessage() bool
}

// trackMessage files owner under the size of the message it gathers,
// after its charge went from old to now bytes (now == 0: the message
// ended), as track does for send queues.
func (b *MemoryBudget) trackMessage(owner messageOwner, old, now int64) {
	if b != nil {
		b.messages.refile(owner, old, now)
	}
}

// shedMessages sheds up to n of the largest messages being gathered and
// returns how many it shed.
func (b *MemoryBudget) shedMessages(n int) int {
	return b.countShed(b.messages.shed(n, messageOwner.shedMessage))
}

// countShed counts k owners shed and returns k.
func (b *MemoryBudget) countShed(k int) int {
	b.shed.Add(uint64(k))
	return k
}

// minTrackedQueue is the smallest queue the budget keeps track of for
// shedding: below it a queue is not slow enough to be worth closing.
const minTrackedQueue = 64 << 10

// numQueueBuckets is the number of power-of-two buckets above
// minTrackedQueue (64 KiB, 128 KiB, ... 8 MiB and larger).
const numQueueBuckets = 8

// queueBucket returns the bucket of a queue (or a message) of n bytes: -1 below
// minTrackedQueue, else 0 for [64 KiB, 128 KiB) and so on, the last
// bucket holding everything larger.
func queueBucket(n int64) int {
	if n < minTrackedQueue {
		return -1
	}
	k := bits.Len64(uint64(n)) - bits.Len64(minTrackedQueue)
	return min(k, numQueueBuckets-1)
}

// sizeRegistry keeps the owners of large queues (or messages) in
// power-of-two buckets of their size, as Envoy's overload manager does
// for its streams, so that the largest can be found without sorting.
//
// It is split in shards, each with its own lock, an owner always in the
// same one: a thousand connections whose messages grow at once each take
// one shard's lock a few times, and a lock holder that the scheduler
// preempts (a machine busy reading what they send) holds up only the
// owners of its shard, not every one of them (one lock made a convoy that
// kept the readers waiting about 120 ms each in the first second of
// `rally bench partial` at /echo's limit).
type sizeRegistry[T comparable] struct {
	seed   maphash.Seed // picks an owner's shard
	count  [numQueueBuckets]atomic.Int64
	shards [registryShards]registryShard[T]
	once   sync.Once
	next   atomic.Uint32 // the shard takeLargest starts from, in turn
}

// registryShards is the number of locks of a sizeRegistry.
const registryShards = 16

type registryShard[T comparable] struct {
	mu      sync.Mutex
	buckets [numQueueBuckets]map[T]struct{}
	peak    [numQueueBuckets]int32 // the most owners each bucket's map held
	_       [64]byte               // a shard's lock on a cache line of its own
}

// shrinkBucketAt is the most owners a bucket's map may have held and still
// be kept once empty. A Go map keeps the room of the most it held: the
// thousands of slow readers of an attack would stay in the budget's maps
// long after they left. A map that held a few is kept, so that a queue
// going to and fro across a bucket's boundary makes no map each time.
const shrinkBucketAt = 8

// add files o in bucket i.
func (sh *registryShard[T]) add(o T, i int) bool {
	if sh.buckets[i] == nil {
		sh.buckets[i] = map[T]struct{}{}
	}
	if _, ok := sh.buckets[i][o]; ok {
		return false
	}
	sh.buckets[i][o] = struct{}{}
	sh.peak[i] = max(sh.peak[i], int32(len(sh.buckets[i])))
	return true
}

// remove takes o out of bucket i, and lets the bucket's map go once it is
// empty if it had grown past shrinkBucketAt.
func (sh *registryShard[T]) remove(o T, i int) bool {
	if _, ok := sh.buckets[i][o]; !ok {
		return false
	}
	delete(sh.buckets[i], o)
	if len(sh.buckets[i]) == 0 && sh.peak[i] > shrinkBucketAt {
		sh.buckets[i], sh.peak[i] = nil, 0
	}
	return true
}

// refile files o under its new size, now bytes, after it held old bytes:
// it takes a lock only when the size crosses a bucket boundary at or
// above minTrackedQueue; now == 0 removes o.
func (r *sizeRegistry[T]) refile(o T, old, now int64) {
	if from, to := queueBucket(old), queueBucket(now); from != to {
		r.move(o, from, to)
	}
}

// shed takes up to n of the largest owners and calls f on each; it
// returns how many f shed (reported true for).
func (r *sizeRegistry[T]) shed(n int, f func(T) bool) int {
	shed := 0
	for _, o := range r.takeLargest(n) {
		if f(o) {
			shed++
		}
	}
	return shed
}

func (r *sizeRegistry[T]) move(o T, from, to int) {
	r.once.Do(func() { r.seed = maphash.MakeSeed() })
	sh := &r.shards[maphash.Comparable(r.seed, o)%registryShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if from >= 0 && sh.remove(o, from) {
		r.count[from].Add(-1)
	}
	if to >= 0 && sh.add(o, to) {
		r.count[to].Add(1)
	}
}

// takeLargest removes and returns up to n owners, from the largest bucket
// down, visiting only buckets that hold some and, in each, the shards in
// turn from a different one each time. Within a bucket (sizes within a
// factor of two) any will do. An owner taken is tracked again when its
// queue next crosses a bucket boundary; one that is closing releases
// everything and leaves.
func (r *sizeRegistry[T]) takeLargest(n int) []T {
	var out []T
	first := int(r.next.Add(1))
	for i := numQueueBuckets - 1; i >= 0 && len(out) < n; i-- {
		for j := 0; j < registryShards && len(out) < n && r.count[i].Load() > 0; j++ {
			sh := &r.shards[(first+j)%registryShards]
			sh.mu.Lock()
			for o := range sh.buckets[i] {
				if len(out) == n {
					break
				}
				sh.remove(o, i)
				r.count[i].Add(-1)
				out = append(out, o)
			}
			sh.mu.Unlock()
		}
	}
	return out
}

// gatherCategory is what a message whose gathering starts now is charged
// to: MemoryInflate when its bytes come out of the inflater (a compressed
// message, charged for what it inflates to, not for what arrived), else
// MemoryAssembly. Both share AssemblyShare.
func (c *Conn) gatherCategory() MemoryCategory {
	if c.z != nil && c.z.inflating {
		return MemoryInflate
	}
	return MemoryAssembly
}

// A shared frame (a PreparedMessage's, sent to many connections) is
// charged once to the memory budget, however many send queues refer to
// it: the process holds it once. Its allocation starts with a frameShare,
// the frame's bytes after it (see newSharedFrame). The first queue of a
// connection with a budget that refers to the frame charges its whole
// allocation to that budget; the last queue that lets go gives the charge
// back to the same budget. A queue of a connection without a budget
// neither counts nor charges it.
type frameShare struct {
	// state is the count of queues that refer to the frame (low 32 bits)
	// and, while it is not 0, the id of the budget charged (high 32 bits):
	// one word, so that the queue that lets go last gives back to the
	// budget the first one charged.
	state atomic.Uint64
	size  int64 // the allocation's bytes, header included: what is charged
}

// frameShareWords is frameShare's size in 8-byte words.
const frameShareWords = int(unsafe.Sizeof(frameShare{}) / 8)

// newSharedFrame returns a frame of n bytes, preceded in its allocation
// by its frameShare (see shareOf). One allocation, of words so that the
// header's counter is aligned for atomic access on every platform.
func newSharedFrame(n int) []byte {
	words := make([]uint64, frameShareWords+(n+7)/8)
	s := (*frameShare)(unsafe.Pointer(&words[0]))
	s.size = int64(len(words) * 8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[frameShareWords])), n)
}

// shareOf returns the frameShare of a frame made by newSharedFrame (it
// must start at the frame's first byte): the words just before it, in
// the same allocation.
func shareOf(frame []byte) *frameShare {
	return (*frameShare)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(frame)), -frameShareWords*8))
}

// held reports whether some queue refers to the frame now, which means
// it is charged: one more reference costs nothing.
func (s *frameShare) held() bool { return uint32(s.state.Load()) != 0 }

// takeShare records one more queue that refers to the frame, of a
// connection charged to the budget of id, and charges the frame to that
// budget if it is the first.
func takeShare(s *frameShare, id uint32) {
	for {
		old := s.state.Load()
		next := old + 1
		if uint32(old) == 0 {
			next = uint64(id)<<32 | 1
		}
		if s.state.CompareAndSwap(old, next) {
			if uint32(old) == 0 {
				budgets.lookup(id).forceCharge(MemorySendQueues, s.size)
			}
			return
		}
	}
}

// dropShare records that a queue that took the frame with takeShare lets
// go of it, and gives the charge back if it was the last.
func dropShare(s *frameShare) {
	now := s.state.Add(^uint64(0)) // refs >= 1: no borrow from the id
	if uint32(now) == 0 {
		budgets.lookup(uint32(now>>32)).release(MemorySendQueues, s.size)
	}
}

// budgets names every MemoryBudget by a small id, so that a shared frame's
// header, which holds no pointer, can tell which budget it is charged to.
// It keeps weak pointers: a budget no longer used is collected as before.
var budgets budgetRegistry

type budgetRegistry struct {
	mu  sync.Mutex
	all atomic.Pointer[[]weak.Pointer[MemoryBudget]] // id-1 indexes it; appended under mu
}

func (r *budgetRegistry) register(b *MemoryBudget) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []weak.Pointer[MemoryBudget]
	if p := r.all.Load(); p != nil {
		all = *p
	}
	all = append(all, weak.Make(b))
	r.all.Store(&all)
	b.id = uint32(len(all))
}

// lookup returns the budget of id, or nil if it is gone (nil releases
// nothing).
func (r *budgetRegistry) lookup(id uint32) *MemoryBudget {
	p := r.all.Load()
	if p == nil || id == 0 || int(id) > len(*p) {
		return nil
	}
	return (*p)[id-1].Value()
}
