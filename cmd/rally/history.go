package main

import (
	"flag"
	"time"

	"github.com/rallyws/rally/server"
)

// The flags of `rally serve` for history, recovery and presence;
// registered by historyFlags, listed in the help by serveGroups.
var historyServeFlags = []serveFlag{
	{name: "history", env: "RALLY_HISTORY", value: "PATTERNS"},
	{name: "history-size", env: "RALLY_HISTORY_SIZE", value: "N", check: positive},
	{name: "history-age", env: "RALLY_HISTORY_AGE", value: "DURATION", check: positive},
	{name: "recovery-limit", env: "RALLY_RECOVERY_LIMIT", value: "N", check: positive},
	{name: "history-dir", env: "RALLY_HISTORY_DIR", value: "DIR"},
	{name: "presence", env: "RALLY_PRESENCE", value: "PATTERNS"},
	{name: "presence-ttl", env: "RALLY_PRESENCE_TTL", value: "DURATION", check: positive},
}

// historyFlags registers the flags of history and presence on fs.
func historyFlags(fs *flag.FlagSet, h *server.HistoryConfig, p *server.PresenceConfig) {
	fs.Var((*list)(&h.Topics), "history", "topics (patterns, comma-separated: \"chat.*,orders.*\") whose last messages are\nkept, so that a client that reconnects gets what it missed (alone: in\nmemory; with NATS: in JetStream, shared by the nodes)")
	fs.IntVar(&h.Size, "history-size", 100, "messages kept per history topic at most")
	fs.DurationVar(&h.Age, "history-age", 10*time.Minute, "how long a message of a history topic is kept at most")
	fs.IntVar(&h.RecoveryLimit, "recovery-limit", 1000, "messages one reconnecting client may be replayed at most; past it\nit is told recovered:false")
	fs.StringVar(&h.StoreDir, "history-dir", "", "where the embedded NATS server keeps JetStream data (the history)\n(default: rally-jetstream-HOST_PORT in the system's temporary directory)")
	fs.Var((*list)(&p.Topics), "presence", "topics (patterns, comma-separated) whose subscribers are told who else\nsubscribes (joins, leaves, a presence request)")
	fs.DurationVar(&p.TTL, "presence-ttl", 30*time.Second, "with NATS, how long the members of a node that stopped announcing\nthemselves are kept")
}
