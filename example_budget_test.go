package rally_test

import (
	"context"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/rallyws/rally"
)

// Two servers of one process share a memory budget: what their clients
// make them hold (request heads, messages being gathered, send queues)
// stays within 256 MiB together. Messages being gathered may take 40% of
// it and must bring 1 KiB a second over every 5 s (else 1008); at most
// 256 request heads are read at once on the raw listener, the oldest
// answered 503 past it; under pressure new connections get 503.
func ExampleNewMemoryBudgetWith() {
	budget := rally.NewMemoryBudgetWith(256<<20, &rally.MemoryBudgetOptions{
		AssemblyShare:        40,
		MessageTimeout:       5 * time.Second,
		MaxPendingHandshakes: 256,
	})
	opts := &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget}}

	echo := &rally.Server{Options: opts, Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Send(typ, p)
	}}
	go http.ListenAndServe("127.0.0.1:8080", echo)

	ln, err := net.Listen("tcp", "127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			c, _, err := rally.Upgrade(nc, opts)
			if err != nil {
				return // answered (431, 503, ...) and closed
			}
			defer c.CloseNow()
			for {
				typ, p, err := c.Read(context.Background())
				if err != nil {
					return
				}
				c.Write(context.Background(), typ, p)
			}
		}()
	}
}
