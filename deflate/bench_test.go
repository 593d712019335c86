package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	kflate "github.com/klauspost/compress/flate"
)

// jsonMessages returns n distinct JSON messages of about 1 KiB with the
// same shape and different values, like the updates of a live feed.
func jsonMessages(n int) [][]byte {
	type item struct {
		SKU   string  `json:"sku"`
		Qty   int     `json:"qty"`
		Price float64 `json:"price"`
	}
	type event struct {
		Type   string            `json:"type"`
		ID     int64             `json:"id"`
		User   map[string]string `json:"user"`
		Items  []item            `json:"items"`
		Status string            `json:"status"`
		TS     int64             `json:"ts"`
	}
	r := rand.New(rand.NewPCG(42, 1))
	names := []string{"ada", "grace", "linus", "ken", "barbara", "edsger", "margaret", "dennis"}
	var out [][]byte
	for len(out) < n {
		e := event{Type: "order.updated", ID: r.Int64N(1e12), Status: []string{"open", "paid", "shipped"}[r.IntN(3)], TS: 1.7e12 + r.Int64N(1e9)}
		name := names[r.IntN(len(names))]
		e.User = map[string]string{"name": name, "email": name + "@example.com", "country": []string{"DE", "FR", "US", "JP"}[r.IntN(4)]}
		var b []byte
		for len(b) < 1000 {
			e.Items = append(e.Items, item{SKU: fmt.Sprintf("SKU-%06d", r.IntN(1e6)), Qty: 1 + r.IntN(9), Price: float64(r.IntN(100000)) / 100})
			var err error
			if b, err = json.Marshal(e); err != nil {
				panic(err)
			}
		}
		out = append(out, b)
	}
	return out
}

// textMessages returns n distinct 64 KiB messages of text.
func textMessages(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, sample(uint64(100+i), 64<<10))
	}
	return out
}

var corpora = []struct {
	name string
	msgs func() [][]byte
}{
	{"json1KiB", func() [][]byte { return jsonMessages(64) }},
	{"text64KiB", func() [][]byte { return textMessages(8) }},
}

func avgLen(msgs [][]byte) int64 {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return int64(n / len(msgs))
}

// BenchmarkCompress compresses one message per op, in turn from a set of
// distinct messages; with takeover they form one stream.
func BenchmarkCompress(b *testing.B) {
	for _, cp := range corpora {
		msgs := cp.msgs()
		for _, takeover := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/takeover=%t", cp.name, takeover), func(b *testing.B) {
				c := NewCompressor(BestSpeed, 15, takeover)
				dst := make([]byte, 0, 128<<10)
				wire := 0
				b.SetBytes(avgLen(msgs))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					dst = c.Compress(dst[:0], msgs[i%len(msgs)])
					wire += len(dst)
					i++
				}
				b.ReportMetric(float64(wire)/float64(i), "wire-B/msg")
			})
		}
	}
}

// BenchmarkInflate inflates one message per op. With takeover the
// messages are a stream compressed from an empty window, so it can be
// replayed on the same decompressor.
func BenchmarkInflate(b *testing.B) {
	for _, cp := range corpora {
		msgs := cp.msgs()
		for _, takeover := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/takeover=%t", cp.name, takeover), func(b *testing.B) {
				c := NewCompressor(BestSpeed, 15, takeover)
				var wires [][]byte
				for _, m := range msgs {
					wires = append(wires, c.Compress(nil, m))
				}
				d := NewDecompressor(15, takeover)
				dst := make([]byte, 0, 128<<10)
				b.SetBytes(avgLen(msgs))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					var err error
					if dst, err = d.Inflate(dst[:0], wires[i%len(wires)], 16<<20); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkInflateInFrames is Feed and Next over a message that arrives
// in frames of 1 KiB of compressed payload, each piece of output read (as
// a connection validating UTF-8 would) but not copied.
func BenchmarkInflateInFrames(b *testing.B) {
	for _, cp := range corpora {
		msgs := cp.msgs()
		for _, takeover := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/takeover=%t", cp.name, takeover), func(b *testing.B) {
				c := NewCompressor(BestSpeed, 15, takeover)
				var wires [][][]byte
				for _, m := range msgs {
					wires = append(wires, splitEvery(c.Compress(nil, m), 1<<10))
				}
				d := NewDecompressor(15, takeover)
				b.SetBytes(avgLen(msgs))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					frames := wires[i%len(wires)]
					n := 0
					for k, f := range frames {
						d.Feed(f, k == len(frames)-1)
						for {
							p, err := d.Next()
							if err != nil {
								b.Fatal(err)
							}
							if p == nil {
								break
							}
							n += len(p)
						}
					}
					if n != len(msgs[i%len(msgs)]) {
						b.Fatalf("%d bytes inflated, want %d", n, len(msgs[i%len(msgs)]))
					}
					i++
				}
			})
		}
	}
}

// BenchmarkCompressOnce is the cost of a publish compressed once for all
// its receivers.
func BenchmarkCompressOnce(b *testing.B) {
	msgs := jsonMessages(64)
	dst := make([]byte, 0, 4096)
	b.SetBytes(avgLen(msgs))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		dst = CompressOnce(dst[:0], msgs[i%len(msgs)], BestSpeed, 15)
		i++
	}
}

// BenchmarkCompressAfterIdle is the price of Idle with takeover: each
// message first primes a pooled compressor with the kept window.
func BenchmarkCompressAfterIdle(b *testing.B) {
	msgs := jsonMessages(64)
	for _, bits := range []int{10, 15} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			c := NewCompressor(BestSpeed, bits, true)
			for _, m := range msgs {
				c.Compress(nil, m) // fill the window
			}
			dst := make([]byte, 0, 4096)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				dst = c.Compress(dst[:0], msgs[i%len(msgs)])
				c.Idle()
				i++
			}
		})
	}
}

// BenchmarkIdleConnection reports what the compression state of one idle
// connection costs (both directions, after some traffic and Idle), and
// what it costs while busy (a lent compressor and decoder included).
func BenchmarkIdleConnection(b *testing.B) {
	msgs := jsonMessages(64)
	for _, takeover := range []bool{false, true} {
		b.Run(fmt.Sprintf("takeover=%t", takeover), func(b *testing.B) {
			const conns = 200
			var idle, busy float64
			for b.Loop() {
				idle, busy = connectionMemory(conns, takeover, msgs)
			}
			b.ReportMetric(idle, "idle-B/conn")
			b.ReportMetric(busy, "busy-B/conn")
		})
	}
}

func connectionMemory(conns int, takeover bool, msgs [][]byte) (idle, busy float64) {
	type conn struct {
		c *Compressor
		d *Decompressor
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	cs := make([]conn, conns)
	for i := range cs {
		c := NewCompressor(BestSpeed, 15, takeover)
		d := NewDecompressor(15, takeover)
		for _, m := range msgs[:8] {
			w := c.Compress(nil, m)
			if _, err := d.Inflate(nil, w, 0); err != nil {
				panic(err)
			}
		}
		cs[i] = conn{c, d}
	}
	during := heap()
	for _, c := range cs {
		c.c.Idle()
		c.d.Idle()
	}
	// The pools keep what they were given until two collections pass.
	after := heap()
	runtime.KeepAlive(cs)
	return float64(after-before) / float64(conns), float64(during-before) / float64(conns)
}

// BenchmarkStdlib is the same work with compress/flate (BestSpeed, a
// reused writer and reader, no context takeover), the baseline for the
// ratios in docs/BENCHMARKS.md.
func BenchmarkStdlib(b *testing.B) {
	for _, cp := range corpora {
		msgs := cp.msgs()
		b.Run("compress/"+cp.name, func(b *testing.B) {
			var out bytes.Buffer
			w, _ := stdflate.NewWriter(&out, stdflate.BestSpeed)
			b.SetBytes(avgLen(msgs))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				out.Reset()
				w.Reset(&out)
				_, _ = w.Write(msgs[i%len(msgs)])
				_ = w.Flush()
				i++
			}
		})
		b.Run("inflate/"+cp.name, func(b *testing.B) {
			var wires [][]byte
			for _, m := range msgs {
				wires = append(wires, append(CompressOnce(nil, m, BestSpeed, 15), 0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff))
			}
			var src bytes.Reader
			r := stdflate.NewReader(&src)
			dst := bytes.NewBuffer(make([]byte, 0, 128<<10))
			b.SetBytes(avgLen(msgs))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				src.Reset(wires[i%len(wires)])
				_ = r.(stdflate.Resetter).Reset(&src, nil)
				dst.Reset()
				if _, err := dst.ReadFrom(r); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkKlauspostInflate is klauspost/compress's flate reader (a pull
// decoder, which cannot be fed frame by frame) inflating the messages
// BenchmarkInflate inflates: the ratio of the two, in one run, is what
// the push decoder costs or saves.
func BenchmarkKlauspostInflate(b *testing.B) {
	for _, cp := range corpora {
		msgs := cp.msgs()
		var wires [][]byte
		for _, m := range msgs {
			wires = append(wires, CompressOnce(nil, m, BestSpeed, 15))
		}
		b.Run(cp.name, func(b *testing.B) {
			var src bytes.Reader
			r := kflate.NewReader(&src)
			buf := make([]byte, 1<<15+1)
			in := make([]byte, 0, 128<<10)
			b.SetBytes(avgLen(msgs))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				in = append(append(in[:0], wires[i%len(wires)]...), tail[:]...)
				src.Reset(in)
				_ = r.(kflate.Resetter).Reset(&src, nil)
				n := 0
				for {
					k, err := r.Read(buf)
					n += k
					if err != nil || (src.Len() == 0 && k < len(buf)) {
						break
					}
				}
				if n != len(msgs[i%len(msgs)]) {
					b.Fatalf("%d bytes inflated, want %d", n, len(msgs[i%len(msgs)]))
				}
				i++
			}
		})
	}
}
