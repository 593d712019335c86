package rally

import "testing"

// Corks and the event loop's gathering tell goroutines apart by currentG,
// on every architecture and without assembly (-tags rally_nogid): it must
// be the same for one goroutine, different for two alive at once, and
// never 0.
func TestCurrentGTellsGoroutinesApart(t *testing.T) {
	here := currentG()
	if here == 0 || currentG() != here {
		t.Fatalf("currentG = %#x then %#x in one goroutine; want one non-zero value", here, currentG())
	}
	const n = 8
	seen := map[uintptr]bool{here: true}
	got := make(chan uintptr)
	release := make(chan struct{})
	for range n {
		go func() {
			got <- currentG()
			<-release // alive until every number is read
		}()
	}
	for range n {
		g := <-got
		if g == 0 || seen[g] {
			t.Fatalf("currentG = %#x in a goroutine, seen %v; want a value of its own", g, seen)
		}
		seen[g] = true
	}
	close(release)
}

func BenchmarkCurrentG(b *testing.B) {
	var sum uintptr
	for b.Loop() {
		sum += currentG()
	}
	if sum == 0 {
		b.Fatal("currentG is 0")
	}
}
