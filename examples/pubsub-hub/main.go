// Command pubsub-hub is topic publish/subscribe: WebSocket clients
// subscribe to the topics named in their URL, and whatever they send, or
// a backend POSTs, reaches every subscriber of the topic.
//
//	go run ./examples/pubsub-hub --addr 127.0.0.1:9000
//	rally cat 'ws://127.0.0.1:9000/ws?topic=news&topic=sport'
//	curl -d 'hello' http://127.0.0.1:9000/publish/news
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on (port 0: any free port)")
	flag.Parse()

	var hub pubsub.Hub // the zero Hub is ready: alone, without publish-to-self
	http.Handle("/ws", &rally.Server{
		// Upgrade reads the topics before the handshake is answered; a
		// request without one is refused with 400.
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			topics := r.URL.Query()["topic"]
			if len(topics) == 0 {
				http.Error(w, "give one or more ?topic=NAME", http.StatusBadRequest)
				return nil, false
			}
			return topics, true
		},
		Open: func(c *rally.Conn) {
			topics := c.Data().([]string)
			for _, t := range topics {
				hub.Subscribe(c, t)
			}
			// Said once subscribed: from here on the client misses nothing.
			c.Send(rally.Text, []byte("subscribed to "+strings.Join(topics, ", ")))
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			// What a client sends goes to the other subscribers of its
			// first topic.
			hub.PublishFrom(c, c.Data().([]string)[0], typ, p)
		},
	})
	http.HandleFunc("POST /publish/{topic}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := hub.Publish(r.PathValue("topic"), rally.Text, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "received by %d\n", res.Received())
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s (subscribe at ws://%s/ws?topic=NAME, publish with POST /publish/NAME)\n", ln.Addr(), ln.Addr())
	log.Fatal(http.Serve(ln, nil))
}
