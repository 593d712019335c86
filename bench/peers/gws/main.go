// Command gws is the lxzan/gws peer, as its README's "Best Practice"
// shows it: an Upgrader on net/http, ReadLoop in a goroutine of its own,
// WriteMessage from OnMessage, and a Broadcaster (the README's way to send
// one message to many) for the chat room. Messages are handled in order
// (no ParallelEnabled), as an echo needs. Compression is off unless
// -compress is given: then PermessageDeflate is on, neither side keeping
// context between messages.
package main

import (
	"net/http"

	"github.com/lxzan/gws"
	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
)

type echo struct{ gws.BuiltinEventHandler }

func (echo) OnPing(c *gws.Conn, p []byte) { c.WritePong(p) }

func (echo) OnMessage(c *gws.Conn, m *gws.Message) {
	defer m.Close()
	c.WriteMessage(m.Opcode, m.Bytes())
}

type chatRoom struct {
	gws.BuiltinEventHandler
	members room.Room[*gws.Conn]
}

func (r *chatRoom) OnOpen(c *gws.Conn)           { r.members.Join(c) }
func (r *chatRoom) OnClose(c *gws.Conn, _ error) { r.members.Leave(c) }
func (r *chatRoom) OnPing(c *gws.Conn, p []byte) { c.WritePong(p) }
func (r *chatRoom) OnMessage(_ *gws.Conn, m *gws.Message) {
	defer m.Close()
	b := gws.NewBroadcaster(m.Opcode, m.Bytes())
	defer b.Close()
	for _, c := range r.members.Members() {
		b.Broadcast(c)
	}
}

func main() {
	addr, compress := peerflag.Parse()
	opts := &gws.ServerOption{Recovery: gws.Recovery}
	if compress {
		opts.PermessageDeflate = gws.PermessageDeflate{Enabled: true}
	}
	handle := func(up *gws.Upgrader) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r)
			if err != nil {
				return
			}
			go c.ReadLoop()
		}
	}
	http.HandleFunc("/echo", handle(gws.NewUpgrader(echo{}, opts)))
	http.HandleFunc("/chat", handle(gws.NewUpgrader(&chatRoom{}, opts)))
	peerflag.Fail(http.ListenAndServe(addr, nil))
}
