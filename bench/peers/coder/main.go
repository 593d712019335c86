// Command coder is the coder/websocket peer: Accept, Read and Write as
// its README shows; Write is safe from many goroutines, so the chat room
// writes to each member directly. The read limit is raised from the
// library's 32 KiB default so that 64 KiB and 256 KiB messages pass.
// With -compress it negotiates permessage-deflate in coder's default mode,
// CompressionNoContextTakeover (messages of 512 bytes and more compressed,
// each on its own).
package main

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
)

const readLimit = 1 << 20

func main() {
	addr, compress := peerflag.Parse()
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true}
	if compress {
		opts.CompressionMode = websocket.CompressionNoContextTakeover
	}
	var chat room.Room[*websocket.Conn]
	http.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(readLimit)
		ctx := context.Background()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, p); err != nil {
				return
			}
		}
	})
	http.HandleFunc("/chat", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		c.SetReadLimit(readLimit)
		chat.Join(c)
		defer func() {
			chat.Leave(c)
			c.CloseNow()
		}()
		ctx := context.Background()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			for _, m := range chat.Members() {
				m.Write(ctx, typ, p)
			}
		}
	})
	peerflag.Fail(http.ListenAndServe(addr, nil))
}
