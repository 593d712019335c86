// Command echo-server is a WebSocket echo server: every message comes back
// with its own frame type.
//
//	go run ./examples/echo-server --addr 127.0.0.1:9000
//	go run ./examples/echo-client --url ws://127.0.0.1:9000/echo hello
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/rallyws/rally"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on (port 0: any free port)")
	flag.Parse()

	http.Handle("/echo", &rally.Server{
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Send(typ, p) // never blocks; p is valid during the call, Send copies what it keeps
		},
		Close: func(c *rally.Conn, err *rally.CloseError) {
			log.Printf("%v closed: %v", c.RemoteAddr(), err)
		},
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s (echo at ws://%s/echo)\n", ln.Addr(), ln.Addr())
	log.Fatal(http.Serve(ln, nil))
}
