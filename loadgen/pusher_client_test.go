package loadgen

import "testing"

// A publisher sends half the server's burst at once and the rest at 9/10
// of the rate, so that its events find room in the server's bucket.
func TestPublisherPaceIsHalfTheBurstAndNineTenthsOfTheRate(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
		every float64
	}{
		{10, 5, 9},
		{4, 2, 3.6},
		{3, 1, 2.7},
		{1, 1, 0.9},
		{1000, 500, 900},
	} {
		if p := paceFor(tc.rate); p.burst != tc.burst || p.rate != tc.every {
			t.Errorf("client-event-rate %v: burst %d, then %v/s; want %d, then %v/s", tc.rate, p.burst, p.rate, tc.burst, tc.every)
		}
	}
}

// By default a run has enough publishers that each sends its events
// within its burst, at most one per ten subscribers, as many on each
// channel, at least one.
func TestDefaultPublishersSendWithinTheirBurst(t *testing.T) {
	for _, tc := range []struct {
		conns, channels, events int
		want                    int
	}{
		{1000, 1, 200, 40}, // 5 events each at 10/s
		{1000, 1, 201, 41}, // one sends 1
		{1000, 3, 200, 42}, // 67 a channel: 14 each
		{100, 1, 200, 10},  // one per ten subscribers
		{5, 2, 200, 2},     // one per channel
		{1000, 1, 0, 100},  // --duration: one per ten subscribers
		{50, 2, 30, 4},     // 5 allowed: 2 on each channel
		{10000, 1, 3, 1},   // few events
		{1000, 10, 3, 10},  // fewer events than channels
	} {
		cfg := PusherConfig{Conns: tc.conns, Channels: tc.channels, Events: tc.events, ClientEventRate: 10}
		if got := publishers(cfg); got != tc.want {
			t.Errorf("%d subscribers, %d channels, %d events: %d publishers, want %d", tc.conns, tc.channels, tc.events, got, tc.want)
		}
	}
}

// Every event is sent by one publisher: the shares add up to --events,
// whatever the publishers and channels.
func TestPublisherSharesAddUpToTheEvents(t *testing.T) {
	for _, tc := range []struct{ events, channels, publishers int }{
		{200, 1, 40}, {201, 1, 40}, {200, 3, 42}, {7, 3, 5}, {2, 4, 4}, {1, 1, 1},
	} {
		f := &fanout{cfg: PusherConfig{Events: tc.events, Channels: tc.channels}}
		perChannel := make([]int, tc.channels)
		sum := 0
		for j := range tc.publishers {
			p := &publisher{ch: j % tc.channels, slot: j / tc.channels}
			n := f.share(p, tc.publishers)
			sum += n
			perChannel[p.ch] += n
		}
		for ch, n := range perChannel {
			if want := (tc.events - ch + tc.channels - 1) / tc.channels; n != want {
				t.Errorf("%+v: channel %d gets %d events, want %d", tc, ch, n, want)
			}
		}
		if sum != tc.events {
			t.Errorf("%+v: publishers send %d events in all", tc, sum)
		}
	}
}
