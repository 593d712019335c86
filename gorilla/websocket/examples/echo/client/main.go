// Command client is gorilla's echo example client on rally: it sends the
// time every second to the echo server, prints what comes back, and on
// Ctrl-C closes cleanly (a close message, then the server's answer).
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

var (
	addr  = flag.String("addr", "localhost:8080", "http service address")
	count = flag.Int("n", 0, "messages to send before closing (0: until interrupted)")
)

func main() {
	flag.Parse()
	log.SetFlags(0)

	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)

	u := url.URL{Scheme: "ws", Host: *addr, Path: "/echo"}
	log.Printf("connecting to %s", u.String())
	c, _, err := websocket.DefaultDialer.Dial(u.String(), nil)
	if err != nil {
		log.Fatal("dial:", err)
	}
	defer c.Close()

	done := make(chan struct{})
	received := make(chan struct{}, 1)
	go func() {
		defer close(done)
		for {
			_, message, err := c.ReadMessage()
			if err != nil {
				log.Println("read:", err)
				return
			}
			log.Printf("recv: %s", message)
			select {
			case received <- struct{}{}:
			default:
			}
		}
	}()

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	sent := 0
	for {
		select {
		case <-done:
			return
		case t := <-ticker.C:
			if *count > 0 && sent == *count {
				closeCleanly(c, done)
				return
			}
			if err := c.WriteMessage(websocket.TextMessage, []byte(t.String())); err != nil {
				log.Println("write:", err)
				return
			}
			sent++
		case <-interrupt:
			log.Println("interrupt")
			closeCleanly(c, done)
			return
		}
	}
}

// closeCleanly sends a close message and waits (a second at most) for the
// server to answer it, which ends the reader.
func closeCleanly(c *websocket.Conn, done <-chan struct{}) {
	err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	if err != nil {
		log.Println("write close:", err)
		return
	}
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}
