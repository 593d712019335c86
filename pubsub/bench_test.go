package pubsub_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

// The benchmarks run over loopback TCP, clients and server in this
// process. Figures per delivery (one message reaching one subscriber) are
// reported next to the per-publish ones.

// BenchmarkPublish publishes to 1, 32 and 1,000 subscribers whose clients
// read and discard as fast as they can: one publish at a time (Each: one
// write per delivery), or 16 at a time from a connection's cork (Batch16:
// PublishFrom as in a Server callback; one write per subscriber for the
// 16), which shows what the hub itself costs per delivery. Each first
// publishes two rounds unmeasured: the first batch grows each receiver's
// send queue, a cost per connection, not per publish.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{1, 32, 1000} {
		hub := mustHub(b, nil)
		ch := newChat(hub, "t")
		addr := ch.start(b)
		for range n {
			p, _ := ch.join(b, addr)
			discard(p)
		}
		outside := newChat(hub) // a sender that subscribes to nothing
		_, origin := outside.join(b, outside.start(b))
		for _, batch := range []int{1, 16} {
			for _, size := range []int{16, 1 << 10} {
				name := fmt.Sprintf("Each/%dsubscribers/%dB", n, size)
				if batch > 1 {
					name = fmt.Sprintf("Batch%d/%dsubscribers/%dB", batch, n, size)
				}
				name = strings.Replace(name, "1024B", "1KiB", 1)
				b.Run(name, func(b *testing.B) {
					payload := bytes.Repeat([]byte("x"), size)
					var total pubsub.Result
					add := func(r pubsub.Result, _ error) {
						total.Sent += r.Sent
						total.Queued += r.Queued
						total.Dropped += r.Dropped
					}
					publish := func(count int) {
						if batch == 1 {
							for range count {
								add(hub.Publish("t", rally.Binary, payload))
							}
							return
						}
						for i := 0; i < count; i += batch {
							origin.Cork(func() {
								for range min(batch, count-i) {
									add(hub.PublishFrom(origin, "t", rally.Binary, payload))
								}
							})
						}
					}
					// Warm up: the first batches grow each receiver's
					// send queue, once per connection, not per publish.
					publish(2 * batch)
					total = pubsub.Result{}
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					b.ReportAllocs()
					b.ResetTimer()
					publish(b.N)
					b.StopTimer()
					runtime.ReadMemStats(&after)
					deliveries := float64(b.N) * float64(n)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/deliveries, "ns/delivery")
					b.ReportMetric(float64(after.Mallocs-before.Mallocs)/deliveries, "allocs/delivery")
					b.ReportMetric(float64(total.Queued)/deliveries, "queued/delivery")
					b.ReportMetric(float64(total.Dropped)/deliveries, "dropped/delivery")
				})
			}
		}
	}
}

// BenchmarkChat32 is the chat pattern of Bun's benchmark: 32 clients in a
// room with publish-to-self; in each round every client sends 16 short
// text messages back to back and receives all 32×16, so a round is 16,384
// deliveries. The server publishes each message from its Message callback,
// with PublishFrom (deliveries of a read batch leave in one write per
// subscriber) or Publish (one write per delivery).
//
// syscw/delivery counts the process's write system calls (/proc/self/io):
// the server's write and writev calls and the Go runtime's own; the
// clients send with sendmsg, which is not counted there.
func BenchmarkChat32(b *testing.B) {
	const clients, perRound = 32, 16
	for _, batched := range []bool{true, false} {
		b.Run(map[bool]string{true: "PublishFrom", false: "Publish"}[batched], func(b *testing.B) {
			hub := mustHub(b, &pubsub.Options{PublishToSelf: true})
			opened := make(chan struct{}, clients)
			s := &rally.Server{
				Open: func(c *rally.Conn) {
					hub.Subscribe(c, "room")
					opened <- struct{}{}
				},
				Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
					if batched {
						hub.PublishFrom(c, "room", typ, p)
					} else {
						hub.Publish("room", typ, p)
					}
				},
			}
			ts := httptest.NewServer(s)
			b.Cleanup(ts.Close)
			addr := ts.Listener.Addr().String()
			cs := make([]*chatClient, clients)
			for i := range cs {
				cs[i] = dialChatClient(b, addr, i, perRound)
			}
			for range clients {
				receive(b, opened, "Server.Open")
			}
			want := clients * perRound
			round := func() {
				var wg sync.WaitGroup
				for _, c := range cs {
					wg.Go(func() { c.send(b) })
					wg.Go(func() { c.receive(b, want) })
				}
				wg.Wait()
			}
			round() // warm up: buffers, goroutines
			w0 := syscw(b)
			b.ResetTimer()
			for range b.N {
				round()
			}
			b.StopTimer()
			w1 := syscw(b)
			deliveries := float64(b.N) * clients * clients * perRound
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/deliveries, "ns/delivery")
			b.ReportMetric(deliveries/b.Elapsed().Seconds(), "deliveries/s")
			b.ReportMetric(float64(w1-w0)/deliveries, "syscw/delivery")
		})
	}
}

// chatClient is one raw client of the chat benchmark: it sends prebuilt
// masked frames with sendmsg and counts the frames it receives without
// allocating.
type chatClient struct {
	nc    net.Conn
	rc    syscall.RawConn
	out   []byte // this client's messages of one round, back to back
	sizes []int  // the size of each frame in out
	buf   []byte
	have  int // bytes of a frame cut short at the end of buf
}

func dialChatClient(b *testing.B, addr string, id, perRound int) *chatClient {
	p, _, err := rawpeer.DialClient(addr, "/", nil, wireTimeout)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	nc := p.NetConn()
	nc.SetDeadline(time.Time{})
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	c := &chatClient{nc: nc, rc: rc, buf: make([]byte, 256<<10)}
	for i := range perRound {
		msg := "client " + strconv.Itoa(id) + ": message " + strconv.Itoa(i)
		f := rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: []byte(msg)})
		c.out = append(c.out, f...)
		c.sizes = append(c.sizes, len(f))
	}
	return c
}

// send sends the round's messages, one sendmsg per message.
func (c *chatClient) send(b *testing.B) {
	out := c.out
	for _, n := range c.sizes {
		frame := out[:n]
		out = out[n:]
		var serr error
		err := c.rc.Write(func(fd uintptr) bool {
			for len(frame) > 0 {
				n, err := syscall.SendmsgN(int(fd), frame, nil, nil, syscall.MSG_NOSIGNAL)
				if err == syscall.EAGAIN {
					return false
				}
				if err != nil {
					serr = err
					return true
				}
				frame = frame[n:]
			}
			return true
		})
		if err != nil || serr != nil {
			b.Error(err, serr)
			return
		}
	}
}

// receive reads until want whole frames have arrived.
func (c *chatClient) receive(b *testing.B, want int) {
	for got := 0; got < want; {
		n, err := c.nc.Read(c.buf[c.have:])
		if err != nil {
			b.Error(err)
			return
		}
		data := c.buf[:c.have+n]
		for len(data) >= 2 {
			size, hl := int(data[1]&0x7f), 2
			if size == 126 {
				if len(data) < 4 {
					break
				}
				size, hl = int(binary.BigEndian.Uint16(data[2:4])), 4
			}
			if len(data) < hl+size {
				break
			}
			data = data[hl+size:]
			got++
		}
		c.have = copy(c.buf, data)
	}
}

// syscw returns the write system calls this process has made.
func syscw(b *testing.B) int64 {
	io, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(io), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no syscw in /proc/self/io")
	return 0
}
