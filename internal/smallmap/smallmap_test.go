package smallmap

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// A Map answers as a Go map would, whatever the order of sets and
// deletes (the first entry held in place, the rest in a map).
func TestMapAnswersAsAGoMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var cs Map[string]
		model := map[string]string{}
		for range 50 {
			ch := "c" + strconv.Itoa(r.IntN(5))
			switch r.IntN(3) {
			case 0, 1:
				user := strconv.Itoa(r.IntN(100))
				cs.Set(ch, user)
				model[ch] = user
			case 2:
				cs.Delete(ch)
				delete(model, ch)
			}
			if cs.Len() != len(model) {
				t.Fatalf("round %d: len %d, want %d", round, cs.Len(), len(model))
			}
			for k := range 5 {
				ch := "c" + strconv.Itoa(k)
				got, ok := cs.Get(ch)
				want, wok := model[ch]
				if got != want || ok != wok {
					t.Fatalf("round %d: get(%s) = %q %v, want %q %v", round, ch, got, ok, want, wok)
				}
			}
			chans := cs.Keys()
			slices.Sort(chans)
			var want []string
			for ch := range model {
				want = append(want, ch)
			}
			slices.Sort(want)
			if !slices.Equal(chans, want) {
				t.Fatalf("round %d: keys %v, want %v", round, chans, want)
			}
		}
	}
}
