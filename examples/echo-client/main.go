// Command echo-client sends each of its arguments as a text message to a
// WebSocket echo server, prints each reply, and closes.
//
//	go run ./examples/echo-client --url ws://127.0.0.1:9000/echo hello world
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/rallyws/rally"
)

func main() {
	url := flag.String("url", "ws://127.0.0.1:9000/echo", "the echo server's WebSocket URL")
	flag.Parse()
	messages := flag.Args()
	if len(messages) == 0 {
		messages = []string{"hello"}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, *url, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(rally.CloseNormal, "bye")
	for _, m := range messages {
		if err := c.Write(ctx, rally.Text, []byte(m)); err != nil {
			log.Fatal(err)
		}
		typ, p, err := c.Read(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v: %s\n", typ, p)
	}
}
