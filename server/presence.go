package server

import (
	"errors"
	"time"
)

// PresenceConfig tells subscribers of some topics who else subscribes
// (docs/PROTOCOL.md, "Presence").
type PresenceConfig struct {
	// Topics are the patterns of the topics with presence. None: no
	// presence.
	Topics []string
	// TTL is how long the members of a node that stopped answering are
	// kept (with NATS): a node announces its members every TTL/3.
	// Default 30 s.
	TTL time.Duration
}

func (p *PresenceConfig) fill() error {
	if p.TTL < 0 {
		return errors.New("rally serve: --presence-ttl must be positive")
	}
	if p.TTL == 0 {
		p.TTL = 30 * time.Second
	}
	return nil
}

type presence struct{}

func (s *Server) startPresence() error { return nil }
