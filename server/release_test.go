package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// releaseModes are the ways `rally serve` holds a /ws connection: a
// goroutine, an event loop, a stream of an HTTP/2 connection (h2c).
var releaseModes = []struct {
	name     string
	loop, h2 bool
}{{"goroutines", false, false}, {"event-loop", true, false}, {"h2c", false, true}}

// releaseDialOptions dials over HTTP/2 when h2 is set, with a small
// window: a stream that is not read stops taking bytes at once.
func releaseDialOptions(t *testing.T, h2 bool) *rally.DialOptions {
	if !h2 {
		return nil
	}
	tr := &http.Transport{ForceAttemptHTTP2: true, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	return &rally.DialOptions{HTTP2: rally.HTTP2Require, HTTP2Transport: tr}
}

// One way out, for a replay: a subscriber that asked for what it missed
// and goes away while its replay waits for it to read is released in
// every mode, with no write-stall timeout to cut it: its replay's turn is
// given back (the next client's replay starts: one runs at a time here),
// its connection ends, and nothing stays charged.
func TestASubscriberThatGoesAwayDuringItsReplayIsReleased(t *testing.T) {
	for _, mode := range releaseModes {
		t.Run(mode.name, func(t *testing.T) {
			inMode(t, mode.loop)
			cfg := historyConfig()
			cfg.History.Replays = 1
			cfg.WriteStallTimeout = time.Hour
			cfg.H2C = mode.h2
			cfg.HandshakeRate = -1
			s := serve(t, cfg)
			const topic, missed = "h.gone", 200
			first := dial(t, s.ws+"/ws", nil)
			ack := first.subscribeAt(topic, nil)
			from := position{*ack.Offset, ack.Epoch}
			first.c.CloseNow()
			// What it missed is far more than the kernel's buffers and a
			// stream's window hold.
			pub := dial(t, s.ws+"/ws", nil)
			data := strings.Repeat("x", 32<<10)
			for i := range missed {
				pub.send(fmt.Sprintf(`{"type":"publish","topic":%q,"data":%q,"id":%d}`, topic, data, i))
				if f := pub.frame(); f.Type != "ack" {
					t.Fatalf("publish: %+v", f)
				}
			}
			pub.c.CloseNow()

			gone := dial(t, s.ws+"/ws", releaseDialOptions(t, mode.h2))
			if a := gone.subscribeAt(topic, &from); a.Recovered == nil || !*a.Recovered || a.Replayed != missed {
				t.Fatalf("recovery: %+v, want %d replayed", a, missed)
			}
			// Its replay has begun (the ack leads it) and waits for it to
			// read; it goes away instead.
			gone.c.CloseNow()

			next := dial(t, s.ws+"/ws", releaseDialOptions(t, mode.h2))
			if a := next.subscribeAt(topic, &from); a.Recovered == nil || !*a.Recovered {
				t.Fatalf("the next recovery: %+v", a)
			}
			next.c.CloseNow()
			pollUntil(t, func() (bool, string) {
				n := metric(t, s.http, `rally_connections{endpoint="ws"}`)
				return n == 0 && s.replays.active.Load() == 0, fmt.Sprintf("%v /ws connections and %d replays left after every client went", n, s.replays.active.Load())
			})
			awaitCharge(t, s, rally.MemoryRecovery, rally.MemorySubscriptions, rally.MemorySendQueues, rally.MemoryStreams)
		})
	}
}
