package bufpool

import "testing"

func TestGetReturnsAtLeastTheSizeAskedFor(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 4097, 1 << 20, 16 << 20, 16<<20 + 1} {
		b := Get(n)
		if len(*b) != 0 || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		Put(b)
	}
}

func TestPutThenGetReusesWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	Put(Get(4096))
	allocs := testing.AllocsPerRun(100, func() {
		b := Get(3000)
		*b = append(*b, 1, 2, 3)
		Put(b)
	})
	if allocs != 0 {
		t.Fatalf("got %v allocs per Get/Put, want 0", allocs)
	}
}

func TestPutDropsBuffersOfOddSize(t *testing.T) {
	b := make([]byte, 0, 1000)
	Put(&b)
	Put(nil)
	if got := Get(1000); cap(*got) != 1024 {
		t.Fatalf("Get(1000) after Put of an odd buffer has cap %d, want 1024", cap(*got))
	}
}
