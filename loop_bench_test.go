//go:build linux

package rally

import (
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
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
	c.rd.served = true
	s.set.begin()
	if !s.set.commit(c) {
		tb.Fatal("server shut down")
	}
	if !s.loops.adopt(s, c) {
		tb.Fatal("the event loop did not adopt the connection")
	}
	return c, peer, fd
}

// BenchmarkEventLoopIdleConnMemory opens connections served by event loops
// that stay idle and reports the Go memory (heap and stacks) each costs on
// the server side, and the size of the structures it holds.
func BenchmarkEventLoopIdleConnMemory(b *testing.B) {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	n := min(10000, int(lim.Cur-300)/2) // each connection is two descriptors here
	for range b.N {
		var opened sync.WaitGroup
		opened.Add(n)
		s := &Server{EventLoop: true, Open: func(*Conn) { opened.Done() }}
		// One connection first, so that the loops and their buffers are
		// not counted.
		first, _, firstPeer := adoptPair(b, s, true)
		opened.Add(1)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conns := make([]*Conn, 0, n)
		peers := make([]int, 0, n)
		for range n {
			c, _, peer := adoptPair(b, s, true)
			conns = append(conns, c)
			peers = append(peers, peer)
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
		b.ReportMetric(float64(unsafe.Sizeof(loopTransport{})+unsafe.Sizeof(loopNetConn{})), "sizeof-loop-parts")
		b.ReportMetric(float64(n), "conns")
		for i, c := range append(conns, first) {
			c.CloseNow()
			if i < len(peers) {
				syscall.Close(peers[i])
			}
		}
		syscall.Close(firstPeer)
		s.Shutdown(b.Context())
	}
}

// BenchmarkEventLoopEcho has a loop-served connection echo each message it
// gets (Write from the Message callback) while a goroutine feeds it frames
// and another drains the echoes. It reports the write system calls per
// echoed message.
func BenchmarkEventLoopEcho(b *testing.B) {
	for _, size := range []int{16, 1 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			s := &Server{EventLoop: true, EventLoops: 1, Message: func(c *Conn, typ MessageType, p []byte) {
				c.Write(b.Context(), typ, p)
			}}
			c, peer, _ := adoptPair(b, s, false)
			go feed(peer, clientFrames(size, max(1, (64<<10)/(size+14))))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			w0 := loopWrites.Load()
			b.ResetTimer()
			readFrames(b, peer, size, b.N)
			b.StopTimer()
			b.ReportMetric(float64(loopWrites.Load()-w0)/float64(b.N), "writes/msg")
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

// BenchmarkEventLoopChatFanout is a chat room on one event loop: sender
// connections get messages, and the Message callback sends each to every
// receiver connection. b.N counts deliveries (one message reaching one
// receiver). It reports the write system calls per delivery, which the
// loop's per-turn gathering brings below one: a receiver gets one write
// per turn, whatever the number of messages of the turn.
func BenchmarkEventLoopChatFanout(b *testing.B) {
	const senders, receivers, size = 4, 32, 16
	var rcv []*Conn
	s := &Server{EventLoop: true, EventLoops: 1}
	s.Message = func(c *Conn, typ MessageType, p []byte) {
		for _, r := range rcv {
			r.Send(typ, p)
		}
	}
	var rpeers, speers []net.Conn
	for range receivers {
		c, peer, _ := adoptPair(b, s, false)
		rcv = append(rcv, c)
		rpeers = append(rpeers, peer)
	}
	var snd []*Conn
	for range senders {
		c, peer, _ := adoptPair(b, s, false)
		snd = append(snd, c)
		speers = append(speers, peer)
	}
	b.ReportAllocs()
	w0 := loopWrites.Load()
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
	b.ReportMetric(float64(loopWrites.Load()-w0)/float64(per*receivers), "writes/delivery")
	for _, c := range append(rcv, snd...) {
		c.CloseNow()
	}
	for _, p := range append(rpeers, speers...) {
		p.Close()
	}
	s.Shutdown(b.Context())
}
