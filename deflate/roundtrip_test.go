package deflate

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// sample returns n bytes of text that compresses like chat or JSON traffic:
// words from a small vocabulary, seeded so runs repeat.
func sample(seed uint64, n int) []byte {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "{\"id\":", "\"name\":", "\"price\":", "42,", "true}", "websocket", "deflate", "window", "message", "\n"}
	r := rand.New(rand.NewPCG(seed, 7))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(4) == 0 {
			fmt.Fprintf(&b, "%d", r.IntN(100000))
		}
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

func TestCompressedMessagesInflateToTheOriginalWithEveryWindowAndTakeoverSetting(t *testing.T) {
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for _, takeover := range []bool{false, true} {
			for _, level := range []int{BestSpeed, 5, BestCompression} {
				t.Run(fmt.Sprintf("bits=%d/takeover=%t/level=%d", bits, takeover, level), func(t *testing.T) {
					c := NewCompressor(level, bits, takeover)
					d := NewDecompressor(bits, takeover)
					var wire, out []byte
					for i := range 28 {
						msg := sample(uint64(i%7), []int{0, 1, 10, 200, 1024, 5000, 40000}[i%7])
						wire = c.Compress(wire[:0], msg)
						var err error
						out, err = d.Inflate(out[:0], wire, 0)
						if err != nil {
							t.Fatalf("message %d (%d bytes): %v", i, len(msg), err)
						}
						if !bytes.Equal(out, msg) {
							t.Fatalf("message %d (%d bytes) inflated to %d different bytes", i, len(msg), len(out))
						}
						if i%5 == 4 {
							c.Idle()
						}
						if i%3 == 2 {
							d.Idle()
						}
					}
				})
			}
		}
	}
}
