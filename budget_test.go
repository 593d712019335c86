package rally

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestMemoryBudgetRefusesAChargePastTheLimitAndCountsIt(t *testing.T) {
	b := NewMemoryBudget(1000)
	if !b.Reserve(MemorySendQueues, 600) {
		t.Fatal("600 of 1000 refused")
	}
	if !b.Reserve(MemoryHandshakes, 400) {
		t.Fatal("a request head up to exactly the limit refused")
	}
	if b.Reserve(MemoryHandshakes, 1) {
		t.Fatal("a charge past the limit succeeded")
	}
	b.Release(MemoryHandshakes, 400)
	if !b.Reserve(MemoryHandshakes, 400) {
		t.Fatal("a charge that fits after a release refused")
	}
	st := b.Stats()
	if got := st[MemoryHandshakes]; got.Used != 400 || got.Peak != 400 || got.Refused != 1 {
		t.Errorf("handshakes stats = %+v, want used 400, peak 400, refused 1", got)
	}
	if got := st[MemorySendQueues]; got.Used != 600 || got.Peak != 600 || got.Refused != 0 {
		t.Errorf("send queue stats = %+v, want used 600, peak 600, refused 0", got)
	}
	if b.Used() != 1000 {
		t.Errorf("Used = %d, want 1000", b.Used())
	}
}

// What connections hold (messages, inflated output, send queues) stops at
// 85% of the limit: the rest is kept for new clients' request heads. Send
// queues stop at 75%: the last 10% stays for messages being gathered, so
// that subscribers' queues filling the budget cannot refuse a publisher's
// next message.
func TestMemoryBudgetKeepsAReserveForRequestHeads(t *testing.T) {
	b := NewMemoryBudget(1000)
	if !b.Reserve(MemorySendQueues, 750) {
		t.Fatal("send queues refused up to 75% of the limit")
	}
	if b.Reserve(MemorySendQueues, 1) {
		t.Error("send queues charged past 75% of the limit")
	}
	if !b.Reserve(MemoryAssembly, 60) || !b.Reserve(MemoryInflate, 40) {
		t.Fatal("messages refused the 10% that send queues leave them")
	}
	for _, cat := range []MemoryCategory{MemorySendQueues, MemoryAssembly, MemoryInflate} {
		if b.Reserve(cat, 1) {
			t.Errorf("%v charged past 85%% of the limit", cat)
		}
	}
	if !b.Reserve(MemoryHandshakes, 150) {
		t.Fatal("a request head refused with the reserve free")
	}
	if b.Pressure() != PressureCritical || b.AdmitsNew() {
		t.Errorf("a full budget: pressure %v, admits new %v", b.Pressure(), b.AdmitsNew())
	}
}

// Messages being gathered and their inflated output share AssemblyShare
// of the limit; send queues and request heads still fit beside them.
func TestMemoryBudgetBoundsMessagesToTheirShare(t *testing.T) {
	b := NewMemoryBudget(1000)
	if !b.Reserve(MemoryAssembly, 300) || !b.Reserve(MemoryInflate, 200) {
		t.Fatal("messages refused within their share of 50%")
	}
	if b.Reserve(MemoryAssembly, 1) || b.Reserve(MemoryInflate, 1) {
		t.Fatal("messages charged past their share")
	}
	if !b.Reserve(MemorySendQueues, 250) || !b.Reserve(MemoryHandshakes, 150) {
		t.Fatal("send queues or request heads refused beside messages at their share")
	}
	if got := b.Stats()[MemoryAssembly].Refused + b.Stats()[MemoryInflate].Refused; got != 2 {
		t.Errorf("%d refusals counted, want 2", got)
	}
	b.Release(MemoryInflate, 200)
	if !b.Reserve(MemoryAssembly, 100) {
		t.Error("a message refused after its share was given back")
	}

	all := NewMemoryBudgetWith(1000, &MemoryBudgetOptions{AssemblyShare: 100})
	if got := all.Options().AssemblyShare; got != 85 {
		t.Errorf("AssemblyShare 100 became %d, want 85 (what connections may hold)", got)
	}
	if !all.Reserve(MemoryAssembly, 850) || all.Reserve(MemoryAssembly, 1) {
		t.Error("with AssemblyShare at its largest, messages do not take exactly 85%")
	}
}

func TestMemoryBudgetOptionsDefaults(t *testing.T) {
	o := NewMemoryBudget(1).Options()
	if o.AssemblyShare != 50 || o.MessageTimeout != DefaultMessageTimeout || o.MinMessageRate != 1024 || o.MaxPendingHandshakes != 1024 {
		t.Errorf("default options %+v", o)
	}
	o = NewMemoryBudgetWith(1, &MemoryBudgetOptions{MessageTimeout: -1, MaxPendingHandshakes: -1}).Options()
	if o.MessageTimeout >= 0 || o.MaxPendingHandshakes >= 0 {
		t.Errorf("negative options (no bound) became %+v", o)
	}
}

func TestMemoryBudgetWithoutLimitCountsEverything(t *testing.T) {
	b := NewMemoryBudget(0)
	if !b.Reserve(MemorySendQueues, math.MaxInt64/2) || !b.Reserve(MemoryHandshakes, 5) {
		t.Fatal("a budget without limit refused a charge")
	}
	if b.Pressure() != PressureNormal {
		t.Errorf("pressure without limit = %v", b.Pressure())
	}
	if got := b.Stats()[MemoryHandshakes].Used; got != 5 {
		t.Errorf("handshakes used = %d, want 5", got)
	}
}

func TestMemoryBudgetRefusesAChargeThatWouldOverflow(t *testing.T) {
	b := NewMemoryBudget(math.MaxInt64)
	if !b.Reserve(MemoryHandshakes, math.MaxInt64-10) {
		t.Fatal("first charge refused")
	}
	if b.Reserve(MemoryHandshakes, 100) {
		t.Fatal("a charge that overflows the total succeeded")
	}
}

func TestNilMemoryBudgetAdmitsEverything(t *testing.T) {
	var b *MemoryBudget
	if !b.charge(MemorySendQueues, 1<<40) || !b.forceCharge(MemoryAssembly, 1) {
		t.Fatal("nil budget refused")
	}
	b.release(MemorySendQueues, 1<<40)
	b.track(nil, 0, 1<<30)
}

func TestMemoryBudgetPressureLevels(t *testing.T) {
	for _, tc := range []struct {
		used int64
		want Pressure
	}{
		{0, PressureNormal}, {799, PressureNormal}, {800, PressureElevated}, {899, PressureElevated},
		{900, PressureHigh}, {949, PressureHigh}, {950, PressureCritical}, {1000, PressureCritical},
	} {
		b := NewMemoryBudget(1000)
		b.Reserve(MemoryHandshakes, tc.used)
		if got := b.Pressure(); got != tc.want {
			t.Errorf("%d of 1000 charged: pressure %v, want %v", tc.used, got, tc.want)
		}
		if got, want := b.AdmitsNew(), tc.want < PressureHigh; got != want {
			t.Errorf("%d of 1000 charged: AdmitsNew %v, want %v", tc.used, got, want)
		}
	}
}

func TestMemoryBudgetPressureCountsObservedMemoryButChargesDoNot(t *testing.T) {
	b := NewMemoryBudget(1000)
	b.Observe(960)
	if b.Pressure() != PressureCritical || !b.AdmitsNew() {
		t.Errorf("observed 960 of 1000: pressure %v, admits new %v; want critical, still admitting", b.Pressure(), b.AdmitsNew())
	}
	// Observed memory sheds and, at the limit, refuses new connections;
	// it never refuses a connection's charge, which is checked against
	// what is charged (the healthy connections must go on).
	if !b.Reserve(MemorySendQueues, 10) || !b.Reserve(MemoryAssembly, 10) {
		t.Error("a connection's charge was refused because of observed memory")
	}
	if !b.Reserve(MemoryHandshakes, 490) {
		t.Error("a request head was refused because of observed memory")
	}
	b.Observe(1000)
	if b.AdmitsNew() {
		t.Error("new connections admitted with the whole limit observed")
	}
	b.Observe(0)
	if b.Pressure() != PressureNormal {
		t.Errorf("pressure after observing 0 with 510 charged = %v", b.Pressure())
	}
}

func TestMemoryBudgetForceChargeGoesOverAndSays(t *testing.T) {
	b := NewMemoryBudget(100)
	if !b.forceCharge(MemorySendQueues, 100) {
		t.Error("force charge up to the limit reported over")
	}
	if b.forceCharge(MemorySendQueues, 2) {
		t.Error("force charge past the limit reported within")
	}
	if b.Used() != 102 {
		t.Errorf("Used = %d, want 102", b.Used())
	}
	if b.Reserve(MemoryHandshakes, 1) {
		t.Error("charge succeeded while over the limit")
	}
}

func TestMemoryBudgetChargesConcurrentlyNeverExceedTheLimit(t *testing.T) {
	b := NewMemoryBudget(10000)
	var wg sync.WaitGroup
	var granted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if b.Reserve(MemoryHandshakes, 7) {
					granted.Add(7)
					if b.Used() > 10000 {
						t.Error("used past the limit")
					}
				}
			}
		})
	}
	wg.Wait()
	if granted.Load() != b.Used() || b.Used() > 10000 {
		t.Errorf("granted %d, used %d, limit 10000", granted.Load(), b.Used())
	}
	if b.Used() < 10000-7 {
		t.Errorf("used %d: charges refused while room was left", b.Used())
	}
}

func TestQueueBucketsArePowersOfTwoFrom64KiB(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{
		{0, -1}, {64<<10 - 1, -1}, {64 << 10, 0}, {128<<10 - 1, 0}, {128 << 10, 1},
		{1 << 20, 4}, {8 << 20, 7}, {1 << 40, 7}, {math.MaxInt64, 7},
	} {
		if got := queueBucket(tc.n); got != tc.want {
			t.Errorf("queueBucket(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// fakeQueue is a queueOwner that records being shed.
type fakeQueue struct {
	name string
	size int64
	shed *[]string
}

func (q *fakeQueue) queuedBytes() int64 { return q.size }
func (q *fakeQueue) shedQueue() bool    { *q.shed = append(*q.shed, q.name); return true }

func TestMemoryBudgetShedsTheLargestQueuesFirst(t *testing.T) {
	b := NewMemoryBudget(10 << 20)
	var shed []string
	queues := []*fakeQueue{
		{name: "small", size: 32 << 10},
		{name: "100K", size: 100 << 10},
		{name: "3M", size: 3 << 20},
		{name: "1M", size: 1 << 20},
		{name: "9M", size: 9 << 20},
	}
	for _, q := range queues {
		q.shed = &shed
		b.track(q, 0, q.size)
	}
	if n := b.shedLargest(2); n != 2 {
		t.Fatalf("shedLargest(2) shed %d", n)
	}
	if len(shed) != 2 || shed[0] != "9M" || shed[1] != "3M" {
		t.Errorf("shed %v, want [9M 3M]", shed)
	}
	b.shedLargest(10)
	if want := []string{"9M", "3M", "1M", "100K"}; len(shed) != len(want) || shed[2] != "1M" || shed[3] != "100K" {
		t.Errorf("shed %v, want %v (a queue under 64 KiB is never shed)", shed, want)
	}
	if b.Shed() != 4 {
		t.Errorf("Shed() = %d, want 4", b.Shed())
	}
}

func TestMemoryBudgetShedsWhenASendQueueChargeFails(t *testing.T) {
	b := NewMemoryBudget(1 << 20)
	var shed []string
	big := &fakeQueue{name: "big", size: 700 << 10, shed: &shed}
	if !b.Reserve(MemorySendQueues, big.size) {
		t.Fatal("charge refused")
	}
	b.track(big, 0, big.size)
	if b.Reserve(MemorySendQueues, 200<<10) {
		t.Fatal("charge past the limit succeeded")
	}
	if len(shed) != 1 || shed[0] != "big" {
		t.Errorf("shed %v after a refused send-queue charge, want [big]", shed)
	}
}

func TestMemoryBudgetUntracksAQueueThatShrinks(t *testing.T) {
	b := NewMemoryBudget(0)
	var shed []string
	q := &fakeQueue{name: "q", size: 1 << 20, shed: &shed}
	b.track(q, 0, 1<<20)
	b.track(q, 1<<20, 256<<10)
	b.track(q, 256<<10, 0)
	if b.shedLargest(10) != 0 || len(shed) != 0 {
		t.Errorf("an emptied queue was shed: %v", shed)
	}
}

// The budget's record of large queues gives back the room of a crowd
// that left, whether the queues drained or were shed: a Go map keeps the
// room of the most it held, and an attack's thousands of slow readers
// would stay in it for the life of the process.
func TestMemoryBudgetLetsGoOfTheRoomOfACrowdOfQueuesThatLeft(t *testing.T) {
	b := NewMemoryBudget(0)
	var shed []string
	crowd := make([]*fakeQueue, 2000)
	for i := range crowd {
		crowd[i] = &fakeQueue{name: "q", size: 1 << 20, shed: &shed}
		b.track(crowd[i], 0, crowd[i].size)
	}
	for _, q := range crowd[:1000] {
		b.track(q, q.size, 0) // drained
	}
	for b.shedLargest(100) > 0 {
	}
	if len(shed) != 1000 {
		t.Fatalf("shed %d queues, want the 1000 still tracked", len(shed))
	}
	for i := range b.queues.shards {
		for j, m := range b.queues.shards[i].buckets {
			if m != nil {
				t.Fatalf("shard %d keeps the map of bucket %d (%d owners) after the crowd left", i, j, len(m))
			}
		}
	}
	q := &fakeQueue{name: "next", size: 1 << 20, shed: &shed}
	b.track(q, 0, q.size)
	if b.shedLargest(1) != 1 || shed[len(shed)-1] != "next" {
		t.Errorf("a queue tracked after the crowd left was not shed: %v", shed[len(shed)-1])
	}
}

func TestMemoryBudgetRelievesFromElevatedPressure(t *testing.T) {
	b := NewMemoryBudget(1 << 20)
	var shed []string
	q := &fakeQueue{name: "q", size: 300 << 10, shed: &shed}
	m := &fakeMessage{name: "m", shed: &shed}
	b.Reserve(MemorySendQueues, q.size)
	b.track(q, 0, q.size)
	b.Reserve(MemoryAssembly, 200<<10)
	b.trackMessage(m, 0, 200<<10)
	if b.Relieve() != 0 {
		t.Fatal("relieved at normal pressure")
	}
	b.Observe(850 << 10)
	if b.Pressure() != PressureElevated || !b.AdmitsNew() {
		t.Fatalf("at 83%%: pressure %v, admits new %v; want elevated, still admitting", b.Pressure(), b.AdmitsNew())
	}
	if b.Relieve() != 2 || strings.Join(shed, " ") != "q m" {
		t.Errorf("at elevated pressure Relieve shed %v, want [q m]", shed)
	}
}

// fakeMessage is a messageOwner that records being shed.
type fakeMessage struct {
	name string
	shed *[]string
}

func (m *fakeMessage) shedMessage() bool { *m.shed = append(*m.shed, m.name); return true }

// A message that needs more than the share left sheds the largest
// messages being gathered (a message under 64 KiB is never shed).
func TestMemoryBudgetShedsTheLargestMessagesWhenTheirShareRunsOut(t *testing.T) {
	b := NewMemoryBudget(4 << 20) // 2 MiB for messages
	var shed []string
	for _, m := range []struct {
		name string
		size int64
	}{{"1M", 1 << 20}, {"512K", 512 << 10}, {"256K", 256 << 10}, {"32K", 32 << 10}} {
		if !b.Reserve(MemoryAssembly, m.size) {
			t.Fatalf("%s refused", m.name)
		}
		b.trackMessage(&fakeMessage{name: m.name, shed: &shed}, 0, m.size)
	}
	if b.Reserve(MemoryInflate, 512<<10) {
		t.Fatal("a charge past the share succeeded")
	}
	if want := "1M 512K 256K"; strings.Join(shed, " ") != want {
		t.Errorf("shed %v, want %s", shed, want)
	}
	if b.Shed() != 3 {
		t.Errorf("Shed() = %d, want 3", b.Shed())
	}
}

func TestMemoryCategoryNames(t *testing.T) {
	var got []string
	for _, c := range MemoryCategories() {
		got = append(got, c.String())
	}
	if want := "handshakes assembly inflate send_queues h2_streams subscriptions recovery"; strings.Join(got, " ") != want {
		t.Errorf("names %q, want %q", strings.Join(got, " "), want)
	}
}

// Owners filed from many goroutines at once (a crowd of connections
// whose queues grow together) are all found again, the largest first,
// whichever of the registry's locks each landed under.
func TestMemoryBudgetShedsTheLargestOfManyQueuesFiledConcurrently(t *testing.T) {
	b := NewMemoryBudget(0)
	var shed []string
	queues := make([]*fakeQueue, 256)
	var wg sync.WaitGroup
	for i := range queues {
		q := &fakeQueue{name: strconv.Itoa(i), size: int64(64<<10) << (i % 4)}
		queues[i] = q
		wg.Go(func() {
			for size := int64(64 << 10); size <= q.size; size *= 2 {
				b.track(q, size/2, size) // grows by doubling, as a buffer does
			}
		})
	}
	wg.Wait()
	for _, q := range queues {
		q.shed = &shed
	}
	if n := b.shedLargest(100); n != 100 {
		t.Fatalf("shedLargest(100) shed %d of 256", n)
	}
	size := func(name string) int64 { i, _ := strconv.Atoi(name); return queues[i].size }
	for i, name := range shed {
		if i < 64 && size(name) != 512<<10 || i >= 64 && size(name) != 256<<10 {
			t.Fatalf("shed #%d is a queue of %d bytes; want the 64 of 512 KiB first, then those of 256 KiB", i, size(name))
		}
	}
	if n := b.shedLargest(1000); n != 156 {
		t.Errorf("the rest: shed %d, want 156", n)
	}
}
