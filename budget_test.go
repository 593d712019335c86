package rally

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestMemoryBudgetRefusesAChargePastTheLimitAndCountsIt(t *testing.T) {
	b := NewMemoryBudget(1000)
	if !b.Reserve(MemoryAssembly, 600) {
		t.Fatal("600 of 1000 refused")
	}
	if !b.Reserve(MemoryInflate, 400) {
		t.Fatal("a charge up to exactly the limit refused")
	}
	if b.Reserve(MemoryAssembly, 1) {
		t.Fatal("a charge past the limit succeeded")
	}
	b.Release(MemoryInflate, 400)
	if !b.Reserve(MemoryAssembly, 400) {
		t.Fatal("a charge that fits after a release refused")
	}
	st := b.Stats()
	if got := st[MemoryAssembly]; got.Used != 1000 || got.Peak != 1000 || got.Refused != 1 {
		t.Errorf("assembly stats = %+v, want used 1000, peak 1000, refused 1", got)
	}
	if got := st[MemoryInflate]; got.Used != 0 || got.Peak != 400 || got.Refused != 0 {
		t.Errorf("inflate stats = %+v, want used 0, peak 400, refused 0", got)
	}
	if b.Used() != 1000 {
		t.Errorf("Used = %d, want 1000", b.Used())
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
	if !b.Reserve(MemoryAssembly, math.MaxInt64-10) {
		t.Fatal("first charge refused")
	}
	if b.Reserve(MemoryAssembly, 100) {
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
		b.Reserve(MemorySendQueues, tc.used)
		if got := b.Pressure(); got != tc.want {
			t.Errorf("%d of 1000 charged: pressure %v, want %v", tc.used, got, tc.want)
		}
		if got, want := b.AdmitsNew(), tc.want == PressureNormal; got != want {
			t.Errorf("%d of 1000 charged: AdmitsNew %v, want %v", tc.used, got, want)
		}
	}
}

func TestMemoryBudgetPressureCountsObservedMemoryButChargesDoNot(t *testing.T) {
	b := NewMemoryBudget(1000)
	b.Observe(960)
	if b.Pressure() != PressureCritical || b.AdmitsNew() {
		t.Errorf("observed 960 of 1000: pressure %v, admits new %v", b.Pressure(), b.AdmitsNew())
	}
	if !b.Reserve(MemoryAssembly, 500) {
		t.Error("a charge that fits was refused because of observed memory")
	}
	b.Observe(0)
	if b.Pressure() != PressureNormal {
		t.Errorf("pressure after observing 0 with 500 charged = %v", b.Pressure())
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
	if b.Reserve(MemoryAssembly, 1) {
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
				if b.Reserve(MemoryAssembly, 7) {
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
func (q *fakeQueue) shedQueue()         { *q.shed = append(*q.shed, q.name) }

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
	big := &fakeQueue{name: "big", size: 900 << 10, shed: &shed}
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

func TestMemoryBudgetRelievesOnlyUnderHighPressure(t *testing.T) {
	b := NewMemoryBudget(1 << 20)
	var shed []string
	q := &fakeQueue{name: "q", size: 512 << 10, shed: &shed}
	b.Reserve(MemorySendQueues, q.size)
	b.track(q, 0, q.size)
	if b.Relieve() != 0 {
		t.Fatal("relieved at normal pressure")
	}
	b.Observe(950 << 10)
	if b.Relieve() != 1 || len(shed) != 1 {
		t.Errorf("at high pressure Relieve shed %v, want [q]", shed)
	}
}

func TestMemoryCategoryNames(t *testing.T) {
	var got []string
	for _, c := range MemoryCategories() {
		got = append(got, c.String())
	}
	if want := "handshakes assembly inflate send_queues"; strings.Join(got, " ") != want {
		t.Errorf("names %q, want %q", strings.Join(got, " "), want)
	}
}
