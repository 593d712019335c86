package rally_test

import (
	"context"
	"fmt"
	"net"

	"github.com/rallyws/rally"
)

// An echo server on a listener of its own, its connections driven by
// event loops (on Linux; elsewhere by a goroutine each).
func ExampleServer_Serve() {
	s := &rally.Server{
		EventLoop: true,
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			// On an event loop, Write does not wait for the kernel: the
			// frame leaves after the loop's turn, with the turn's others.
			c.Write(context.Background(), typ, p)
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	ctx := context.Background()
	c, _, err := rally.Dial(ctx, "ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		panic(err)
	}
	c.Write(ctx, rally.Text, []byte("hello"))
	_, p, err := c.Read(ctx)
	fmt.Println(string(p), err)
	c.Close(rally.CloseNormal, "")

	s.Shutdown(ctx) // closes ln too
	fmt.Println(<-served)
	// Output:
	// hello <nil>
	// http: Server closed
}
