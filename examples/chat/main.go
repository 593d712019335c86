// Command chat is a chat room: a page at / where everyone who opens it
// sees what everyone sends. Open http://127.0.0.1:9000/ in two browser
// tabs.
//
//	go run ./examples/chat --addr 127.0.0.1:9000
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

//go:embed index.html
var page []byte

// room is the one topic every client subscribes to.
const room = "room"

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on (port 0: any free port)")
	flag.Parse()

	// The sender sees its own message come back too, as in any chat.
	hub, err := pubsub.NewHub(&pubsub.Options{PublishToSelf: true})
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	http.Handle("/ws", &rally.Server{
		Open: func(c *rally.Conn) {
			hub.Subscribe(c, room) // the subscription ends when the connection does
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			// Encoded once for every member; never waits for a slow one.
			hub.PublishFrom(c, room, rally.Text, p)
		},
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s (open it in two browser tabs)\n", ln.Addr())
	log.Fatal(http.Serve(ln, nil))
}
