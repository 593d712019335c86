package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// historyBenchServer is a server with history on every topic, in memory
// (jetstream false) or in JetStream on its embedded NATS server.
func historyBenchServer(b *testing.B, jetstream bool) *testServer {
	cfg := Config{BufferLimit: 64 << 20, MaxMessageBytes: 1 << 20,
		History: HistoryConfig{Topics: []string{"*"}, Size: 20000, RecoveryLimit: 20000, Age: time.Hour}}
	if jetstream {
		cfg.NATS = NATSConfig{Embedded: "127.0.0.1:0"}
		cfg.History.StoreDir = b.TempDir()
	}
	return serve(b, cfg)
}

// BenchmarkHistoryPublish measures publishes per second on a history
// topic, from one /ws client (as fast as it writes, waiting for an ack
// every 256) to one subscriber, which reads them all: each op is one
// publish, stored (in memory or in JetStream) and delivered with its
// position.
func BenchmarkHistoryPublish(b *testing.B) {
	for _, store := range []string{"memory", "jetstream"} {
		for _, size := range []int{16, 1024} {
			b.Run(fmt.Sprintf("%s/%dB", store, size), func(b *testing.B) {
				ts := historyBenchServer(b, store == "jetstream")
				sub := dial(b, ts.ws+"/ws", nil)
				sub.subscribeAt("bench", nil)
				pub := dial(b, ts.ws+"/ws", nil)
				payload := []byte(`{"type":"publish","topic":"bench","data":"` + strings.Repeat("x", size) + `"}`)
				done := make(chan int)
				go func() {
					n := 0
					for n < b.N {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						_, _, err := sub.c.Read(ctx)
						cancel()
						if err != nil {
							break
						}
						n++
					}
					done <- n
				}()
				acked := []byte(`{"type":"publish","topic":"bench","id":1,"data":"` + strings.Repeat("x", size) + `"}`)
				ctx := context.Background()
				b.ResetTimer()
				for i := range b.N {
					// Every 256th waits for its ack: with NATS at most
					// 1024 may wait to be stored.
					p := payload
					if i%256 == 255 || i == b.N-1 {
						p = acked
					}
					if err := pub.c.Write(ctx, rally.Text, p); err != nil {
						b.Fatal(err)
					}
					if i%256 == 255 || i == b.N-1 {
						if f := pub.frame(); f.Type != "ack" {
							b.Fatalf("publish: %+v", f)
						}
					}
				}
				got := <-done
				b.StopTimer()
				b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "msg/s")
				b.ReportMetric(float64(b.N-got), "lost")
			})
		}
	}
}

// BenchmarkRecovery10k measures one recovery of 10,000 missed messages
// of 16 bytes: each op is a client that subscribes from the position
// before them and reads them all (the ack, then the replay).
func BenchmarkRecovery10k(b *testing.B) {
	const missed = 10000
	for _, store := range []string{"memory", "jetstream"} {
		b.Run(store, func(b *testing.B) {
			ts := historyBenchServer(b, store == "jetstream")
			first := dial(b, ts.ws+"/ws", nil)
			ack := first.subscribeAt("bench", nil)
			from := position{*ack.Offset, ack.Epoch}
			first.c.CloseNow()
			pub := dial(b, ts.ws+"/ws", nil)
			for i := 1; i <= missed; i++ {
				// Every 256th waits for its ack: with NATS at most 1024
				// may wait to be stored.
				if i%256 != 0 && i != missed {
					pub.send(fmt.Sprintf(`{"type":"publish","topic":"bench","data":%d}`, i))
					continue
				}
				pub.send(fmt.Sprintf(`{"type":"publish","topic":"bench","data":%d,"id":1}`, i))
				if f := pub.frame(); f.Type != "ack" {
					b.Fatalf("publish: %+v", f)
				}
			}
			var bytes int
			b.ResetTimer()
			for range b.N {
				c := dial(b, ts.ws+"/ws", nil)
				ack := c.subscribeAt("bench", &from)
				if ack.Recovered == nil || !*ack.Recovered || ack.Replayed != missed {
					b.Fatalf("recovery: %+v", ack)
				}
				for range missed {
					_, p, err := c.c.Read(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					bytes += len(p)
				}
				c.c.CloseNow()
			}
			b.StopTimer()
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/recovery")
		})
	}
}
