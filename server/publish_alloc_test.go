package server

import (
	"testing"

	"github.com/rallyws/rally"
)

// TestWSPublishAllocatesTheTopicAndTheFrame holds a /ws publish request
// of the usual shape to two allocations (the topic's string and the frame
// the subscribers share), three with an id (its ack).
func TestWSPublishAllocatesTheTopicAndTheFrame(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector: run it without -race")
	}
	s, pub := publishSetup(t, 32)
	for _, tc := range []struct {
		req  string
		want float64
	}{
		{`{"type":"publish","topic":"bench","data":{"n":1,"s":"x"}}`, 2},
		{`{"type":"publish","topic":"bench","data":"0123456789abcd","id":7}`, 3},
	} {
		req := []byte(tc.req)
		if got := testing.AllocsPerRun(100, func() { s.wsMessage(pub, rally.Text, req) }); got > tc.want {
			t.Errorf("%s allocates %v times, want at most %v: see go test -run '^$' -bench ServePublish -benchmem -memprofile mem.out ./server", tc.req, got, tc.want)
		}
	}
}
