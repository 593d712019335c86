package main

import (
	"strings"
	"time"
)

// historyConfigFile sets every flag of history and presence, none at its
// default; historyConfigChecks says whether each was set.
const historyConfigFile = `
history = ["chat.*", "orders.*"]
history-size = 50
history-age = "2m"
recovery-limit = 10000
history-dir = "/var/lib/rally"
presence = ["room.*"]
presence-ttl = "45s"
`

func historyConfigChecks(s *serveSetup) map[string]bool {
	h, p := s.cfg.History, s.cfg.Presence
	return map[string]bool{
		"history":        strings.Join(h.Topics, " ") == "chat.* orders.*",
		"history-size":   h.Size == 50,
		"history-age":    h.Age == 2*time.Minute,
		"recovery-limit": h.RecoveryLimit == 10000,
		"history-dir":    h.StoreDir == "/var/lib/rally",
		"presence":       strings.Join(p.Topics, " ") == "room.*",
		"presence-ttl":   p.TTL == 45*time.Second,
	}
}
