package rally_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/rallyws/rally"
)

// A server driven by callbacks: no read loop to write. Message bytes are
// valid during the call; Write may be called from the callback.
func ExampleServer() {
	echo := &rally.Server{
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Write(context.Background(), typ, p)
		},
	}
	ts := httptest.NewServer(echo)
	defer ts.Close()

	ctx := context.Background()
	c, _, err := rally.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(rally.CloseNormal, "")
	c.Write(ctx, rally.Text, []byte("hello"))
	typ, p, err := c.Read(ctx)
	fmt.Println(typ, string(p), err)
	// Output: text hello <nil>
}

// Accept in a plain http.Handler, with a read loop of your own.
func ExampleAccept() {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := rally.Accept(w, r, nil)
		if err != nil {
			return // Accept has answered the request already
		}
		ctx := r.Context()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return // a *rally.CloseError says how it ended
			}
			c.Write(ctx, typ, p)
		}
	})
	ts := httptest.NewServer(handler)
	defer ts.Close()

	ctx := context.Background()
	c, _, err := rally.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		log.Fatal(err)
	}
	c.Write(ctx, rally.Binary, []byte{1, 2, 3})
	_, p, _ := c.Read(ctx)
	fmt.Println(p, c.Close(rally.CloseNormal, "done"))
	// Output: [1 2 3] <nil>
}

// Send never blocks: its status says whether the frame reached the kernel,
// waits behind a slow peer, or was dropped at the buffer limit.
func ExampleConn_Send() {
	s := &rally.Server{
		Open: func(c *rally.Conn) {
			status, err := c.Send(rally.Text, []byte("welcome"))
			fmt.Println(status, err)
		},
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.CloseNow()
	_, p, _ := c.Read(ctx)
	fmt.Println(string(p))
	// Output:
	// sent <nil>
	// welcome
}
