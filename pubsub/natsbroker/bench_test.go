package natsbroker

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// countingReceiver counts deliveries and closes done at want.
type countingReceiver struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (r *countingReceiver) Deliver(pubsub.Message) {
	if r.n.Add(1) == r.want {
		close(r.done)
	}
}

func (r *countingReceiver) Error(error) {}

// BenchmarkCrossNodeDelivery measures messages per second from a publisher
// on node A to node B through one embedded NATS server on loopback: A's
// broker encodes and publishes, B's broker receives, checks the sequence
// and hands each message to its receiver. Run it with
//
//	go test -run '^$' -bench CrossNodeDelivery -benchmem ./pubsub/natsbroker/
func BenchmarkCrossNodeDelivery(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"16B", 16}, {"1KiB", 1024}} {
		b.Run(size.name, func(b *testing.B) {
			e := startEmbedded(b, "127.0.0.1:0", nil, "")
			pub, err := New(e.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			sub, err := New(e.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Close()
			r := &countingReceiver{want: int64(b.N), done: make(chan struct{})}
			if err := pub.Attach("a", &countingReceiver{}); err != nil {
				b.Fatal(err)
			}
			if err := sub.Attach("b", r); err != nil {
				b.Fatal(err)
			}
			if err := sub.Interest("bench", true); err != nil {
				b.Fatal(err)
			}
			if err := sub.nc.FlushTimeout(testTimeout); err != nil {
				b.Fatal(err)
			}
			m := pubsub.Message{Topic: "bench", Type: rally.Binary, Payload: make([]byte, size.n), Node: "a"}
			b.SetBytes(int64(size.n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// Keep the receiver's inbox from overflowing: a
				// publisher faster than its receivers loses messages
				// (at most once), and this measures what arrives.
				for int64(i)-r.n.Load() > inboxLen/2 {
					runtime.Gosched()
				}
				if err := pub.Publish(m); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-r.done:
			case <-time.After(testTimeout):
				b.Fatalf("%d of %d messages arrived; stats %+v", r.n.Load(), b.N, sub.Stats())
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkPublish measures the publishing side alone: encoding and
// handing a 16-byte message to the NATS client, with no one subscribed.
func BenchmarkPublish(b *testing.B) {
	e := startEmbedded(b, "127.0.0.1:0", nil, "")
	pub, err := New(e.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Attach("a", &countingReceiver{}); err != nil {
		b.Fatal(err)
	}
	m := pubsub.Message{Topic: "bench", Type: rally.Text, Payload: make([]byte, 16), Node: "a"}
	b.ReportAllocs()
	for b.Loop() {
		if err := pub.Publish(m); err != nil {
			b.Fatal(err)
		}
	}
}
