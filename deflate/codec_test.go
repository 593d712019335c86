package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/rallyws/rally/frame"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withTails joins messages into the DEFLATE stream they are part of, each
// with its tail put back (RFC 7692 7.2.2).
func withTails(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, m...)
		b = append(b, tail[:]...)
	}
	return b
}

func TestInflateDecodesTheExamplesOfRFC7692(t *testing.T) {
	tests := []struct {
		name     string
		takeover bool
		payloads []string
	}{
		{"7.2.3.1 a message compressed", false, []string{"f2 48 cd c9 c9 07 00"}},
		{"7.2.3.2 a second message sharing the window", true, []string{"f2 48 cd c9 c9 07 00", "f2 00 11 00 00"}},
		{"7.2.3.3 a stored block", false, []string{"00 05 00 fa ff 48 65 6c 6c 6f 00"}},
		{"7.2.3.4 a final block", false, []string{"f3 48 cd c9 c9 07 00 00"}},
		{"7.2.3.4 a final block, then a message on the same window", true, []string{"f3 48 cd c9 c9 07 00 00", "f2 00 11 00 00"}},
		{"7.2.3.5 two blocks", false, []string{"f2 48 05 00 00 00 ff ff ca c9 c9 07 00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecompressor(15, tt.takeover)
			for i, p := range tt.payloads {
				out, err := d.Inflate(nil, unhex(t, p), 0)
				if err != nil || string(out) != "Hello" {
					t.Fatalf("message %d (%s) inflated to %q, %v; want \"Hello\"", i, p, out, err)
				}
			}
		})
	}
	t.Run("7.2.3.6 an empty message", func(t *testing.T) {
		out, err := NewDecompressor(15, false).Inflate([]byte{}, []byte{0x00}, 0)
		if err != nil || len(out) != 0 {
			t.Fatalf("00 inflated to %q, %v", out, err)
		}
		if got := NewCompressor(0, 15, false).Compress(nil, nil); !bytes.Equal(got, []byte{0x00}) {
			t.Fatalf("an empty message compressed to %x, want 00", got)
		}
	})
}

func TestInflateReadsAnEmptyPayloadAsAnEmptyMessageAsZlibDoes(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		d := NewDecompressor(15, takeover)
		out, err := d.Inflate(nil, nil, 0)
		if err != nil || len(out) != 0 {
			t.Fatalf("takeover=%t: an empty payload inflated to %q, %v", takeover, out, err)
		}
		// The stream goes on.
		msg := []byte("after an empty payload")
		wire := NewCompressor(0, 15, false).Compress(nil, msg)
		if out, err := d.Inflate(nil, wire, 0); err != nil || !bytes.Equal(out, msg) {
			t.Fatalf("takeover=%t: next message inflated to %q, %v", takeover, out, err)
		}
	}
}

// TestCompressedMessagesDecodeWithIndependentDecoders checks the
// compressor's output against the RFC 1951 oracle and the standard
// library's decoder: each message ends where RFC 7692 7.2.1 says, and the
// farthest match stays within the window that was promised.
func TestCompressedMessagesDecodeWithIndependentDecoders(t *testing.T) {
	for _, bits := range []int{8, 9, 10, 12, 14, 15} {
		for _, takeover := range []bool{false, true} {
			t.Run(fmt.Sprintf("bits=%d/takeover=%t", bits, takeover), func(t *testing.T) {
				c := NewCompressor(0, bits, takeover)
				var msgs, wires [][]byte
				farthest := 0
				for i := range 40 {
					msg := sample(uint64(i%5), []int{0, 3, 100, 700, 3000, 20000, 50000}[i%7])
					wire := c.Compress(nil, msg)
					msgs, wires = append(msgs, msg), append(wires, wire)
					if !takeover {
						out, dist, err := oracleInflate(nil, withTails(wire))
						if err != nil || !bytes.Equal(out, msg) {
							t.Fatalf("message %d: the oracle decoded %d bytes, %v; want the %d sent", i, len(out), err, len(msg))
						}
						farthest = max(farthest, dist)
					}
					if i%9 == 8 {
						c.Idle()
					}
				}
				if takeover {
					out, dist, err := oracleInflate(nil, withTails(wires...))
					if err != nil || !bytes.Equal(out, bytes.Join(msgs, nil)) {
						t.Fatalf("the oracle decoded the stream to %d bytes, %v", len(out), err)
					}
					farthest = dist
				}
				if farthest > 1<<bits {
					t.Fatalf("a match reached %d bytes back; the window is %d", farthest, 1<<bits)
				}
				if farthest < 1<<bits/2 {
					t.Fatalf("no match reached beyond %d bytes: the test does not exercise the window of %d", farthest, 1<<bits)
				}
				// The standard library reads the same stream.
				stream := withTails(wires...)
				if !takeover {
					stream = withTails(wires[len(wires)-1])
					msgs = msgs[len(msgs)-1:]
				}
				r := stdflate.NewReader(io.MultiReader(bytes.NewReader(stream), bytes.NewReader([]byte{0x01, 0, 0, 0xff, 0xff})))
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, bytes.Join(msgs, nil)) {
					t.Fatalf("compress/flate decoded %d bytes, %v", len(got), err)
				}
			})
		}
	}
}

func TestTakeoverCarriesAThousandMessagesAcrossIdlePeriods(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{8, 11, 15} {
		c := NewCompressor(BestSpeed, bits, true)
		d := NewDecompressor(bits, true)
		var msgs, wires [][]byte
		var out []byte
		wireBytes, plainBytes := 0, 0
		for i := range 1000 {
			msg := sample(uint64(r.IntN(50)), r.IntN(3000))
			wire := c.Compress(nil, msg)
			var err error
			if out, err = d.Inflate(out[:0], wire, 0); err != nil || !bytes.Equal(out, msg) {
				t.Fatalf("bits %d, message %d: inflated %d bytes, %v; want %d", bits, i, len(out), err, len(msg))
			}
			msgs, wires = append(msgs, msg), append(wires, wire)
			wireBytes += len(wire)
			plainBytes += len(msg)
			if r.IntN(10) == 0 {
				c.Idle()
			}
			if r.IntN(10) == 0 {
				d.Idle()
			}
		}
		got, dist, err := oracleInflate(nil, withTails(wires...))
		if err != nil || !bytes.Equal(got, bytes.Join(msgs, nil)) || dist > 1<<bits {
			t.Fatalf("bits %d: the oracle decoded %d bytes (farthest match %d), %v", bits, len(got), dist, err)
		}
		t.Logf("bits %d: %d bytes sent as %d", bits, plainBytes, wireBytes)
	}
}

func TestTakeoverMakesARepeatedMessageAlmostFree(t *testing.T) {
	msg := []byte(`{"type":"quote","symbol":"ACME","bid":101.25,"ask":101.5}`)
	for _, takeover := range []bool{false, true} {
		c := NewCompressor(0, 15, takeover)
		first := len(c.Compress(nil, msg))
		c.Idle()
		second := len(c.Compress(nil, msg))
		if takeover && second > 8 {
			t.Fatalf("with takeover the second copy took %d bytes (the first %d)", second, first)
		}
		if !takeover && second != first {
			t.Fatalf("without takeover the second copy took %d bytes, the first %d", second, first)
		}
	}
}

func TestInflateStopsAtTheLimitWith1009(t *testing.T) {
	msg := sample(3, 100000)
	wire := CompressOnce(nil, msg, 0, 15)
	d := NewDecompressor(15, false)
	if out, err := d.Inflate(nil, wire, int64(len(msg))); err != nil || !bytes.Equal(out, msg) {
		t.Fatalf("a message of exactly the limit: %d bytes, %v", len(out), err)
	}
	dst := append(make([]byte, 0, 4096), "kept"...)
	out, err := d.Inflate(dst, wire, int64(len(msg)-1))
	if !errors.Is(err, ErrTooBig) {
		t.Fatalf("a message one byte over the limit: %v, want ErrTooBig", err)
	}
	var pe *frame.ProtocolError
	if !errors.As(err, &pe) || pe.Code != frame.CloseTooBig {
		t.Fatalf("error %v is not a 1009 *frame.ProtocolError", err)
	}
	if string(out) != "kept" {
		t.Fatalf("dst came back as %q, want its original content", out)
	}
	// A new stream works after the failure (the decoder went back clean).
	if out, err := NewDecompressor(15, true).Inflate(nil, wire, 0); err != nil || !bytes.Equal(out, msg) {
		t.Fatalf("after a failure: %d bytes, %v", len(out), err)
	}
}

// zipBomb returns one compressed message that inflates to n MiB of zeros:
// a first MiB compressed from nothing, then the same compressed MiB (which
// only refers back to zeros) repeated.
func zipBomb(t testing.TB, n int) []byte {
	var s sink
	w, err := flate.NewWriter(&s, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	_, _ = w.Write(zeros)
	_ = w.Flush()
	first := len(s.b)
	_, _ = w.Write(zeros)
	_ = w.Flush()
	chunk := bytes.Clone(s.b[first:])
	bomb := append(s.b[:first:first], bytes.Repeat(chunk, n-1)...)
	return bomb[:len(bomb)-len(tail)]
}

func TestAZipBombIsStoppedAtTheLimitHavingSpentAboutTheLimit(t *testing.T) {
	bomb := zipBomb(t, 1024) // 1 GiB of zeros
	t.Logf("%d compressed bytes inflate to 1 GiB", len(bomb))
	const limit = 1 << 20
	d := NewDecompressor(15, false)
	_, _ = d.Inflate(nil, []byte{0x00}, 0) // the pool has a decoder
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := d.Inflate(nil, bomb, limit)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooBig) || len(out) != 0 {
		t.Fatalf("Inflate = %d bytes, %v; want ErrTooBig", len(out), err)
	}
	spent := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d bytes for a limit of %d", spent, limit)
	// Growing by doubling up to the limit allocates at most twice the
	// limit in all; a decoder created because the pool was emptied by a
	// collection adds about 40 KiB.
	if spent > 2*limit+128<<10 {
		t.Fatalf("allocated %d bytes for a limit of %d", spent, limit)
	}
	// With a buffer big enough, nothing is allocated at all.
	dst := make([]byte, 0, limit)
	if out, err := d.Inflate(dst, bomb, limit); !errors.Is(err, ErrTooBig) || len(out) != 0 {
		t.Fatalf("into a buffer: %d bytes, %v", len(out), err)
	}
}

func TestInflateFailsCorruptDataWith1007AndSaysWhatIsWrong(t *testing.T) {
	tests := []struct{ name, payload, want string }{
		{"a reserved block type", "06", "reserved block type 3"},
		{"a stored block whose length check fails", "00 05 00 00 00 48 65 6c 6c 6f", "stored block length 5 does not match its complement 0"},
		{"a match before the start of the stream (RFC 7692 7.2.3.2 without its first message)", "f2 00 11 00 00", "distance 5 reaches before the start of the history"},
		{"too many literal/length codes", "fc ff ff ff", "288 literal/length codes and 32 distance codes, more than RFC 1951 has"},
		{"data after a final block does not count, but a bad final block does", "07", "reserved block type 3"},
		{"an over-subscribed code length code", "05 e0 93 24 49 92 24 49 92 00", "code length code: incomplete or over-subscribed Huffman code"},
		{"a fixed block's distance symbol 30", "4b 04 3e", "invalid distance symbol 30"},
		// A one-symbol code length code, and the code it lacks in the
		// message's last bits (the tail's): compress/flate and
		// klauspost/compress say corrupt too.
		{"a code missing from a one-symbol code in the last bits", "24 41 80", "invalid code length code"},
		{"another one in the last bits", "bc 5c 10", "invalid code length code"},
	}
	for _, tt := range tests {
		for _, takeover := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/takeover=%t", tt.name, takeover), func(t *testing.T) {
				d := NewDecompressor(15, takeover)
				out, err := d.Inflate([]byte("x"), unhex(t, tt.payload), 0)
				if !errors.Is(err, ErrCorrupt) || string(out) != "x" {
					t.Fatalf("Inflate = %q, %v; want ErrCorrupt", out, err)
				}
				var pe *frame.ProtocolError
				if !errors.As(err, &pe) || pe.Code != frame.CloseInvalidPayload || err.Error() != "deflate: corrupt message: "+tt.want {
					t.Fatalf("error %q, want 1007 and %q", err, tt.want)
				}
			})
		}
	}
}

func TestPooledCodecsCarryNoHistoryFromTheirLastConnection(t *testing.T) {
	msg := sample(9, 5000)
	for range 20 {
		// A connection with takeover puts its compressor back after Idle.
		c := NewCompressor(0, 15, true)
		c.Compress(nil, msg)
		c.Idle()
		// The next user of a compressor from the same pool starts empty:
		// a decoder without history reads its output.
		for _, wire := range [][]byte{NewCompressor(0, 15, false).Compress(nil, msg), CompressOnce(nil, msg, 0, 15), NewCompressor(0, 15, true).Compress(nil, msg)} {
			if out, _, err := oracleInflate(nil, withTails(wire)); err != nil || !bytes.Equal(out, msg) {
				t.Fatalf("a pooled compressor's output needs history: %v", err)
			}
		}
		// The same for decoders: one that inflated "Hello" with takeover
		// must not lend that history to the next connection.
		d := NewDecompressor(15, true)
		if _, err := d.Inflate(nil, unhex(t, "f2 48 cd c9 c9 07 00"), 0); err != nil {
			t.Fatal(err)
		}
		d.Idle()
		if out, err := NewDecompressor(15, false).Inflate(nil, unhex(t, "f2 00 11 00 00"), 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a fresh decoder inflated a reference to another connection's history: %q, %v", out, err)
		}
	}
}

func TestCompressOnceIsTheOutputOfAnyConnectionWithoutTakeoverAndSafeConcurrently(t *testing.T) {
	msg := sample(4, 4000)
	for _, bits := range []int{9, 15} {
		want := NewCompressor(0, bits, false).Compress(nil, msg)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := NewDecompressor(bits, g%2 == 0)
				for range 50 {
					wire := CompressOnce(nil, msg, 0, bits)
					if !bytes.Equal(wire, want) {
						t.Errorf("CompressOnce gave different bytes")
						return
					}
					if out, err := d.Inflate(nil, wire, 0); err != nil || !bytes.Equal(out, msg) {
						t.Errorf("a receiver inflated %d bytes, %v", len(out), err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

func TestConstructorsPanicOnArgumentsOutOfRange(t *testing.T) {
	for _, f := range []func(){
		func() { NewCompressor(10, 15, true) },
		func() { NewCompressor(-1, 15, true) },
		func() { NewCompressor(1, 7, true) },
		func() { NewCompressor(1, 16, false) },
		func() { NewDecompressor(16, false) },
		func() { CompressOnce(nil, nil, 1, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			f()
		}()
	}
}

func TestCodecsAllocateNothingInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	msg := sample(5, 1024)
	wire := CompressOnce(nil, msg, 0, 15)
	dst := make([]byte, 0, 64<<10)
	for _, takeover := range []bool{false, true} {
		c := NewCompressor(0, 15, takeover)
		d := NewDecompressor(15, takeover)
		cases := map[string]func(){
			"Compress": func() { dst = c.Compress(dst[:0], msg) },
			"Inflate": func() {
				var err error
				if dst, err = d.Inflate(dst[:0], wire, 1<<20); err != nil {
					t.Fatal(err)
				}
			},
		}
		if !takeover {
			cases["CompressOnce"] = func() { dst = CompressOnce(dst[:0], msg, 0, 15) }
		}
		for name, f := range cases {
			if n := testing.AllocsPerRun(100, f); n != 0 {
				t.Errorf("%s (takeover=%t) allocates %.1f times per message", name, takeover, n)
			}
		}
	}
}

func TestTakeoverStreamWrapsTheWindowManyTimesWithinAndAcrossMessages(t *testing.T) {
	const large = 64 << 10
	r := rand.New(rand.NewPCG(5, 6))
	c := NewCompressor(0, 15, true)
	d := NewDecompressor(15, true)
	for i := range 12 {
		// Random hex digits compress to about half: larger than the
		// window.
		big := make([]byte, 3*large)
		for k := range big {
			big[k] = "0123456789abcdef"[r.IntN(16)]
		}
		text := sample(uint64(i), 2000)
		big = append(big, text...)
		// A large message, then small ones that refer back into it, then
		// the large one again.
		msgs := [][]byte{big, text, sample(uint64(i+1), 500), big}
		for k, m := range msgs {
			wire := c.Compress(nil, m)
			if (k == 0 || k == 3) && len(wire) <= large {
				t.Fatalf("the large message compressed to %d bytes, within the window", len(wire))
			}
			if k == 1 && len(wire) > 100 {
				t.Fatalf("the repeat took %d bytes: it does not refer back", len(wire))
			}
			out, err := d.Inflate(nil, wire, 0)
			if err != nil || !bytes.Equal(out, m) {
				t.Fatalf("round %d, message %d: %d bytes, %v", i, k, len(out), err)
			}
		}
		if i%4 == 3 {
			d.Idle()
		}
	}
}

// A message compressed piece by piece inflates, with the standard
// library's inflater, to the pieces joined, with and without context
// takeover, and the messages around it still inflate (the stream stays in
// step).
func TestCompressPartInflatesToThePiecesJoined(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		c := NewCompressor(BestSpeed, MaxWindowBits, takeover)
		var stream bytes.Buffer // what a takeover peer's inflater sees
		inflate := func(msg []byte) []byte {
			if !takeover {
				stream.Reset()
			}
			stream.Write(msg)
			stream.Write(tail[:])
			r := stdflate.NewReader(bytes.NewReader(stream.Bytes()))
			out, _ := io.ReadAll(r) // ends at the unexpected EOF after the sync flush
			return out
		}
		var all []byte
		check := func(msg, want []byte) {
			got := inflate(msg)
			all = append(all, want...)
			if takeover {
				if !bytes.Equal(got, all) {
					t.Fatalf("takeover %v: stream inflates to %d bytes, want %d", takeover, len(got), len(all))
				}
			} else if !bytes.Equal(got, want) {
				t.Fatalf("takeover %v: message inflates to %q, want %q", takeover, got, want)
			}
		}
		check(c.Compress(nil, []byte("before the stream")), []byte("before the stream"))
		pieces := [][]byte{[]byte("one, "), bytes.Repeat([]byte("two "), 5000), nil, []byte("three")}
		var msg, want []byte
		for i, p := range pieces {
			msg = c.CompressPart(msg, p, i == len(pieces)-1)
			want = append(want, p...)
			c.Idle() // never gives back a compressor in the middle of a message
		}
		check(msg, want)
		check(c.Compress(nil, []byte("after the stream")), []byte("after the stream"))
	}
}
