// Command rally is rally's own peer, written the way rally's docs show for
// speed: a rally.Server (callbacks, no read loop to write) whose echo
// replies with the non-blocking Send, which the server corks around each
// batch of frames it reads, so a batch of replies leaves in one write. The
// chat room frames each message once (PreparedMessage) and sends it to
// every member with the non-blocking SendPrepared, each member joining the
// sender's cork (JoinCork) so that what one read batch publishes reaches a
// member in one write.
//
// With -compress both negotiate permessage-deflate, the server keeping no
// context between messages (ServerNoContextTakeover), so that a chat
// message is compressed once for all its members.
//
// With -event-loop it is the rally-loop peer: the same code, the
// connections driven by rally's event loops (rally.Server.EventLoop)
// instead of a goroutine each.
//
// With -hub the chat goes through pubsub.Hub as a user writes it: Open
// subscribes the connection to one topic, Message publishes what it
// received with Hub.PublishFrom (publish-to-self on, so the sender gets
// its own message as in the other peers' rooms). That is the rally-hub
// peer, and with -event-loop the rally-hub-loop peer.
//
// It serves net/http/pprof beside /echo and /chat, for the runner's
// -profile mode.
package main

import (
	"flag"
	"net/http"
	_ "net/http/pprof" // the runner's -profile reads the server's CPU profile

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
	"github.com/rallyws/rally/pubsub"
)

func main() {
	eventLoop := flag.Bool("event-loop", false, "serve the connections on event loops (rally.Server.EventLoop): the rally-loop peer")
	loops := flag.Int("loops", 0, "with -event-loop: how many event loops (rally.Server.EventLoops; 0: rally's default)")
	hub := flag.Bool("hub", false, "chat through pubsub.Hub (Subscribe on Open, PublishFrom in Message): the rally-hub peers")
	addr, compress := peerflag.Parse()
	var deflate *rally.CompressionOptions
	if compress {
		deflate = &rally.CompressionOptions{ServerNoContextTakeover: true}
	}
	echo := &rally.Server{EventLoop: *eventLoop, EventLoops: *loops, Options: &rally.AcceptOptions{Compression: deflate}, Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Send(typ, p)
	}}
	var members room.Room[*rally.Conn]
	chat := &rally.Server{
		EventLoop:  *eventLoop,
		EventLoops: *loops,
		// A round of the 64 KiB burst chat (8 messages from each of 32
		// clients) queues 16 MiB and its frame headers per member; rally's
		// default send buffer (1 MiB) would drop past it, and a dropped
		// delivery stalls the round for good. The other Go peers have no
		// limit (their writes block); Bun's is 16 MiB.
		Options: &rally.AcceptOptions{Compression: deflate, ConnOptions: rally.ConnOptions{BufferLimit: 64 << 20}},
		Open:    members.Join,
		Close:   func(c *rally.Conn, _ *rally.CloseError) { members.Leave(c) },
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			pm, err := rally.NewPreparedMessage(typ, p)
			if err != nil {
				return
			}
			for _, m := range members.Members() {
				m.JoinCork(c)
				m.SendPrepared(pm)
			}
		},
	}
	if *hub {
		h, err := pubsub.NewHub(&pubsub.Options{PublishToSelf: true})
		if err != nil {
			peerflag.Fail(err)
		}
		chat.Open = func(c *rally.Conn) { h.Subscribe(c, "room") }
		chat.Close = nil // the hub forgets a connection when it ends
		chat.Message = func(c *rally.Conn, typ rally.MessageType, p []byte) {
			h.PublishFrom(c, "room", typ, p)
		}
	}
	http.Handle("/echo", echo)
	http.Handle("/chat", chat)
	peerflag.Fail(http.ListenAndServe(addr, nil))
}
