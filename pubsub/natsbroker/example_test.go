package natsbroker_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// A node with a NATS server of its own, which other nodes can point New
// at. Its hub publishes to its own subscribers and, through NATS, to every
// other node's.
func Example() {
	nats, err := natsbroker.StartEmbedded("127.0.0.1:0", nil, "")
	if err != nil {
		log.Fatal(err)
	}
	defer nats.Shutdown()

	broker, err := natsbroker.New(nats.ClientURL(), natsbroker.WithName("node-1"))
	if err != nil {
		log.Fatal(err)
	}
	hub, err := pubsub.NewHub(&pubsub.Options{Broker: broker, Node: "node-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer hub.Close() // closes the broker too

	mux := http.NewServeMux()
	mux.Handle("/ws", &rally.Server{Open: func(c *rally.Conn) { hub.Subscribe(c, "news") }})

	if _, err := hub.Publish("news", rally.Text, []byte("hello, every node")); err != nil {
		log.Fatal(err)
	}
	s := broker.Stats()
	fmt.Println("published", s.Published, "connected", s.Connected)
	// Output: published 1 connected true
}
