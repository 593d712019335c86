// Command gorilla-on-rally is the gorilla peer's program with one import
// changed: gorilla/websocket's API on rally (github.com/rallyws/rally/gorilla/websocket).
// As the gorilla peer: ReadMessage and
// WriteMessage as in the library's examples, and a PreparedMessage (its
// documented way to send one message to many) for the chat room. gorilla
// allows one writer at a time, so each connection's writes take a mutex.
// With -compress the Upgrader negotiates permessage-deflate
// (EnableCompression; gorilla's server keeps no context between messages).
package main

import (
	"net/http"
	"sync"

	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
	"github.com/rallyws/rally/gorilla/websocket"
)

type client struct {
	c  *websocket.Conn
	mu sync.Mutex
}

func main() {
	addr, compress := peerflag.Parse()
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, EnableCompression: compress}
	var chat room.Room[*client]
	http.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, p); err != nil {
				return
			}
		}
	})
	http.HandleFunc("/chat", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		me := &client{c: c}
		chat.Join(me)
		defer func() {
			chat.Leave(me)
			c.Close()
		}()
		for {
			typ, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			pm, err := websocket.NewPreparedMessage(typ, p)
			if err != nil {
				return
			}
			for _, m := range chat.Members() {
				m.mu.Lock()
				m.c.WritePreparedMessage(pm)
				m.mu.Unlock()
			}
		}
	})
	peerflag.Fail(http.ListenAndServe(addr, nil))
}
