package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/rallyws/rally/frame"
)

// inflateChunks inflates one message fed as chunks, the last one marked
// last, appending its output to dst; it checks that no piece is empty or
// longer than MaxPiece.
func inflateChunks(t testing.TB, d *Decompressor, dst []byte, chunks ...[]byte) ([]byte, error) {
	t.Helper()
	for i, c := range chunks {
		d.Feed(c, i == len(chunks)-1)
		for {
			p, err := d.Next()
			if err != nil {
				return dst, err
			}
			if p == nil {
				break
			}
			if len(p) == 0 || len(p) > MaxPiece {
				t.Fatalf("Next returned a piece of %d bytes", len(p))
			}
			dst = append(dst, p...)
		}
	}
	return dst, nil
}

// splitEvery cuts b into pieces of n bytes (the last one shorter).
func splitEvery(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// stdCompress compresses msg with the standard library's compress/flate
// (a second, independent encoder) at level, sync-flushed, without the
// tail, as a permessage-deflate sender does.
func stdCompress(t testing.TB, w *stdflate.Writer, buf *bytes.Buffer, msg []byte) []byte {
	t.Helper()
	buf.Reset()
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	out := bytes.Clone(buf.Bytes())
	if !bytes.HasSuffix(out, tail[:]) {
		t.Fatalf("a sync flush ends with %x", out[max(0, len(out)-4):])
	}
	return out[:len(out)-len(tail)]
}

func TestNextInflatesAMessageFedInChunksOfEverySize(t *testing.T) {
	msgs := [][]byte{sample(1, 70000), []byte("Hello"), sample(2, 3000), {}, bytes.Repeat([]byte("ab"), 40000)}
	for _, takeover := range []bool{false, true} {
		for _, size := range []int{1, 2, 3, 7, 64, 1000, 1 << 20} {
			t.Run(fmt.Sprintf("takeover=%t/chunk=%d", takeover, size), func(t *testing.T) {
				c := NewCompressor(BestCompression, 15, takeover)
				d := NewDecompressor(15, takeover)
				for i, m := range msgs {
					wire := c.Compress(nil, m)
					out, err := inflateChunks(t, d, nil, splitEvery(wire, size)...)
					if err != nil || !bytes.Equal(out, m) {
						t.Fatalf("message %d: %d bytes back (want %d), %v", i, len(out), len(m), err)
					}
					if i == 2 {
						d.Idle()
					}
				}
			})
		}
	}
}

func TestIdleInTheMiddleOfAMessageKeepsItsState(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		c := NewCompressor(0, 15, takeover)
		d := NewDecompressor(15, takeover)
		for i := range 3 {
			m := sample(uint64(i), 50000)
			wire := c.Compress(nil, m)
			var out []byte
			for k, chunk := range splitEvery(wire, 1000) {
				d.Feed(chunk, k == len(wire)/1000)
				for {
					p, err := d.Next()
					if err != nil {
						t.Fatal(err)
					}
					if p == nil {
						break
					}
					out = append(out, p...)
				}
				d.Idle() // the reader waits for the next frame
			}
			if !bytes.Equal(out, m) {
				t.Fatalf("takeover=%t message %d: %d bytes back, want %d", takeover, i, len(out), len(m))
			}
		}
	}
}

func TestACompressedTextMessageFailsAtItsFirstBadByteAfterItsFirstFrame(t *testing.T) {
	// 16 MiB of text with an invalid byte in its first KiB, sent in
	// frames of 4 KiB of compressed payload.
	const size = 16 << 20
	msg := bytes.Repeat([]byte("all good text, "), size/15+1)[:size]
	msg[700] = 0xff
	wire := CompressOnce(nil, msg, BestSpeed, 15)
	frames := splitEvery(wire, 4096)
	t.Logf("%d MiB compress to %d bytes, %d frames", len(msg)>>20, len(wire), len(frames))

	d := NewDecompressor(15, false)
	var v frame.UTF8
	inflated, fed := 0, 0
	bad := -1
	for k, f := range frames {
		d.Feed(f, k == len(frames)-1)
		fed++
		for bad < 0 {
			p, err := d.Next()
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				break
			}
			if i := v.Feed(p); i >= 0 {
				bad = inflated + i
			}
			inflated += len(p)
		}
		if bad >= 0 {
			d.Abort()
			break
		}
	}
	if bad != 700 || fed != 1 || inflated > MaxPiece {
		t.Fatalf("bad byte found at %d after %d of %d frames and %d inflated bytes; want 700 after the first frame and at most %d bytes", bad, fed, len(frames), inflated, MaxPiece)
	}
}

func TestAZipBombFedInFramesIsStoppedAtTheLimitHavingAllocatedAlmostNothing(t *testing.T) {
	bomb := zipBomb(t, 1024) // 1 GiB of zeros
	const limit = 1 << 20
	d := NewDecompressor(15, false)
	_, _ = d.Inflate(nil, []byte{0x00}, 0) // the pool has a decoder
	frames := splitEvery(bomb, 16<<10)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	total, fed := 0, 0
	stopped := false
	for k, f := range frames {
		d.Feed(f, k == len(frames)-1)
		fed++
		for {
			p, err := d.Next()
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				break
			}
			if total+len(p) > limit {
				stopped = true
				break
			}
			total += len(p)
		}
		if stopped {
			d.Abort()
			break
		}
	}
	runtime.ReadMemStats(&after)
	spent := after.TotalAlloc - before.TotalAlloc
	t.Logf("stopped after %d of %d frames, %d bytes accepted, %d bytes allocated", fed, len(frames), total, spent)
	if !stopped || total > limit || fed > 2 {
		t.Fatalf("stopped %t after %d frames with %d bytes, want a stop at the limit %d within the first frames", stopped, fed, total, limit)
	}
	// A decoder created because a collection emptied the pool is about
	// 40 KiB; nothing else is allocated.
	if spent > 64<<10 {
		t.Fatalf("allocated %d bytes to stop a zip bomb", spent)
	}
}

func TestStreamingAllocatesNothingPerMessageInSteadyState(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	msg := sample(5, 20000)
	for _, takeover := range []bool{false, true} {
		// The first message of a stream: with takeover, fed again and
		// again, it only refers to itself, so it decodes on any history.
		wire := NewCompressor(0, 15, takeover).Compress(nil, msg)
		d := NewDecompressor(15, takeover)
		frames := splitEvery(wire, 1000)
		n := testing.AllocsPerRun(100, func() {
			for k, f := range frames {
				d.Feed(f, k == len(frames)-1)
				for {
					p, err := d.Next()
					if err != nil {
						t.Fatal(err)
					}
					if p == nil {
						break
					}
				}
			}
			if takeover {
				d.Idle()
			}
		})
		if n != 0 {
			t.Errorf("takeover=%t: %.1f allocations per message", takeover, n)
		}
	}
}

// FuzzInflateAtEverySplit feeds hostile payloads to the streaming
// decoder cut in two at every point, and in chunks of every size up to
// 16: each way must give exactly what inflating the message whole gives
// (output and verdict), and when compress/flate (the standard library's
// decoder, independent of ours) decodes the message cleanly, the same
// output.
func FuzzInflateAtEverySplit(f *testing.F) {
	for _, s := range []string{
		"f2 48 cd c9 c9 07 00", "00 05 00 fa ff 48 65 6c 6c 6f 00", "f3 48 cd c9 c9 07 00 00",
		"f2 48 05 00 00 00 ff ff ca c9 c9 07 00", "00", "", "06", "fc ff ff ff", "f2 00 11 00 00", "4b 04 3e",
	} {
		f.Add(unhex(f, s))
	}
	f.Add(CompressOnce(nil, sample(1, 3000), 1, 9))
	f.Add(CompressOnce(nil, sample(2, 500), 9, 15))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Every split of a message inflating to the limit is a lot of
		// work: both stay small, so that the fuzzer explores.
		if len(data) > 1024 {
			return
		}
		const limit = 32 << 10
		whole, wholeErr := NewDecompressor(15, false).Inflate(nil, data, limit)
		if wholeErr != nil && !errors.Is(wholeErr, ErrCorrupt) && !errors.Is(wholeErr, ErrTooBig) {
			t.Fatalf("Inflate: unexpected error %v", wholeErr)
		}
		if errors.Is(wholeErr, ErrTooBig) {
			return
		}
		check := func(how string, chunks ...[]byte) {
			out, err := inflateChunks(t, NewDecompressor(15, false), nil, chunks...)
			if (err != nil) != (wholeErr != nil) || (err == nil && !bytes.Equal(out, whole)) {
				t.Fatalf("%s: %d bytes, %v; whole: %d bytes, %v", how, len(out), err, len(whole), wholeErr)
			}
		}
		for k := 0; k <= len(data); k++ {
			check(fmt.Sprintf("cut at %d", k), data[:k:k], data[k:])
		}
		for n := 1; n <= 16 && n < len(data); n++ {
			check(fmt.Sprintf("chunks of %d", n), splitEvery(data, n)...)
		}
		if wholeErr != nil {
			return
		}
		// The standard library reads the message and its tail; a stream
		// that is not ended by a final block ends in io.ErrUnexpectedEOF
		// there, which is how every message without one ends.
		ref, err := io.ReadAll(io.LimitReader(stdflate.NewReader(bytes.NewReader(withTails(data))), limit+1))
		if (err == nil || errors.Is(err, io.ErrUnexpectedEOF)) && len(ref) <= limit && !bytes.Equal(ref, whole) {
			t.Fatalf("compress/flate gives %d bytes (%v), we give %d", len(ref), err, len(whole))
		}
	})
}

// FuzzStreamingRoundTrip compresses messages with compress/flate at every
// level, two messages on one stream (context takeover) or each alone,
// and inflates them fed at every split point.
func FuzzStreamingRoundTrip(f *testing.F) {
	f.Add([]byte("Hello, Hello, Hello"), int8(1), true)
	f.Add(sample(3, 1500), int8(-2), false)
	f.Add(sample(4, 1200), int8(9), true)
	f.Add(bytes.Repeat([]byte{0}, 2000), int8(0), true)
	f.Fuzz(func(t *testing.T, data []byte, level int8, takeover bool) {
		if len(data) > 1024 {
			return
		}
		l := (int(level)%12+12)%12 - 2 // -2 (Huffman only) to 9
		var buf bytes.Buffer
		w, err := stdflate.NewWriter(&buf, l)
		if err != nil {
			t.Fatal(err)
		}
		msgs := [][]byte{data, data[len(data)/3:]}
		var wires [][]byte
		for _, m := range msgs {
			if !takeover {
				w.Reset(&buf)
			}
			wires = append(wires, stdCompress(t, w, &buf, m))
		}
		for k := 0; k <= len(wires[0]); k++ {
			d := NewDecompressor(15, takeover)
			out, err := inflateChunks(t, d, nil, wires[0][:k:k], wires[0][k:])
			if err != nil || !bytes.Equal(out, msgs[0]) {
				t.Fatalf("level %d, cut at %d of %d: %d bytes back (want %d), %v", l, k, len(wires[0]), len(out), len(msgs[0]), err)
			}
			j := k % (len(wires[1]) + 1)
			if k%2 == 0 {
				d.Idle()
			}
			out, err = inflateChunks(t, d, nil, wires[1][:j:j], wires[1][j:])
			if err != nil || !bytes.Equal(out, msgs[1]) {
				t.Fatalf("level %d, second message cut at %d: %d bytes back (want %d), %v", l, j, len(out), len(msgs[1]), err)
			}
		}
	})
}

func TestFeedBeforeNextHasEndedTheLastChunkPanics(t *testing.T) {
	wire := CompressOnce(nil, sample(1, 5000), 0, 15)
	for _, readPiece := range []bool{false, true} {
		t.Run(fmt.Sprintf("piece read=%t", readPiece), func(t *testing.T) {
			d := NewDecompressor(15, false)
			d.Feed(wire, true)
			if readPiece {
				// The message's one piece, but not yet the nil that ends it.
				if p, err := d.Next(); len(p) != 5000 || err != nil {
					t.Fatalf("Next = %d bytes, %v", len(p), err)
				}
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Feed did not panic")
				}
			}()
			d.Feed(wire, true)
		})
	}
}

func TestEachPartOfAMessageCompressedInPartsInflatesWhenItArrives(t *testing.T) {
	parts := [][]byte{sample(1, 3000), []byte("short"), {}, sample(2, 40000), sample(3, 10)}
	for _, takeover := range []bool{false, true} {
		c := NewCompressor(BestSpeed, 15, takeover)
		d := NewDecompressor(15, takeover)
		for round := range 3 {
			for i, p := range parts {
				final := i == len(parts)-1
				// What the peer has received of the message so far comes
				// out of the decoder as this part arrives, all of it.
				d.Feed(c.CompressPart(nil, p, final), final)
				var got []byte
				for {
					piece, err := d.Next()
					if err != nil {
						t.Fatalf("takeover=%t round %d part %d: %v", takeover, round, i, err)
					}
					if piece == nil {
						break
					}
					got = append(got, piece...)
				}
				if !bytes.Equal(got, p) {
					t.Fatalf("takeover=%t round %d part %d: %d bytes out, want the part's %d", takeover, round, i, len(got), len(p))
				}
			}
			if round == 1 {
				d.Idle()
				c.Idle()
			}
		}
	}
}
