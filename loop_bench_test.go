//go:build linux

package rally

import (
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// adoptPair makes a served connection over a Unix socket pair, hands it
// to s's event loops and returns it with the peer's descriptor.
func adoptPair(tb testing.TB, s *Server, bare bool) (*Conn, net.Conn, int) {
	tb.Helper()
	var nc, peer net.Conn
	fd := -1
	if bare {
		nc, fd = socketPairFD(tb)
	} else {
		nc, peer = socketPair(tb)
	}
	c := newConn(nc, nil, true, "", nil)
	c.drive()
	s.set.begin()
	if !s.set.commit(c) {
		tb.Fatal("server shut down")
	}
	if !s.loops.adopt(s, c) {
		tb.Fatal("the event loop did not adopt the connection")
	}
	return c, peer, fd
}

// BenchmarkEventLoopIdleConnMemory opens TCP connections served by event
// loops that stay idle and reports the Go memory (heap and stacks) each
// costs on the server side, and the size of the structures it holds. The
// client ends are bare descriptors (no Go memory); run it with
// -benchtime 1x. "keepalive" sets a ping interval and an idle timeout,
// which the loop's sweep looks after (no timer per connection).
func BenchmarkEventLoopIdleConnMemory(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchmarkLoopIdle(b, nil) })
	b.Run("keepalive", func(b *testing.B) {
		benchmarkLoopIdle(b, &ConnOptions{PingInterval: time.Minute, IdleTimeout: 2 * time.Minute})
	})
}

func benchmarkLoopIdle(b *testing.B, opts *ConnOptions) {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	n := min(10000, int(lim.Cur-300)/2) // each connection is two descriptors here
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	dial := func() int {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			b.Fatal(err)
		}
		return fd
	}
	adopt := func(s *Server) *Conn {
		nc, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		c := newConn(nc, nil, true, "", opts)
		c.drive()
		s.set.begin()
		s.set.commit(c)
		if !s.loops.adopt(s, c) {
			b.Fatal("the event loop did not adopt the connection")
		}
		return c
	}
	for range b.N {
		var opened sync.WaitGroup
		s := &Server{EventLoop: true, Open: func(*Conn) { opened.Done() }}
		// One connection first, so that the loops and their buffers are
		// not counted.
		opened.Add(1)
		firstPeer := dial()
		first := adopt(s)
		opened.Wait()
		peers := make([]int, 0, n)
		conns := make([]*Conn, 0, n)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		opened.Add(n)
		for range n {
			peers = append(peers, dial())
			conns = append(conns, adopt(s))
		}
		opened.Wait()
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&after)
		heap := int64(after.HeapInuse) - int64(before.HeapInuse) - int64(cap(conns)+cap(peers))*8
		stack := int64(after.StackInuse) - int64(before.StackInuse)
		b.ReportMetric(float64(heap+stack)/float64(n), "bytes/conn")
		b.ReportMetric(float64(heap)/float64(n), "heap-bytes/conn")
		b.ReportMetric(float64(unsafe.Sizeof(Conn{})), "sizeof-Conn")
		b.ReportMetric(float64(unsafe.Sizeof(loopTransport{})), "sizeof-loopTransport")
		b.ReportMetric(float64(n), "conns")
		for i, c := range conns {
			c.CloseNow()
			syscall.Close(peers[i])
		}
		first.CloseNow()
		syscall.Close(firstPeer)
		s.Shutdown(b.Context())
	}
}

// BenchmarkEventLoopEcho has a loop-served connection echo each message it
// gets (Write from the Message callback) while a goroutine feeds it frames
// and another drains the echoes. It reports the write system calls per
// echoed message, and the read system calls: a message of 16 or 64 KiB
// that has arrived whole is read whole, in one read with the messages
// after it, not cut by the end of the loop's buffer and gathered.
func BenchmarkEventLoopEcho(b *testing.B) {
	for _, size := range []int{16, 1 << 10, 16 << 10, 64 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			s := &Server{EventLoop: true, EventLoops: 1, Message: func(c *Conn, typ MessageType, p []byte) {
				c.Write(b.Context(), typ, p)
			}}
			c, peer, _ := adoptPair(b, s, false)
			go feed(peer, clientFrames(size, max(1, (64<<10)/(size+14))))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			w0, r0 := loopWriteCalls(), loopReadCalls()
			b.ResetTimer()
			readFrames(b, peer, size, b.N)
			b.StopTimer()
			b.ReportMetric(float64(loopWriteCalls()-w0)/float64(b.N), "writes/msg")
			b.ReportMetric(float64(loopReadCalls()-r0)/float64(b.N), "reads/msg")
			c.CloseNow()
			peer.Close()
			s.Shutdown(b.Context())
		})
	}
}

// readFrames reads n unmasked server frames of size payload bytes from
// peer.
func readFrames(tb testing.TB, peer net.Conn, size, n int) {
	h := frameHeaderSize(size)
	want := int64(n) * int64(h+size)
	buf := make([]byte, 64<<10)
	for got := int64(0); got < want; {
		k, err := peer.Read(buf[:min(int64(len(buf)), want-got)])
		if err != nil {
			tb.Fatal(err)
		}
		got += int64(k)
	}
}

// frameHeaderSize is the size of a server frame's header for a payload of n bytes.
func frameHeaderSize(n int) int {
	return frameSize(n, false) - n
}

// BenchmarkEventLoopChatFanout is a chat room: sender connections get
// messages, and the Message callback sends each to every receiver
// connection. b.N counts deliveries (one message reaching one receiver).
// "loop" serves them all from one event loop, and reports the write
// system calls per delivery, which the loop's per-turn gathering brings
// below one: a receiver gets one write per turn, whatever the number of
// messages of the turn. "goroutines" is goroutine mode, each receiver
// joining the sender's cork (JoinCork) as pubsub does.
func BenchmarkEventLoopChatFanout(b *testing.B) {
	b.Run("loop", func(b *testing.B) { benchmarkChat(b, true) })
	b.Run("goroutines", func(b *testing.B) { benchmarkChat(b, false) })
}

func benchmarkChat(b *testing.B, loop bool) {
	const senders, receivers, size = 4, 32, 16
	var rcv []*Conn
	s := &Server{EventLoop: loop, EventLoops: 1}
	s.Message = func(c *Conn, typ MessageType, p []byte) {
		for _, r := range rcv {
			r.JoinCork(c)
			r.Send(typ, p)
		}
	}
	open := func() (*Conn, net.Conn) {
		if loop {
			c, peer, _ := adoptPair(b, s, false)
			return c, peer
		}
		nc, peer := socketPair(b)
		c := newConn(nc, nil, true, "", nil)
		c.drive()
		s.set.begin()
		s.set.commit(c)
		go c.serve(s)
		return c, peer
	}
	var rpeers, speers []net.Conn
	for range receivers {
		c, peer := open()
		rcv = append(rcv, c)
		rpeers = append(rpeers, peer)
	}
	var snd []*Conn
	for range senders {
		c, peer := open()
		snd = append(snd, c)
		speers = append(speers, peer)
	}
	b.ReportAllocs()
	w0 := loopWriteCalls()
	per := (b.N + receivers - 1) / receivers // messages, each to every receiver
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, p := range rpeers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readFrames(b, p, size, per)
		}()
	}
	for i, p := range speers {
		k := per / senders
		if i < per%senders {
			k++
		}
		go func() { p.Write(clientFrames(size, k)) }()
	}
	wg.Wait()
	b.StopTimer()
	if loop {
		b.ReportMetric(float64(loopWriteCalls()-w0)/float64(per*receivers), "writes/delivery")
	}
	for _, c := range append(rcv, snd...) {
		c.CloseNow()
	}
	for _, p := range append(rpeers, speers...) {
		p.Close()
	}
	s.Shutdown(b.Context())
}

// An event loop's connection is its Conn and its loopTransport (see
// TestAConnFitsThe416ByteSizeClass). What only some connections need is
// made on first use: the addresses of one that is not TCP (loopAddrs),
// the input of one that yielded its turn (loopYield).
func TestALoopTransportFitsThe96ByteSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes are those of 64-bit platforms")
	}
	if n := unsafe.Sizeof(loopTransport{}); n > 96 {
		t.Fatalf("a loopTransport is %d bytes, more than the 96 of its size class", n)
	}
}
