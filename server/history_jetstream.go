package server

import (
	"errors"

	"github.com/rallyws/rally/pubsub/natsbroker"
)

func (s *Server) startJetStream(b *natsbroker.Broker) (historyStore, error) {
	return nil, errors.New("not yet")
}
