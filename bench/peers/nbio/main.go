// Command nbio is the lesismal/nbio peer on nbio's own non-blocking HTTP
// engine (epoll, no goroutine per connection), the setting its examples
// use: OnMessage writes the reply with WriteMessage, and the chat room
// writes to every member (nbio has no prepared message). With -compress
// both upgraders negotiate permessage-deflate (EnableCompression).
package main

import (
	"net/http"
	"os"
	"os/signal"

	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
)

func main() {
	addr, compress := peerflag.Parse()
	echo := websocket.NewUpgrader()
	echo.EnableCompression(compress)
	echo.CheckOrigin = func(*http.Request) bool { return true }
	echo.OnMessage(func(c *websocket.Conn, typ websocket.MessageType, p []byte) {
		c.WriteMessage(typ, p)
	})
	var members room.Room[*websocket.Conn]
	chat := websocket.NewUpgrader()
	chat.EnableCompression(compress)
	chat.CheckOrigin = func(*http.Request) bool { return true }
	chat.OnOpen(members.Join)
	chat.OnClose(func(c *websocket.Conn, _ error) { members.Leave(c) })
	chat.OnMessage(func(_ *websocket.Conn, typ websocket.MessageType, p []byte) {
		for _, m := range members.Members() {
			m.WriteMessage(typ, p)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { echo.Upgrade(w, r, nil) })
	mux.HandleFunc("/chat", func(w http.ResponseWriter, r *http.Request) { chat.Upgrade(w, r, nil) })
	engine := nbhttp.NewEngine(nbhttp.Config{
		Network:                 "tcp",
		Addrs:                   []string{addr},
		MaxLoad:                 1000000,
		ReleaseWebsocketPayload: true,
		Handler:                 mux,
	})
	if err := engine.Start(); err != nil {
		peerflag.Fail(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	<-stop
	engine.Stop()
}
