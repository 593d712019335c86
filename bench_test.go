package rally

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
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
	c.drive()
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
			c.drive()
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

// BenchmarkIdleConnMemoryWithHandshake opens connections the way a
// server gets them (a handshake over TCP answered by a Server behind
// net/http), holds them idle, and reports per connection: the live Go
// heap (heap-bytes/conn, after collections) and the memory the heap
// retained while they opened (retained-bytes/conn: the growth of heap
// memory not given back to the system, with the garbage of the handshakes
// and the collector's headroom, before any forced collection: what the
// process's resident memory sees), plus stacks. The client ends are bare
// descriptors (no Go memory). Run it with -benchtime 1x. The "serve"
// case answers the handshakes with Server.Serve on the listener instead
// of net/http.
func BenchmarkIdleConnMemoryWithHandshake(b *testing.B) {
	b.Run("goroutine/net-http", func(b *testing.B) { benchmarkIdleHTTP(b, false, false) })
	b.Run("event-loop/net-http", func(b *testing.B) { benchmarkIdleHTTP(b, true, false) })
	b.Run("event-loop/serve", func(b *testing.B) { benchmarkIdleHTTP(b, true, true) })
}

func benchmarkIdleHTTP(b *testing.B, loop, raw bool) {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	n := min(5000, int(lim.Cur-300)/2) // each connection is two descriptors here
	for range b.N {
		var opened sync.WaitGroup
		s := &Server{EventLoop: loop, Open: func(*Conn) { opened.Done() }}
		var addr *net.TCPAddr
		stop := func() {}
		if raw {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go s.Serve(ln)
			addr, stop = ln.Addr().(*net.TCPAddr), func() { ln.Close() }
		} else {
			ts := httptest.NewServer(s)
			addr, stop = ts.Listener.Addr().(*net.TCPAddr), ts.Close
		}
		dial := func() int {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: addr.Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				b.Fatal(err)
			}
			req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
			if _, err := syscall.Write(fd, []byte(req)); err != nil {
				b.Fatal(err)
			}
			var resp [512]byte
			got := 0
			for !bytes.Contains(resp[:got], []byte("\r\n\r\n")) {
				k, err := syscall.Read(fd, resp[got:])
				if err != nil || k <= 0 {
					b.Fatalf("reading the 101: %v", err)
				}
				got += k
			}
			return fd
		}
		// One connection first, so that the loops, their buffers and the
		// HTTP server's own state are not counted.
		opened.Add(1)
		peers := []int{dial()}
		opened.Wait()
		debug.FreeOSMemory() // what the heap retains from now on, it touched for these connections
		var before, held, live runtime.MemStats
		runtime.ReadMemStats(&before)
		peers = slices.Grow(peers, n)
		opened.Add(n)
		for range n {
			peers = append(peers, dial())
		}
		opened.Wait()
		runtime.ReadMemStats(&held)
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&live)
		retained := func(m *runtime.MemStats) int64 { return int64(m.HeapSys - m.HeapReleased) }
		b.ReportMetric(float64(retained(&held)-retained(&before))/float64(n), "retained-bytes/conn")
		b.ReportMetric(float64(int64(live.HeapInuse)-int64(before.HeapInuse))/float64(n), "heap-bytes/conn")
		b.ReportMetric(float64(int64(live.StackInuse)-int64(before.StackInuse))/float64(n), "stack-bytes/conn")
		for _, fd := range peers {
			syscall.Close(fd)
		}
		s.Shutdown(b.Context())
		stop()
	}
}
