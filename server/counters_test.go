package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rallyws/rally/pubsub"
)

// stats reads GET /stats.
func stats(t testing.TB, base string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDeliveriesOfMessagesFromOtherNodesAreCounted(t *testing.T) {
	// The in-process bus delivers to the other node before the publisher's
	// ack is sent, so the counters are final once the acks are read.
	bus := &pubsub.Bus{}
	a := serve(t, Config{Node: "a", Broker: bus.Broker()})
	b := serve(t, Config{Node: "b", Broker: bus.Broker()})
	sub := dial(t, a.ws+"/ws", nil)
	sub.send(`{"type":"subscribe","topic":"t","id":1}`)
	sub.expect(`{"type":"ack","id":1}`)
	onB := dial(t, b.ws+"/ws", nil)
	onA := dial(t, a.ws+"/ws", nil)
	for _, pub := range []*client{onB, onB, onB, onA} {
		pub.send(`{"type":"publish","topic":"t","data":"m","id":2}`)
		pub.expect(`{"type":"ack","id":2}`)
	}
	for range 4 {
		sub.expect(`{"type":"message","topic":"t","data":"m"}`)
	}
	for series, want := range map[string]float64{
		`rally_deliveries_total`:                    4,
		`rally_messages_sent_total{type="message"}`: 4,
		`rally_publishes_total{source="ws"}`:        1, // publishes made on this node
	} {
		if got := metric(t, a.http, series); got != want {
			t.Errorf("node a: %s = %v, want %v", series, got, want)
		}
	}
	st := stats(t, a.http)
	if st["deliveries"] != 4.0 || st["publishes"] != 1.0 {
		t.Errorf("node a /stats = %v, want deliveries 4 and publishes 1", st)
	}
}
