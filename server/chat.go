package server

import (
	"errors"

	"github.com/rallyws/rally"
)

// chatTopic is the hub topic of /chat. "#" is not allowed in /ws topics,
// so no /ws client can subscribe to it or publish on it.
const chatTopic = "#chat"

// chatOpen puts a /chat connection in the room before its first message
// is read, so that it gets everything sent after its handshake.
func (s *Server) chatOpen(c *rally.Conn) {
	s.opened("chat")(c)
	s.slow.add(c)
	if err := s.hub.Subscribe(c, chatTopic); err != nil && !errors.Is(err, rally.ErrClosed) {
		s.log.Warn("chat: other nodes not told", "err", err)
	}
}

// chatClose lets the slow-subscriber watch forget c.
func (s *Server) chatClose(c *rally.Conn, ce *rally.CloseError) {
	s.unwatch(c, ce)
	s.closed("chat")(c, ce)
}

// chatMessage relays a /chat message as it is (same bytes, same type) to
// every /chat client, the sender included, on every node.
func (s *Server) chatMessage(c *rally.Conn, typ rally.MessageType, p []byte) {
	res, err := s.hub.PublishFrom(c, chatTopic, typ, p)
	res.Add(c.Send(typ, p))
	s.published("chat", res, len(p))
	if err != nil {
		s.m.drops.WithLabelValues("broker").Inc()
		s.log.Warn("chat: other nodes not reached", "err", err)
	}
}
