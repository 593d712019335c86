package rally

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/rallyws/rally/frame"
)

// The benchmarks run over a Unix socket pair: an in-memory connection that
// takes the same code path as TCP (non-blocking system calls on the socket).

var benchSizes = []int{16, 1 << 10, 16 << 10, 64 << 10}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// socketPair returns two connected in-memory sockets.
func socketPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	a, fd := socketPairFD(tb)
	f := os.NewFile(uintptr(fd), "socketpair")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	return a, c
}

// socketPairFD is socketPair with the second end left a bare descriptor,
// so that the memory benchmarks count nothing of the peer's side.
func socketPairFD(tb testing.TB) (net.Conn, int) {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "socketpair")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	return c, fds[1]
}

// clientFrames returns n client frames (masked) of a text message of size
// bytes, back to back.
func clientFrames(size, n int) []byte {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	return maskedFrames(frame.Header{Fin: true, Opcode: frame.OpText}, payload, n)
}

// maskedFrames returns n copies of the frame h with body, masked as a
// client sends it.
func maskedFrames(h frame.Header, body []byte, n int) []byte {
	h.Masked, h.Mask, h.Length = true, [4]byte{1, 2, 3, 4}, int64(len(body))
	var out []byte
	for range n {
		out = frame.Append(out, h)
		start := len(out)
		out = append(out, body...)
		frame.Mask(h.Mask, 0, out[start:])
	}
	return out
}

// feed writes frames to w over and over until w fails.
func feed(w net.Conn, frames []byte) {
	for {
		if _, err := w.Write(frames); err != nil {
			return
		}
	}
}

func benchServerConn(b *testing.B, size int) (*Conn, func()) {
	a, peer := socketPair(b)
	c := newConn(a, nil, true, "", nil)
	batch := max(1, (256<<10)/(size+14))
	go feed(peer, clientFrames(size, batch))
	return c, func() { c.CloseNow(); peer.Close() }
}

func BenchmarkConnReadAppend(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			c, stop := benchServerConn(b, size)
			defer stop()
			ctx := context.Background()
			buf := make([]byte, 0, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, p, err := c.ReadAppend(ctx, buf[:0])
				if err != nil || len(p) != size {
					b.Fatal(err, len(p))
				}
			}
		})
	}
}

func BenchmarkConnRead(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			c, stop := benchServerConn(b, size)
			defer stop()
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, p, err := c.Read(ctx)
				if err != nil || len(p) != size {
					b.Fatal(err, len(p))
				}
			}
		})
	}
}

func BenchmarkConnReader(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			c, stop := benchServerConn(b, size)
			defer stop()
			ctx := context.Background()
			buf := make([]byte, 4096)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_, r, err := c.Reader(ctx)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					k, err := r.Read(buf)
					n += k
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if n != size {
					b.Fatal(n)
				}
			}
		})
	}
}

func BenchmarkServerHandler(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			a, peer := socketPair(b)
			defer peer.Close()
			benchmarkServe(b, newConn(a, nil, true, "", nil), peer, size, clientFrames(size, max(1, (256<<10)/(size+14))))
		})
	}
}

// benchmarkServe serves c with a Server whose Message callback counts b.N
// messages of size bytes, which a goroutine writes to peer as frames over
// and over.
func benchmarkServe(b *testing.B, c *Conn, peer net.Conn, size int, frames []byte) {
	c.rd.served = true
	done := make(chan struct{})
	n := 0
	s := &Server{Message: func(c *Conn, typ MessageType, p []byte) {
		if len(p) != size {
			panic("wrong size")
		}
		if n++; n == b.N {
			close(done)
		}
	}}
	go feed(peer, frames)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	go c.serve(s)
	<-done
	b.StopTimer()
	c.CloseNow()
}

func BenchmarkConnWrite(b *testing.B) {
	for _, side := range []string{"server", "client"} {
		for _, size := range benchSizes {
			b.Run(side+"/"+sizeName(size), func(b *testing.B) {
				a, peer := socketPair(b)
				c := newConn(a, nil, side == "server", "", nil)
				go io.Copy(io.Discard, peer)
				defer func() { c.CloseNow(); peer.Close() }()
				ctx := context.Background()
				p := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := c.Write(ctx, Binary, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkIdleConnMemory opens served connections that stay idle and
// reports the Go memory (heap and stacks) each one costs on the server side.
func BenchmarkIdleConnMemory(b *testing.B) {
	const n = 2000
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conns := make([]*Conn, 0, n)
		peers := make([]int, 0, n)
		s := &Server{}
		for range n {
			nc, peer := socketPairFD(b)
			c := newConn(nc, nil, true, "", nil)
			c.rd.served = true
			go c.serve(s)
			conns = append(conns, c)
			peers = append(peers, peer)
		}
		// Let every reader park, then measure.
		for range 3 {
			runtime.Gosched()
			runtime.GC()
		}
		runtime.ReadMemStats(&after)
		heap := after.HeapInuse - before.HeapInuse
		stack := after.StackInuse - before.StackInuse
		b.ReportMetric(float64(heap+stack)/n, "bytes/conn")
		b.ReportMetric(float64(heap)/n, "heap-bytes/conn")
		b.ReportMetric(float64(stack)/n, "stack-bytes/conn")
		for i, c := range conns {
			c.CloseNow()
			syscall.Close(peers[i])
		}
	}
}
