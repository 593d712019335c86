package pubsub_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// A chat room: every connection joins the room when it opens, and what one
// says reaches everyone in the room, the speaker included. A slow member
// never holds the others up: its messages queue, then are dropped past its
// buffer limit.
func Example() {
	hub, err := pubsub.NewHub(&pubsub.Options{PublishToSelf: true})
	if err != nil {
		panic(err)
	}
	defer hub.Close()
	room := &rally.Server{
		Open: func(c *rally.Conn) {
			hub.Subscribe(c, "room") // until the connection ends
			c.Send(rally.Text, []byte("welcome"))
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			hub.PublishFrom(c, "room", typ, p)
		},
	}
	ts := httptest.NewServer(room)
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(ts.URL, "http")
	alice, _, err := rally.Dial(ctx, url, nil)
	if err != nil {
		panic(err)
	}
	bob, _, err := rally.Dial(ctx, url, nil)
	if err != nil {
		panic(err)
	}
	for _, c := range []*rally.Conn{alice, bob} {
		c.Read(ctx) // welcome: the connection is in the room
	}

	alice.Write(ctx, rally.Text, []byte("hi, I'm Alice"))
	_, heard, _ := bob.Read(ctx)
	fmt.Printf("bob heard: %s\n", heard)
	_, echo, _ := alice.Read(ctx)
	fmt.Printf("alice heard: %s\n", echo)

	alice.Close(rally.CloseNormal, "")
	bob.Close(rally.CloseNormal, "")
	// Output:
	// bob heard: hi, I'm Alice
	// alice heard: hi, I'm Alice
}
