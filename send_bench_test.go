package rally

import (
	"io"
	"testing"
)

// The non-blocking send over a Unix socket pair whose other end a
// goroutine reads and discards. The sender keeps pace with the reader the
// way an application should: after a send that had to queue, it waits for
// OnDrain before the next one. So ns/op is the rate a sender sustains,
// not the cost of dropping; the share of sends that were queued is
// reported (and of those dropped, which pacing should keep at 0).

var sendSizes = []int{16, 1 << 10, 16 << 10, 64 << 10}

func benchmarkSend(b *testing.B, sides []string, send func(c *Conn, p []byte) (SendStatus, error)) {
	for _, side := range sides {
		for _, size := range sendSizes {
			b.Run(side+"/"+sizeName(size), func(b *testing.B) {
				a, peer := socketPair(b)
				drained := make(chan struct{}, 1)
				opts := ConnOptions{OnDrain: func(*Conn) {
					select {
					case drained <- struct{}{}:
					default:
					}
				}}
				c := newConn(a, nil, side == "server", "", &opts)
				go io.Copy(io.Discard, peer)
				defer func() { c.CloseNow(); peer.Close() }()
				p := make([]byte, size)
				var queued, dropped int
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					st, err := send(c, p)
					if err != nil {
						b.Fatal(err)
					}
					switch st {
					case Queued:
						queued++
						<-drained
					case Dropped:
						dropped++
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(queued)/float64(b.N), "queued/op")
				b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
			})
		}
	}
}

var bothSides = []string{"server", "client"}

func BenchmarkSend(b *testing.B) {
	benchmarkSend(b, bothSides, func(c *Conn, p []byte) (SendStatus, error) { return c.Send(Binary, p) })
}

func BenchmarkSendDone(b *testing.B) {
	done := func(error) {}
	benchmarkSend(b, bothSides, func(c *Conn, p []byte) (SendStatus, error) { return c.SendDone(Binary, p, done) })
}

// BenchmarkSendPrepared sends one prepared message over and over, as a
// broadcast does to each receiver.
func BenchmarkSendPrepared(b *testing.B) {
	prepared := map[int]*PreparedMessage{}
	for _, size := range sendSizes {
		prepared[size], _ = NewPreparedMessage(Binary, make([]byte, size))
	}
	benchmarkSend(b, []string{"server"}, func(c *Conn, p []byte) (SendStatus, error) { return c.SendPrepared(prepared[len(p)]) })
}

// BenchmarkSendPreparedCorked sends a batch of 8 prepared messages in one
// cork per op, as a chat room or a publish does to each member within a
// read batch: the queue gathers them (referring to the frames of 512
// bytes or more rather than copying them) and writes them in one system
// call when the cork ends.
func BenchmarkSendPreparedCorked(b *testing.B) {
	prepared := map[int]*PreparedMessage{}
	for _, size := range sendSizes {
		prepared[size], _ = NewPreparedMessage(Binary, make([]byte, size))
	}
	var pm *PreparedMessage
	var queued bool
	var c *Conn
	batch := func() {
		for range 8 {
			st, err := c.SendPrepared(pm)
			if err != nil {
				b.Fatal(err)
			}
			queued = queued || st == Queued
		}
	}
	benchmarkSend(b, []string{"server"}, func(conn *Conn, p []byte) (SendStatus, error) {
		c, pm, queued = conn, prepared[len(p)], false
		c.Cork(batch)
		if queued {
			return Queued, nil
		}
		return Sent, nil
	})
}
