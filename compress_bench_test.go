package rally

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rallyws/rally/deflate"
	"github.com/rallyws/rally/frame"
)

// The compression benchmarks run over a Unix socket pair, as the others in
// this package do, with permessage-deflate set up as a handshake would
// have negotiated it.

// benchJSON returns a JSON message of about n bytes, of the kind a chat or
// a market feed sends (keys repeat, values vary).
func benchJSON(seed, n int) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"update","items":[`)
	for i := 0; b.Len() < n-40; i++ {
		x := uint32(seed*7919+i)*2654435761 + 12345
		fmt.Fprintf(&b, `{"id":%d,"user":"user%d","price":%d.%02d,"ok":%v},`, x%100000, x%97, x%5000, x%100, x%2 == 0)
	}
	b.WriteString(`{}]}`)
	return []byte(b.String())
}

// benchText returns n bytes of prose-like text.
func benchText(n int) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near old harbour walls and every sailor counts ropes")
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		x := uint32(i)*2654435761 + 7
		b.WriteString(words[x%uint32(len(words))])
		if x%11 == 0 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return []byte(b.String()[:n])
}

// benchMessages are the payloads of the compression benchmarks.
var benchMessages = []struct {
	name    string
	payload []byte
}{
	{"JSON1KiB", benchJSON(1, 1<<10)},
	{"Text64KiB", benchText(64 << 10)},
}

// benchModes are the negotiated parameters measured: context kept in
// both directions (the default of browsers and npm ws), and none kept.
var benchModes = []struct {
	name   string
	params deflate.Params
}{
	{"Takeover", deflate.Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}},
	{"NoContextTakeover", deflate.Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}},
}

// compressedClientFrames returns n masked client frames of payload, each
// compressed on its own (which a receiver keeping context inflates too).
func compressedClientFrames(payload []byte, n int) []byte {
	body := deflate.CompressOnce(nil, payload, deflate.DefaultLevel, 15)
	return maskedFrames(frame.Header{Fin: true, Rsv: frame.Rsv1, Opcode: frame.OpText}, body, n)
}

// BenchmarkCompressedConnWrite is Write of a message that goes out
// compressed (the threshold is below it in every mode).
func BenchmarkCompressedConnWrite(b *testing.B) {
	for _, mode := range benchModes {
		for _, msg := range benchMessages {
			b.Run(mode.name+"/"+msg.name, func(b *testing.B) {
				a, peer := socketPair(b)
				c := newConn(a, nil, true, "", nil)
				c.enableCompression(&CompressionOptions{}, mode.params)
				go io.Copy(io.Discard, peer)
				defer func() { c.CloseNow(); peer.Close() }()
				ctx := context.Background()
				b.SetBytes(int64(len(msg.payload)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := c.Write(ctx, Text, msg.payload); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCompressedConnReadAppend is ReadAppend of a compressed message
// into the caller's buffer.
func BenchmarkCompressedConnReadAppend(b *testing.B) {
	for _, mode := range benchModes {
		for _, msg := range benchMessages {
			b.Run(mode.name+"/"+msg.name, func(b *testing.B) {
				a, peer := socketPair(b)
				c := newConn(a, nil, true, "", nil)
				c.enableCompression(&CompressionOptions{}, mode.params)
				go feed(peer, compressedClientFrames(msg.payload, max(1, (256<<10)/len(msg.payload))))
				defer func() { c.CloseNow(); peer.Close() }()
				ctx := context.Background()
				buf := make([]byte, 0, len(msg.payload))
				b.SetBytes(int64(len(msg.payload)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					_, p, err := c.ReadAppend(ctx, buf[:0])
					if err != nil || len(p) != len(msg.payload) {
						b.Fatal(err, len(p))
					}
				}
			})
		}
	}
}

// BenchmarkCompressedServerHandler is a Server's Message callback for
// compressed messages.
func BenchmarkCompressedServerHandler(b *testing.B) {
	for _, mode := range benchModes {
		for _, msg := range benchMessages {
			b.Run(mode.name+"/"+msg.name, func(b *testing.B) {
				a, peer := socketPair(b)
				defer peer.Close()
				c := newConn(a, nil, true, "", nil)
				c.enableCompression(&CompressionOptions{}, mode.params)
				benchmarkServe(b, c, peer, len(msg.payload), compressedClientFrames(msg.payload, max(1, (256<<10)/len(msg.payload))))
			})
		}
	}
}

// BenchmarkIdleCompressedConnMemory is BenchmarkIdleConnMemory for
// connections that negotiated permessage-deflate, each having received
// and sent one compressed message before going idle, as a chat client
// does. "Uncompressed" is the same traffic without the extension.
func BenchmarkIdleCompressedConnMemory(b *testing.B) {
	const n = 1000
	modes := append([]struct {
		name   string
		params deflate.Params
	}{{"Uncompressed", deflate.Params{}}}, benchModes...)
	modes = append(modes, struct {
		name   string
		params deflate.Params
	}{"TakeoverWindow9", deflate.Params{ServerMaxWindowBits: 9, ClientMaxWindowBits: 9}})
	payload := benchJSON(2, 1<<10)
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			in := compressedClientFrames(payload, 1)
			if mode.name == "Uncompressed" {
				in = clientFrames(len(payload), 1)
			}
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				var wg sync.WaitGroup
				wg.Add(n)
				s := &Server{Message: func(*Conn, MessageType, []byte) { wg.Done() }}
				conns := make([]*Conn, 0, n)
				peers := make([]int, 0, n)
				for range n {
					nc, peer := socketPairFD(b)
					c := newConn(nc, nil, true, "", nil)
					if mode.name != "Uncompressed" {
						c.enableCompression(&CompressionOptions{Threshold: -1}, mode.params)
					}
					// The server sends first, then reads the client's
					// message and goes idle (giving pooled state back).
					if err := c.Write(context.Background(), Text, payload); err != nil {
						b.Fatal(err)
					}
					if _, err := syscall.Write(peer, in); err != nil {
						b.Fatal(err)
					}
					c.drive()
					go c.serve(s)
					conns = append(conns, c)
					peers = append(peers, peer)
				}
				wg.Wait()
				// Let every reader park, then measure.
				for range 5 {
					runtime.Gosched()
					runtime.GC()
				}
				runtime.ReadMemStats(&after)
				heap := after.HeapInuse - before.HeapInuse
				stack := after.StackInuse - before.StackInuse
				b.ReportMetric(float64(heap+stack)/n, "bytes/conn")
				b.ReportMetric(float64(heap)/n, "heap-bytes/conn")
				for i, c := range conns {
					c.CloseNow()
					syscall.Close(peers[i])
				}
			}
		})
	}
}
