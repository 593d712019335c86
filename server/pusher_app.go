package server

import (
	"crypto/hmac"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/pusherwire"
	"github.com/rallyws/rally/internal/shrinkmap"
)

// PusherApp is one application served over the Pusher Channels protocol
// (/app/{key} and /apps/{id}/...): its credentials and its limits.
type PusherApp struct {
	ID, Key, Secret string
	// MaxConnections bounds the app's open connections on this node
	// (past it: pusher:error 4004). 0 means no limit of its own.
	MaxConnections int
	// ClientEventRate is how many client events per second one
	// connection may send (with a burst of as many, at least one).
	// Default 10.
	ClientEventRate float64
	// MaxMessageBytes bounds a client message and the data of an event
	// triggered over the HTTP API. Default 10 KiB.
	MaxMessageBytes int
	// MaxPresenceMembers bounds the members of one presence channel.
	// Default 100.
	MaxPresenceMembers int
	// CacheTTL is how long a cache channel keeps its last event for its
	// next subscribers; past it they get pusher:cache_miss. Default 30
	// minutes, as Pusher.
	CacheTTL time.Duration
	// Webhooks are the URLs told of the app's channel events.
	Webhooks []string
}

// ParsePusherApp parses ID:KEY:SECRET, optionally followed by limits,
// each ":LIMIT=VALUE", of max-connections, client-event-rate,
// max-message-bytes, max-presence-members and cache-ttl (seconds).
func ParsePusherApp(s string) (PusherApp, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return PusherApp{}, configErrorf("--pusher-app %q is not ID:KEY:SECRET", redactPusherApp(s))
	}
	app := PusherApp{ID: parts[0], Key: parts[1], Secret: parts[2]}
	for _, kv := range parts[3:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return PusherApp{}, configErrorf("--pusher-app %s: %q is not LIMIT=VALUE", app.ID, kv)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return PusherApp{}, configErrorf("--pusher-app %s: %s=%q is not a positive number", app.ID, k, v)
		}
		switch k {
		case "max-connections":
			app.MaxConnections = int(f)
		case "client-event-rate":
			app.ClientEventRate = f
		case "max-message-bytes":
			app.MaxMessageBytes = int(f)
		case "max-presence-members":
			app.MaxPresenceMembers = int(f)
		case "cache-ttl":
			if f == 0 || f > maxCacheTTL.Seconds() {
				return PusherApp{}, configErrorf("--pusher-app %s: cache-ttl=%s is not 0 < seconds <= %.0f", app.ID, v, maxCacheTTL.Seconds())
			}
			app.CacheTTL = time.Duration(f * float64(time.Second))
		default:
			return PusherApp{}, configErrorf("--pusher-app %s: unknown limit %q (max-connections, client-event-rate, max-message-bytes, max-presence-members, cache-ttl)", app.ID, k)
		}
	}
	return app, nil
}

// redactPusherApp hides the secret of an ID:KEY:SECRET that is being
// reported as wrong.
func redactPusherApp(s string) string {
	parts := strings.Split(s, ":")
	if len(parts) >= 3 {
		parts[2] = "…"
	}
	return strings.Join(parts, ":")
}

func (a *PusherApp) fill() {
	if a.ClientEventRate == 0 {
		a.ClientEventRate = 10
	}
	if a.MaxMessageBytes == 0 {
		a.MaxMessageBytes = 10 << 10
	}
	if a.MaxPresenceMembers == 0 {
		a.MaxPresenceMembers = 100
	}
	if a.CacheTTL <= 0 {
		a.CacheTTL = defaultCacheTTL
	}
}

// The time a cache channel keeps its last event: Pusher's by default, and
// at most a year.
const (
	defaultCacheTTL = 30 * time.Minute
	maxCacheTTL     = 365 * 24 * time.Hour
)

// sign returns hex(HMAC-SHA256(secret, msg)), Pusher's signature.
func (a *PusherApp) sign(msg string) string { return pusherwire.Sign(a.Secret, msg) }

// checkAuth reports whether auth is "KEY:" followed by the signature of
// msg, compared in constant time.
func (a *PusherApp) checkAuth(auth, msg string) bool {
	key, sig, ok := strings.Cut(auth, ":")
	if !ok || key != a.Key {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(a.sign(msg)))
}

// pusherApp is an app's state on this node.
type pusherApp struct {
	PusherApp
	mu    sync.Mutex
	conns int
	// The maps that grow with connections and channels give their room
	// back as they empty (shrinkmap): a crowd that left keeps none.
	sockets  shrinkmap.Map[string, *rally.Conn]              // socket_id: connection
	channels shrinkmap.Map[string, int]                      // channel: local subscriptions
	members  shrinkmap.Map[string, map[string]*pusherMember] // presence channel: user_id: member
	cache    map[string]cachedEvent                          // cache channel: its last event
	users    shrinkmap.Map[string, map[*rally.Conn]bool]     // signed-in user_id: its connections here
	hooks    *webhooks
	// budget is the server's memory budget (made after the apps), charged
	// for the members of this node's connections (subscriptions) and the
	// cached events (recovery): see mem.
	budget **rally.MemoryBudget
}

// pusherMember is one user of a presence channel: what it said of itself and
// how many of its connections are subscribed.
type pusherMember struct {
	info   []byte // JSON, or nil
	conns  int
	charge int64 // to the budget's subscriptions
}

func newPusherApp(a PusherApp, budget **rally.MemoryBudget) *pusherApp {
	a.fill()
	return &pusherApp{
		PusherApp: a,
		budget:    budget,
		cache:     map[string]cachedEvent{},
	}
}

// mem is the server's memory budget (nil, which charges nothing, in
// tests of the app alone).
func (a *pusherApp) mem() *rally.MemoryBudget {
	if a.budget == nil {
		return nil
	}
	return *a.budget
}

// topic is the hub topic of one of the app's channels.
func (a *pusherApp) topic(channel string) string {
	return "pusher/" + a.ID + "/" + channel
}

// What a presence member and a cached event hold beside their strings, in
// the maps that keep them, on a 64-bit machine (charged to the budget).
const (
	pusherMemberCost = 192
	pusherCacheCost  = 104
)

// cachedEvent is the last event of a cache channel and when it came.
type cachedEvent struct {
	frame []byte
	at    time.Duration // since pusherEpoch
}

// memberCharge is what a member of channel, user with info, holds.
func pusherMemberCharge(channel, user string, info []byte) int64 {
	return pusherMemberCost + int64(len(channel)+len(user)+len(info))
}

// cacheCharge is what the cached event b of channel holds.
func pusherCacheCharge(channel string, b []byte) int64 {
	return pusherCacheCost + int64(len(channel)+len(b))
}

// reserveCache charges the budget for the events of frames (channel:
// frame) that cache channels would keep, before they are published, and
// reports whether it had room; storeCache keeps them then.
func (a *pusherApp) reserveCache(frames []pusherFrameOf) bool {
	var n int64
	for _, f := range frames {
		if isCache(f.channel) {
			n += pusherCacheCharge(f.channel, f.frame)
		}
	}
	return a.mem().Reserve(rally.MemoryRecovery, n)
}

// pusherFrameOf is an event's frame on one channel.
type pusherFrameOf struct {
	channel string
	frame   []byte
}

// storeCache keeps b as the last event of cache channel ch, its charge
// made (reserveCache), giving back the charge of the event it replaces.
func (a *pusherApp) storeCache(ch string, b []byte) {
	if !isCache(ch) {
		return
	}
	a.mu.Lock()
	a.dropCacheLocked(ch)
	a.cache[ch] = cachedEvent{b, time.Since(pusherEpoch)}
	a.mu.Unlock()
}

// keep keeps b as the last event of channel ch, if it is a cache channel,
// charging the budget. Without room, ch keeps no event (its next
// subscriber gets cache_miss, not an older event) and keep reports false.
func (a *pusherApp) keep(ch string, b []byte) bool {
	if !isCache(ch) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropCacheLocked(ch)
	if !a.mem().Reserve(rally.MemoryRecovery, pusherCacheCharge(ch, b)) {
		return false
	}
	a.cache[ch] = cachedEvent{b, time.Since(pusherEpoch)}
	return true
}

// cached returns the last event of cache channel ch, or nil if it has
// none younger than CacheTTL.
func (a *pusherApp) cached(ch string) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.cache[ch]
	if !ok {
		return nil
	}
	if time.Since(pusherEpoch)-e.at >= a.CacheTTL {
		a.dropCacheLocked(ch)
		return nil
	}
	return e.frame
}

// expireCache forgets the cached events older than CacheTTL, giving back
// their charge.
func (a *pusherApp) expireCache() {
	now := time.Since(pusherEpoch)
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch, e := range a.cache {
		if now-e.at >= a.CacheTTL {
			a.dropCacheLocked(ch)
		}
	}
	if len(a.cache) == 0 {
		a.cache = map[string]cachedEvent{} // a Go map never shrinks
	}
}

// dropCacheLocked forgets the event cache channel ch keeps, if any, and
// gives back its charge. The caller holds a.mu.
func (a *pusherApp) dropCacheLocked(ch string) {
	if e, ok := a.cache[ch]; ok {
		a.mem().Release(rally.MemoryRecovery, pusherCacheCharge(ch, e.frame))
		delete(a.cache, ch)
	}
}

// clientEventBurst is how many client events a connection may send at
// once: as many as a second allows, and at least one, so that a rate
// below one a second lets one event through every 1/rate seconds.
func (a *PusherApp) clientEventBurst() float64 { return max(a.ClientEventRate, 1) }
