package server

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/rallyws/rally"
)

// BenchmarkPusherFanout compares, on one server over loopback, an event
// triggered over the Pusher HTTP API to 200 pusher subscribers of a
// channel with the same publish over POST /publish/{topic} to 200 /ws
// subscribers of a topic: per op, one event has reached every subscriber.
func BenchmarkPusherFanout(b *testing.B) {
	const n = 200
	ts := serve(b, Config{PusherApps: []PusherApp{testApp}, MaxConnections: -1, HandshakeRate: -1})
	run := func(b *testing.B, clients []*rally.Conn, trigger func()) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range b.N {
					if _, _, err := c.Read(context.Background()); err != nil {
						return
					}
				}
			}()
		}
		b.ResetTimer()
		close(start)
		for range b.N {
			trigger()
		}
		wg.Wait()
	}
	b.Run("ws", func(b *testing.B) {
		var clients []*rally.Conn
		for range n {
			c := dial(b, ts.ws+"/ws", nil)
			c.send(`{"type":"subscribe","topic":"bench","id":1}`)
			c.next()
			clients = append(clients, c.c)
		}
		run(b, clients, func() {
			if code, _ := post(b, ts.http+"/publish/bench", "application/json", "", []byte(`"0123456789abcd"`)); code != 200 {
				b.Fatalf("publish: %d", code)
			}
		})
	})
	b.Run("pusher", func(b *testing.B) {
		var clients []*rally.Conn
		for range n {
			c := dial(b, ts.ws+"/app/"+testApp.Key+"?protocol=7", nil)
			c.next()
			c.send(`{"event":"pusher:subscribe","data":{"channel":"bench"}}`)
			if !strings.Contains(c.next(), "subscription_succeeded") {
				b.Fatal("not subscribed")
			}
			clients = append(clients, c.c)
		}
		run(b, clients, func() {
			if code, body := apiRequest(b, ts, testApp, "POST", "/apps/3/events", nil, `{"name":"e","channel":"bench","data":"0123456789abcd"}`); code != 200 {
				b.Fatalf("trigger: %d %s", code, body)
			}
		})
	})
}
