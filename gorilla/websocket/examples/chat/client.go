package main

import (
	"bytes"
	"log"
	"net/http"
	"time"

	"github.com/rallyws/rally/gorilla/websocket"
)

const (
	writeWait      = 10 * time.Second  // to write one message
	pongWait       = 60 * time.Second  // to hear from the peer
	pingPeriod     = pongWait * 9 / 10 // pings keep pongs coming
	maxMessageSize = 512               // the largest message accepted
)

var upgrader = websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}

// Client is one browser: its connection and the messages waiting for it.
type Client struct {
	hub  *Hub
	conn *websocket.Conn
	send chan []byte
}

// readPump hands the client's messages to the hub; it is the connection's
// one reader.
func (c *Client) readPump() {
	defer func() {
		c.hub.unregister <- c
		c.conn.Close()
	}()
	c.conn.SetReadLimit(maxMessageSize)
	c.conn.SetReadDeadline(time.Now().Add(pongWait))
	c.conn.SetPongHandler(func(string) error {
		c.conn.SetReadDeadline(time.Now().Add(pongWait))
		return nil
	})
	for {
		_, message, err := c.conn.ReadMessage()
		if err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseGoingAway, websocket.CloseAbnormalClosure) {
				log.Printf("error: %v", err)
			}
			return
		}
		message = bytes.TrimSpace(bytes.ReplaceAll(message, []byte{'\n'}, []byte{' '}))
		c.hub.broadcast <- message
	}
}

// writePump sends the hub's messages, several per WebSocket message when
// they queue up, and the pings; it is the connection's one writer.
func (c *Client) writePump() {
	ticker := time.NewTicker(pingPeriod)
	defer func() {
		ticker.Stop()
		c.conn.Close()
	}()
	for {
		select {
		case message, ok := <-c.send:
			c.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if !ok {
				c.conn.WriteMessage(websocket.CloseMessage, []byte{})
				return
			}
			w, err := c.conn.NextWriter(websocket.TextMessage)
			if err != nil {
				return
			}
			w.Write(message)
			for n := len(c.send); n > 0; n-- {
				w.Write([]byte{'\n'})
				w.Write(<-c.send)
			}
			if err := w.Close(); err != nil {
				return
			}
		case <-ticker.C:
			c.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.conn.WriteMessage(websocket.PingMessage, nil); err != nil {
				return
			}
		}
	}
}

func serveWs(hub *Hub, w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.Println(err)
		return
	}
	c := &Client{hub: hub, conn: conn, send: make(chan []byte, 256)}
	hub.register <- c
	go c.writePump()
	go c.readPump()
}
