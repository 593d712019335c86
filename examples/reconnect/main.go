// Command reconnect is a client that stays connected: it sends a numbered
// message every --every, prints the replies, and when the server goes
// away it dials again, waiting longer after each failure (with jitter, up
// to --max-backoff), until it has --messages replies.
//
//	go run ./examples/echo-server --addr 127.0.0.1:9000 &
//	go run ./examples/reconnect --url ws://127.0.0.1:9000/echo
//	(stop and restart the server: the client carries on)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/rallyws/rally"
)

func main() {
	url := flag.String("url", "ws://127.0.0.1:9000/echo", "the echo server's WebSocket URL")
	every := flag.Duration("every", 500*time.Millisecond, "send a message this often")
	messages := flag.Int("messages", 0, "stop after this many replies (0: never)")
	maxBackoff := flag.Duration("max-backoff", 5*time.Second, "longest wait between two dials")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	replies, sent := 0, 0
	backoff := 100 * time.Millisecond
	for connects := 0; ; connects++ {
		c, _, err := rally.Dial(ctx, *url, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Full jitter: many clients of one server do not come back
			// all at the same moment.
			wait := rand.N(backoff) + time.Millisecond
			log.Printf("dial: %v; again in %v", err, wait.Round(time.Millisecond))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, *maxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
		if connects > 0 {
			fmt.Println("reconnected")
		} else {
			fmt.Println("connected")
		}
		err = session(ctx, c, *every, &sent, &replies, *messages)
		if err == nil || ctx.Err() != nil {
			c.Close(rally.CloseNormal, "done")
			return
		}
		log.Printf("connection lost: %v", err)
	}
}

// session sends a message every interval on c and prints the replies
// until it has want of them (nil), or the connection fails (its error).
func session(ctx context.Context, c *rally.Conn, every time.Duration, sent, replies *int, want int) error {
	defer c.CloseNow()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for want == 0 || *replies < want {
		*sent++
		if err := c.Write(ctx, rally.Text, fmt.Appendf(nil, "message %d", *sent)); err != nil {
			return err
		}
		_, p, err := c.Read(ctx)
		if err != nil {
			return err
		}
		*replies++
		fmt.Printf("reply: %s\n", p)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
