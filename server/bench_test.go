package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// BenchmarkLocalFanOut measures deliveries per second on one node: each
// op is one 64-byte publish from a /ws client to 100 subscribers on the
// same node.
func BenchmarkLocalFanOut(bm *testing.B) {
	const subscribers = 100
	ts := serve(bm, Config{BufferLimit: 64 << 20})
	pub := dial(bm, ts.ws+"/ws", nil)
	var wg sync.WaitGroup
	counts := make([]int, subscribers)
	for i := range subscribers {
		s := dial(bm, ts.ws+"/ws", nil)
		s.send(`{"type":"subscribe","topic":"bench","id":1}`)
		s.expect(`{"type":"ack","id":1}`)
		wg.Go(func() {
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, p, err := s.c.Read(ctx)
				cancel()
				if err != nil || strings.Contains(string(p), `"end"`) {
					return
				}
				counts[i]++
			}
		})
	}
	payload := []byte(`{"type":"publish","topic":"bench","data":"` + strings.Repeat("x", 64) + `"}`)
	ctx := context.Background()
	bm.ResetTimer()
	for range bm.N {
		if err := pub.c.Write(ctx, rally.Text, payload); err != nil {
			bm.Fatal(err)
		}
	}
	pub.send(`{"type":"publish","topic":"bench","data":"end"}`)
	wg.Wait()
	bm.StopTimer()
	total := 0
	for _, n := range counts {
		total += n
	}
	bm.ReportMetric(float64(total)/bm.Elapsed().Seconds(), "delivered/s")
	bm.ReportMetric(float64(subscribers*bm.N-total), "lost")
}
