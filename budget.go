package rally

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
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
	// MemoryInflate is the output of decompressing messages.
	MemoryInflate
	// MemorySendQueues is what waits in connections' send queues, capacity
	// included.
	MemorySendQueues

	numMemoryCategories
)

var memoryCategoryNames = [numMemoryCategories]string{"handshakes", "assembly", "inflate", "send_queues"}

// String returns the category's name as metrics label it: handshakes,
// assembly, inflate or send_queues.
func (c MemoryCategory) String() string {
	if c < 0 || c >= numMemoryCategories {
		return fmt.Sprintf("MemoryCategory(%d)", int(c))
	}
	return memoryCategoryNames[c]
}

// MemoryCategories lists every category, in the order of their values.
func MemoryCategories() []MemoryCategory {
	return []MemoryCategory{MemoryHandshakes, MemoryAssembly, MemoryInflate, MemorySendQueues}
}

// Pressure is how close a MemoryBudget is to its limit.
type Pressure int

// Pressure levels, each a share of the limit (the higher of what is
// charged and what was last observed, see MemoryBudget.Observe).
const (
	// PressureNormal: below 80%. Everything is admitted that fits.
	PressureNormal Pressure = iota
	// PressureElevated: 80% or more. New connections are refused (a
	// server answers 503); what open connections ask still fits.
	PressureElevated
	// PressureHigh: 90% or more. The largest send queues are shed (their
	// connections apply their buffer-limit policy), a few at a time.
	PressureHigh
	// PressureCritical: 95% or more. Nothing new is charged but the
	// reserve of a control frame.
	PressureCritical
)

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
// One budget may be shared by several servers of a process, so that their
// sum is bounded. Charging and releasing are lock-free; every method is
// safe for concurrent use. The zero value is not usable: use
// NewMemoryBudget.
type MemoryBudget struct {
	limit    atomic.Int64
	total    atomic.Int64
	observed atomic.Int64
	used     [numMemoryCategories]atomic.Int64
	peak     [numMemoryCategories]atomic.Int64
	refused  [numMemoryCategories]atomic.Uint64
	shed     atomic.Uint64

	queues queueRegistry
}

// NewMemoryBudget returns a budget of limit bytes. A limit of 0 or less
// means no limit: charges always succeed and are still counted, so that
// metrics show what clients hold.
func NewMemoryBudget(limit int64) *MemoryBudget {
	b := &MemoryBudget{}
	b.limit.Store(limit)
	return b
}

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
// own, fragmentation) still counts toward refusing new work. Charges are
// not refused because of it: they are checked against what is charged.
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
// accepted: the pressure is below PressureElevated. A server that
// answers false refuses with 503 and counts it (see Refused).
func (b *MemoryBudget) AdmitsNew() bool { return b.Pressure() < PressureElevated }

// Reserve charges n bytes to cat if they fit under the limit, and reports
// whether they did. A program that holds memory on behalf of clients
// (a buffer of its own) can account it with Reserve and Release. A
// refused reservation is counted (see Stats); n <= 0 always succeeds.
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

// Relieve sheds up to 8 of the largest send queues if the pressure is
// PressureHigh or more, and returns how many it shed. A server calls it
// every few hundred milliseconds (with Observe), so that memory held by
// slow peers gives way before charges start failing.
func (b *MemoryBudget) Relieve() int {
	if b.Pressure() < PressureHigh {
		return 0
	}
	return b.shedLargest(2 * maxShedPerCall)
}

// Shed returns how many send queues the budget has shed (asked to apply
// their buffer-limit policy) to make room.
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
// before copying a record in, the raw-upgrade parser before growing its
// head buffer. A send-queue charge that fails also sheds the largest
// registered queues (see track), so that the slowest peers give way first.
func (b *MemoryBudget) charge(cat MemoryCategory, n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	limit := b.limit.Load()
	for {
		t := b.total.Load()
		if limit > 0 && (t+n > limit || t+n < t) {
			b.refused[cat].Add(1)
			if cat == MemorySendQueues {
				b.shedLargest(maxShedPerCall)
			}
			return false
		}
		if b.total.CompareAndSwap(t, t+n) {
			break
		}
	}
	b.grow(cat, n)
	return true
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
	b.grow(cat, n)
	limit := b.limit.Load()
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
	// the owner's own goroutine act.
	shedQueue()
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
	if b == nil {
		return
	}
	from, to := queueBucket(old), queueBucket(now)
	if from == to {
		return
	}
	b.queues.move(owner, from, to)
}

// shedLargest sheds up to n owners, largest buckets first, and returns
// how many it shed.
func (b *MemoryBudget) shedLargest(n int) int {
	k := b.queues.takeLargest(n)
	for _, o := range k {
		o.shedQueue()
	}
	b.shed.Add(uint64(len(k)))
	return len(k)
}

// minTrackedQueue is the smallest queue the budget keeps track of for
// shedding: below it a queue is not slow enough to be worth closing.
const minTrackedQueue = 64 << 10

// numQueueBuckets is the number of power-of-two buckets above
// minTrackedQueue (64 KiB, 128 KiB, ... 8 MiB and larger).
const numQueueBuckets = 8

// queueBucket returns the bucket of a queue of n bytes: -1 below
// minTrackedQueue, else 0 for [64 KiB, 128 KiB) and so on, the last
// bucket holding everything larger.
func queueBucket(n int64) int {
	if n < minTrackedQueue {
		return -1
	}
	k := bits.Len64(uint64(n)) - bits.Len64(minTrackedQueue)
	return min(k, numQueueBuckets-1)
}

// queueRegistry keeps the owners of large queues in power-of-two buckets
// of their size, as Envoy's overload manager does for its streams, so
// that the largest can be found without sorting.
type queueRegistry struct {
	mu      sync.Mutex
	buckets [numQueueBuckets]map[queueOwner]struct{}
}

func (r *queueRegistry) move(o queueOwner, from, to int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from >= 0 {
		delete(r.buckets[from], o)
	}
	if to >= 0 {
		if r.buckets[to] == nil {
			r.buckets[to] = map[queueOwner]struct{}{}
		}
		r.buckets[to][o] = struct{}{}
	}
}

// takeLargest removes and returns up to n owners, from the largest bucket
// down. Within a bucket (sizes within a factor of two) any will do. An
// owner taken is tracked again when its queue next crosses a bucket
// boundary; one that is closing releases everything and leaves.
func (r *queueRegistry) takeLargest(n int) []queueOwner {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []queueOwner
	for i := numQueueBuckets - 1; i >= 0 && len(out) < n; i-- {
		for o := range r.buckets[i] {
			if len(out) == n {
				break
			}
			delete(r.buckets[i], o)
			out = append(out, o)
		}
	}
	return out
}
