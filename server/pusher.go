package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/pusherwire"
	"github.com/rallyws/rally/internal/smallmap"
	"github.com/rallyws/rally/pubsub"
)

// The Pusher Channels protocol, version 7: /app/{key} for clients.

// Error codes of pusher:error (the protocol's): 4000-4099 do not
// reconnect, 4100-4199 reconnect after a while, 4200-4299 reconnect at
// once, 4300+ are errors that keep the connection.
const (
	pusherUnknownApp      = 4001
	pusherBadProtocol     = 4007
	pusherOverQuota       = 4004
	pusherUnauthorized    = 4009
	pusherOverCapacity    = 4100
	pusherReconnect       = 4200
	pusherClientEventRate = 4301
	pusherGeneric         = 4302
)

// pusherActivityTimeout is the activity_timeout told to clients, in
// seconds: a client pings after that long without a message.
const pusherActivityTimeout = 120

// pusherConn is what the server keeps of one /app/{key} connection
// (kept small: an idle connection is mostly this).
type pusherConn struct {
	app      *pusherApp
	socketID string
	subs     smallmap.Map[string] // channel: user_id on presence channels (most have one)
	user     string               // signed in user, or ""
	last     time.Duration        // when tokens was counted, since pusherEpoch
	tokens   float32              // client events left in the bucket
	refuse   uint16               // pusher:error code to send on open, then close
}

// pusherEpoch is the origin of pusherConn.last (monotonic).
var pusherEpoch = time.Now()

// refuseReason is the message of a pusher:error that refuses a connection.
func refuseReason(code uint16) string {
	switch code {
	case pusherUnknownApp:
		return "App key not in this cluster"
	case pusherOverCapacity:
		return "Over capacity: the server is full, retry later"
	case pusherBadProtocol:
		return "Unsupported protocol version"
	case pusherOverQuota:
		return "Application is over connection quota"
	}
	return "refused"
}

// pusherMsg is one message of the protocol.
type pusherMsg struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	UserID  string          `json:"user_id,omitempty"`
}

func newSocketID() string {
	a, _ := rand.Int(rand.Reader, big.NewInt(1e12))
	b, _ := rand.Int(rand.Reader, big.NewInt(1e12))
	return a.String() + "." + b.String()
}

// pusherAuthorize accepts every handshake on /app/{key}: an unknown key
// or protocol is answered in the protocol (pusher:error, then close).
func (s *Server) pusherAuthorize(r *http.Request) (any, *rally.Rejection) {
	pc := &pusherConn{socketID: newSocketID()}
	app := s.pusherKeys[r.PathValue("key")]
	if app == nil {
		pc.refuse = pusherUnknownApp
		return pc, nil
	}
	pc.app = app
	pc.tokens, pc.last = float32(app.clientEventBurst()), time.Since(pusherEpoch)
	if r.Context().Value(overCapacity{}) != nil {
		pc.refuse = pusherOverCapacity
		return pc, nil
	}
	if p, err := strconv.Atoi(r.URL.Query().Get("protocol")); err != nil || p < 5 || p > 7 {
		pc.refuse = pusherBadProtocol
	}
	return pc, nil
}

func (s *Server) pusherOpen(c *rally.Conn) {
	s.m.connections.WithLabelValues("pusher").Inc()
	s.m.connectionsTotal.WithLabelValues("pusher").Inc()
	s.countOpened(c)
	pc := c.Data().(*pusherConn)
	if pc.refuse == 0 {
		a := pc.app
		a.mu.Lock()
		if a.MaxConnections > 0 && a.conns >= a.MaxConnections {
			pc.refuse = pusherOverQuota
		} else {
			a.conns++
			a.sockets.Set(pc.socketID, c)
		}
		a.mu.Unlock()
	}
	if pc.refuse != 0 {
		pusherError(c, int(pc.refuse), refuseReason(pc.refuse))
		c.Close(pc.refuse, refuseReason(pc.refuse))
		return
	}
	s.slow.add(c)
	data, _ := json.Marshal(map[string]any{"socket_id": pc.socketID, "activity_timeout": pusherActivityTimeout})
	pusherSend(c, "pusher:connection_established", "", data)
}

func (s *Server) pusherClose(c *rally.Conn, ce *rally.CloseError) {
	pc := c.Data().(*pusherConn)
	if a := pc.app; a != nil && pc.refuse == 0 {
		for _, ch := range pc.subs.Keys() {
			s.pusherLeave(c, pc, ch)
		}
		a.mu.Lock()
		a.conns--
		a.sockets.Delete(pc.socketID)
		a.signOut(c, pc.user)
		a.mu.Unlock()
		s.unwatch(c, ce)
	}
	s.conns.Add(-1)
	s.m.closed("pusher", ce.Code)
	s.countClosed(c)
	if s.closedHook != nil {
		s.closedHook()
	}
}

// pusherSend sends one event; data is JSON (a string, for events of the
// server).
func pusherSend(c *rally.Conn, event, channel string, data []byte) {
	c.Send(rally.Text, pusherFrame(event, channel, data, ""))
}

// pusherFrame builds {"event":E,"channel":C,"data":D,"user_id":U}, with
// data JSON as it is, the data made a JSON string when it is an object
// (the protocol's data is a string of JSON).
func pusherFrame(event, channel string, data []byte, userID string) []byte {
	if len(data) > 0 && data[0] != '"' {
		data, _ = json.Marshal(string(data))
	}
	b, _ := json.Marshal(pusherMsg{Event: event, Channel: channel, Data: data, UserID: userID})
	return b
}

func pusherError(c *rally.Conn, code int, message string) {
	data, _ := json.Marshal(map[string]any{"code": code, "message": message})
	b, _ := json.Marshal(pusherMsg{Event: "pusher:error", Data: data})
	c.Send(rally.Text, b)
}

func pusherSubscriptionError(c *rally.Conn, channel, typ, message string, status int) {
	data, _ := json.Marshal(map[string]any{"type": typ, "error": message, "status": status})
	pusherSend(c, "pusher:subscription_error", channel, data)
}

func (s *Server) pusherMessage(c *rally.Conn, typ rally.MessageType, p []byte) {
	pc := c.Data().(*pusherConn)
	if pc.refuse != 0 {
		return
	}
	if typ != rally.Text {
		pusherError(c, pusherGeneric, "the protocol is JSON text messages")
		return
	}
	if len(p) > pc.app.MaxMessageBytes {
		s.count("invalid", len(p))
		pusherError(c, pusherGeneric, fmt.Sprintf("message larger than %d bytes, the app's limit", pc.app.MaxMessageBytes))
		return
	}
	var m pusherMsg
	if err := json.Unmarshal(p, &m); err != nil {
		s.count("invalid", len(p))
		pusherError(c, pusherGeneric, "message is not a JSON object of the protocol")
		return
	}
	s.count("pusher", len(p))
	switch {
	case m.Event == "pusher:ping":
		pusherSend(c, "pusher:pong", "", []byte(`"{}"`))
	case m.Event == "pusher:pong":
	case m.Event == "pusher:subscribe":
		s.pusherSubscribe(c, pc, m.Data)
	case m.Event == "pusher:unsubscribe":
		var d struct{ Channel string }
		if pusherwire.DataObject(m.Data, &d) == nil && d.Channel != "" {
			if _, ok := pc.subs.Get(d.Channel); ok {
				s.pusherLeave(c, pc, d.Channel)
			}
		}
	case m.Event == "pusher:signin":
		s.pusherSignin(c, pc, m.Data)
	case strings.HasPrefix(m.Event, "client-"):
		s.pusherClientEvent(c, pc, &m)
	default:
		pusherError(c, pusherGeneric, "unknown event "+strconv.Quote(m.Event))
	}
}

// validChannel checks a channel name as Pusher does: 1 to 164 bytes of
// letters, digits and _-=@,.;
func validChannel(ch string) bool {
	ch = strings.TrimPrefix(ch, userChannel)
	if ch == "" || len(ch) > 164 {
		return false
	}
	for i := 0; i < len(ch); i++ {
		b := ch[i]
		if 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("_-=@,.;", b) >= 0 {
			continue
		}
		return false
	}
	return true
}

// userChannel starts the channel of a signed-in user's own events (the
// HTTP API's send to user): only that user's connections subscribe.
const userChannel = "#server-to-user-"

func isPresence(ch string) bool { return strings.HasPrefix(ch, "presence-") }
func isPrivate(ch string) bool  { return strings.HasPrefix(ch, "private-") || isPresence(ch) }
func isCache(ch string) bool {
	for _, p := range []string{"cache-", "private-cache-", "private-encrypted-cache-", "presence-cache-"} {
		if strings.HasPrefix(ch, p) {
			return true
		}
	}
	return false
}

func (s *Server) pusherSubscribe(c *rally.Conn, pc *pusherConn, raw json.RawMessage) {
	var d struct {
		Channel     string `json:"channel"`
		Auth        string `json:"auth"`
		ChannelData string `json:"channel_data"`
	}
	if err := pusherwire.DataObject(raw, &d); err != nil || !validChannel(d.Channel) {
		pusherSubscriptionError(c, d.Channel, "InvalidChannel", "invalid channel name", 400)
		return
	}
	a := pc.app
	if _, ok := pc.subs.Get(d.Channel); ok {
		s.afterInterest(func() { pusherSend(c, "pusher_internal:subscription_succeeded", d.Channel, []byte(`"{}"`)) })
		return
	}
	if s.cfg.MaxSubscriptions > 0 && pc.subs.Len() >= s.cfg.MaxSubscriptions {
		pusherSubscriptionError(c, d.Channel, "LimitReached", "a connection may subscribe to at most "+strconv.Itoa(s.cfg.MaxSubscriptions)+" channels", 400)
		return
	}
	var user string
	var info []byte
	charged := false // a presence member's charge was made
	if id, ok := strings.CutPrefix(d.Channel, userChannel); ok && id != pc.user {
		pusherSubscriptionError(c, d.Channel, "AuthError", "only the user "+id+", signed in, may subscribe to "+d.Channel, 401)
		return
	}
	if isPrivate(d.Channel) {
		msg := pc.socketID + ":" + d.Channel
		if isPresence(d.Channel) {
			msg += ":" + d.ChannelData
		}
		if !a.checkAuth(d.Auth, msg) {
			pusherSubscriptionError(c, d.Channel, "AuthError", "invalid signature", 401)
			pusherError(c, pusherUnauthorized, "Invalid signature: subscription to "+d.Channel+" refused")
			return
		}
	}
	if isPresence(d.Channel) {
		var cd struct {
			UserID   json.RawMessage `json:"user_id"`
			UserInfo json.RawMessage `json:"user_info"`
		}
		if err := json.Unmarshal([]byte(d.ChannelData), &cd); err != nil || len(cd.UserID) == 0 {
			pusherSubscriptionError(c, d.Channel, "AuthError", "channel_data needs a user_id", 400)
			return
		}
		user = string(cd.UserID)
		if cd.UserID[0] == '"' {
			json.Unmarshal(cd.UserID, &user)
		}
		info = cd.UserInfo
		a.mu.Lock()
		ms, _ := a.members.Get(d.Channel)
		fresh := ms[user] == nil
		full := len(ms) >= a.MaxPresenceMembers && fresh
		a.mu.Unlock()
		if full {
			pusherSubscriptionError(c, d.Channel, "LimitReached", "presence channel full: "+strconv.Itoa(a.MaxPresenceMembers)+" members", 400)
			return
		}
		// A member new to this node is charged before it is kept.
		if fresh {
			if !a.mem().Reserve(rally.MemorySubscriptions, pusherMemberCharge(d.Channel, user, info)) {
				s.m.refusals.WithLabelValues("presence_memory").Inc()
				pusherSubscriptionError(c, d.Channel, "LimitReached", "the server's memory budget has no room for another presence member", 503)
				return
			}
			charged = true
		}
	}
	topic := a.topic(d.Channel)
	if err := s.hub.Subscribe(c, topic); err != nil {
		closed, noMemory := errors.Is(err, rally.ErrClosed), errors.Is(err, pubsub.ErrNoMemory)
		if charged && (closed || noMemory) { // not subscribed: no member
			a.mem().Release(rally.MemorySubscriptions, pusherMemberCharge(d.Channel, user, info))
		}
		switch {
		case closed:
			return
		case noMemory:
			s.m.refusals.WithLabelValues("subscriptions_memory").Inc()
			pusherSubscriptionError(c, d.Channel, "LimitReached", "the server's memory budget has no room for another subscription", 503)
			return
		}
		s.log.Warn("pusher subscribe: other nodes not told", "channel", d.Channel, "err", err)
	}
	pc.subs.Set(d.Channel, user)
	s.subs.Add(1)
	s.m.subscriptions.Inc()
	cl := s.pusherCluster
	a.mu.Lock()
	subs, _ := a.channels.Get(d.Channel)
	subs++
	a.channels.Set(d.Channel, subs)
	occupied := subs == 1 && cl.subs(a.ID, d.Channel) == 0
	var added, fresh bool
	if isPresence(d.Channel) {
		ms, _ := a.members.Get(d.Channel)
		if ms == nil {
			ms = map[string]*pusherMember{}
			a.members.Set(d.Channel, ms)
		}
		m := ms[user]
		if m == nil {
			m = &pusherMember{info: info}
			ms[user] = m
			fresh = true
			added = !cl.hasMember(a.ID, d.Channel, user)
			switch n := pusherMemberCharge(d.Channel, user, info); {
			case charged:
				m.charge = n
			case a.mem().Reserve(rally.MemorySubscriptions, n):
				// Another connection of user was a member at the check
				// and left since.
				m.charge = n
			}
		} else if charged { // another connection of user made it first
			a.mem().Release(rally.MemorySubscriptions, pusherMemberCharge(d.Channel, user, info))
		}
		m.conns++
	}
	a.mu.Unlock()
	cl.tell(pusherNote{Ev: "subs", App: a.ID, Channel: d.Channel, Subs: subs})
	if fresh {
		cl.tell(pusherNote{Ev: "member", App: a.ID, Channel: d.Channel, User: user, Info: orNull(info), On: true})
	}
	if occupied {
		a.hook(hookEvent{Name: "channel_occupied", Channel: d.Channel})
	}
	if added {
		md, _ := json.Marshal(map[string]any{"user_id": user, "user_info": json.RawMessage(orNull(info))})
		s.hub.PublishFrom(c, topic, rally.Text, pusherFrame("pusher_internal:member_added", d.Channel, md, ""))
		a.hook(hookEvent{Name: "member_added", Channel: d.Channel, UserID: user})
	}
	// subscription_succeeded once NATS knows of the node's subscription:
	// the client gets whatever any node triggers after it. The members
	// and the cached event are read then, the latest.
	s.afterInterest(func() { s.pusherSubscribed(c, a, d.Channel) })
}

// pusherSubscribed tells c it subscribes to channel: subscription_succeeded
// (with the members on a presence channel), then on a cache channel its
// last event or cache_miss.
func (s *Server) pusherSubscribed(c *rally.Conn, a *pusherApp, channel string) {
	data := []byte(`"{}"`)
	if isPresence(channel) {
		data = presenceData(s.pusherMembers(a, channel))
	}
	pusherSend(c, "pusher_internal:subscription_succeeded", channel, data)
	if !isCache(channel) {
		return
	}
	if cached := a.cached(channel); cached != nil {
		c.Send(rally.Text, cached)
		return
	}
	pusherSend(c, "pusher:cache_miss", channel, nil)
	a.hook(hookEvent{Name: "cache_miss", Channel: channel})
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// presenceData is the data of a presence channel's subscription_succeeded.
func presenceData(ms map[string]json.RawMessage) []byte {
	ids := make([]string, 0, len(ms))
	for id := range ms {
		ids = append(ids, id)
	}
	b, _ := json.Marshal(map[string]any{"presence": map[string]any{"ids": ids, "hash": ms, "count": len(ids)}})
	return b
}

// pusherMembers is the members of an app's presence channel on every
// node: user_id: user_info.
func (s *Server) pusherMembers(a *pusherApp, ch string) map[string]json.RawMessage {
	all := map[string]map[string]json.RawMessage{ch: {}}
	a.mu.Lock()
	ms, _ := a.members.Get(ch)
	for u, m := range ms {
		all[ch][u] = orNull(m.info)
	}
	a.mu.Unlock()
	s.pusherCluster.addRemote(a.ID, nil, all)
	return all[ch]
}

// pusherChannelCounts is the subscriptions to each of an app's occupied
// channels, on every node.
func (s *Server) pusherChannelCounts(a *pusherApp) map[string]int {
	a.mu.Lock()
	out := make(map[string]int, a.channels.Len())
	for ch, n := range a.channels.All() {
		out[ch] = n
	}
	a.mu.Unlock()
	s.pusherCluster.addRemote(a.ID, out, nil)
	return out
}

// pusherLeave ends c's subscription to channel.
func (s *Server) pusherLeave(c *rally.Conn, pc *pusherConn, channel string) {
	a := pc.app
	user, _ := pc.subs.Get(channel)
	pc.subs.Delete(channel)
	topic := a.topic(channel)
	s.hub.Unsubscribe(c, topic)
	s.subs.Add(-1)
	s.m.subscriptions.Dec()
	cl := s.pusherCluster
	a.mu.Lock()
	subs, _ := a.channels.Get(channel)
	subs--
	if subs <= 0 {
		a.channels.Delete(channel)
	} else {
		a.channels.Set(channel, subs)
	}
	vacated := subs <= 0 && cl.subs(a.ID, channel) == 0
	gone, removed := false, false
	if isPresence(channel) {
		ms, _ := a.members.Get(channel)
		if m := ms[user]; m != nil {
			m.conns--
			if m.conns == 0 {
				delete(ms, user)
				a.mem().Release(rally.MemorySubscriptions, m.charge)
				gone = true
				removed = !cl.hasMember(a.ID, channel, user)
			}
		}
		if len(ms) == 0 {
			a.members.Delete(channel)
		}
	}
	a.mu.Unlock()
	cl.tell(pusherNote{Ev: "subs", App: a.ID, Channel: channel, Subs: max(subs, 0)})
	if gone {
		cl.tell(pusherNote{Ev: "member", App: a.ID, Channel: channel, User: user})
	}
	if removed {
		md, _ := json.Marshal(map[string]string{"user_id": user})
		s.hub.Publish(topic, rally.Text, pusherFrame("pusher_internal:member_removed", channel, md, ""))
		a.hook(hookEvent{Name: "member_removed", Channel: channel, UserID: user})
	}
	if vacated {
		a.hook(hookEvent{Name: "channel_vacated", Channel: channel})
	}
}

func (s *Server) pusherClientEvent(c *rally.Conn, pc *pusherConn, m *pusherMsg) {
	a := pc.app
	if !isPrivate(m.Channel) || strings.HasPrefix(m.Channel, "private-encrypted-") {
		pusherError(c, pusherGeneric, "client events are for private and presence channels only (not encrypted ones)")
		return
	}
	user, ok := pc.subs.Get(m.Channel)
	if !ok {
		pusherError(c, pusherGeneric, "client event on "+m.Channel+", a channel this connection is not subscribed to")
		return
	}
	now := time.Since(pusherEpoch)
	pc.tokens = float32(min(a.clientEventBurst(), float64(pc.tokens)+(now-pc.last).Seconds()*a.ClientEventRate))
	pc.last = now
	if pc.tokens < 1 {
		s.m.refusals.WithLabelValues("pusher_client_event_rate").Inc()
		pusherError(c, pusherClientEventRate, "Client event rejected due to rate limit")
		return
	}
	pc.tokens--
	// Relayed as it came: the data is the client's.
	b, _ := json.Marshal(pusherMsg{Event: m.Event, Channel: m.Channel, Data: m.Data, UserID: user})
	if !a.reserveCache([]pusherFrameOf{{m.Channel, b}}) {
		s.m.refusals.WithLabelValues("pusher_cache_memory").Inc()
		pusherError(c, pusherGeneric, "Client event rejected: the server's memory budget has no room for the cache channel's last event")
		return
	}
	res, err := s.hub.PublishFrom(c, a.topic(m.Channel), rally.Text, b)
	s.published("pusher", res, len(b))
	if err != nil {
		s.log.Warn("pusher client event: other nodes not reached", "err", err)
	}
	a.storeCache(m.Channel, b)
	s.pusherCluster.tellCache(a.ID, m.Channel, b)
	a.hook(hookEvent{Name: "client_event", Channel: m.Channel, Event: m.Event, Data: string(m.Data), SocketID: pc.socketID, UserID: user})
}

func (s *Server) pusherSignin(c *rally.Conn, pc *pusherConn, raw json.RawMessage) {
	var d struct {
		Auth     string `json:"auth"`
		UserData string `json:"user_data"`
	}
	a := pc.app
	if err := pusherwire.DataObject(raw, &d); err != nil || !a.checkAuth(d.Auth, pc.socketID+"::user::"+d.UserData) {
		pusherError(c, pusherUnauthorized, "Invalid signature: sign-in refused")
		return
	}
	var u struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal([]byte(d.UserData), &u) != nil || len(u.ID) == 0 {
		pusherError(c, pusherUnauthorized, "user_data needs an id")
		return
	}
	id := string(u.ID)
	if u.ID[0] == '"' {
		json.Unmarshal(u.ID, &id)
	}
	a.mu.Lock()
	a.signOut(c, pc.user)
	pc.user = id
	conns, _ := a.users.Get(id)
	if conns == nil {
		conns = map[*rally.Conn]bool{}
		a.users.Set(id, conns)
	}
	conns[c] = true
	a.mu.Unlock()
	data, _ := json.Marshal(map[string]string{"user_data": d.UserData})
	pusherSend(c, "pusher:signin_success", "", data)
}

// signOut forgets that c is signed in as user ("": it is not), and the
// user once none of its connections here is. The caller holds a.mu.
func (a *pusherApp) signOut(c *rally.Conn, user string) {
	if user == "" {
		return
	}
	conns, _ := a.users.Get(user)
	delete(conns, c)
	if len(conns) == 0 {
		a.users.Delete(user)
	}
}

// terminate closes the connections of a signed-in user on this node.
func (a *pusherApp) terminate(user string) {
	a.mu.Lock()
	signedIn, _ := a.users.Get(user)
	conns := make([]*rally.Conn, 0, len(signedIn))
	for c := range signedIn {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	for _, c := range conns {
		pusherError(c, pusherUnauthorized, "connections of the user terminated")
		go c.Close(pusherUnauthorized, "terminated")
	}
}

// startPusher makes the apps' state and the /app/{key} server.
func (s *Server) startPusher(conn rally.ConnOptions, compression *rally.CompressionOptions) error {
	if len(s.cfg.PusherApps) == 0 {
		return nil
	}
	s.pusherKeys, s.pusherIDs = map[string]*pusherApp{}, map[string]*pusherApp{}
	ctx, cancel := context.WithCancel(context.Background())
	s.closers = append(s.closers, cancel)
	for _, app := range s.cfg.PusherApps {
		if app.ID == "" || app.Key == "" || app.Secret == "" {
			return configErrorf("--pusher-app needs an id, a key and a secret")
		}
		if strings.ContainsAny(app.ID, "/?#") || strings.ContainsAny(app.Key, "/?#") {
			return configErrorf("--pusher-app %q: an id or key cannot hold / ? or #", app.ID)
		}
		if s.pusherKeys[app.Key] != nil || s.pusherIDs[app.ID] != nil {
			return configErrorf("--pusher-app %s: two apps share an id or a key", app.ID)
		}
		a := newPusherApp(app, &s.budget)
		if len(a.Webhooks) > 0 {
			a.hooks = newWebhooks(ctx, &a.PusherApp, s.log)
		}
		s.pusherKeys[a.Key], s.pusherIDs[a.ID] = a, a
	}
	opts := &rally.AcceptOptions{
		ConnOptions: conn,
		// Pages of any origin may connect, as to Pusher: what a client may
		// read of private channels its app's signature decides.
		InsecureSkipOriginCheck: true,
		Compression:             compression,
		Authorize:               s.pusherAuthorize,
		OnHandshakeError:        s.handshakeError,
	}
	s.pusherWS = &rally.Server{Options: opts, Open: s.pusherOpen, Message: s.pusherMessage, Close: s.pusherClose}
	s.useEngine(s.pusherWS)
	stopped := make(chan struct{})
	go s.expirePusherCaches(ctx, stopped)
	s.closers = append(s.closers, func() { cancel(); <-stopped })
	return nil
}

// expirePusherCaches forgets the cache channels' events past their app's
// CacheTTL, every half of the shortest (at most every minute), until ctx
// ends; then it closes stopped. (A subscriber never gets an expired
// event: cached checks too. This gives back their memory.)
func (s *Server) expirePusherCaches(ctx context.Context, stopped chan<- struct{}) {
	defer close(stopped)
	every := time.Minute
	for _, a := range s.pusherIDs {
		every = min(every, a.CacheTTL/2)
	}
	t := time.NewTicker(max(every, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, a := range s.pusherIDs {
			a.expireCache()
		}
	}
}

func (s *Server) pusherRoutes() {
	if s.pusherWS == nil {
		return
	}
	s.mux.Handle("GET /app/{key}", s.limitFull(s.subscribers(s.pusherWS), true))
	s.mux.Handle("CONNECT /app/{key}", s.limitFull(s.pusherWS, true)) // over HTTP/2 (RFC 8441)
	s.mux.HandleFunc("POST /apps/{app_id}/events", s.pusherAPI(s.pusherEvents))
	s.mux.HandleFunc("POST /apps/{app_id}/batch_events", s.pusherAPI(s.pusherBatch))
	s.mux.HandleFunc("GET /apps/{app_id}/channels", s.pusherAPI(s.pusherChannels))
	s.mux.HandleFunc("GET /apps/{app_id}/channels/{channel}", s.pusherAPI(s.pusherChannel))
	s.mux.HandleFunc("GET /apps/{app_id}/channels/{channel}/users", s.pusherAPI(s.pusherUsers))
	s.mux.HandleFunc("POST /apps/{app_id}/users/{user_id}/terminate_connections", s.pusherAPI(s.pusherTerminate))
}

// isPusherFrame reports whether p, from another node on topic, is an
// event of the Pusher protocol on topic's channel (pusherFrame, trigger
// and client events make them): the only deliveries from other nodes
// that reach Pusher clients.
func isPusherFrame(topic string, p []byte) bool {
	rest, ok := strings.CutPrefix(topic, "pusher/")
	if !ok {
		return false
	}
	_, channel, ok := strings.Cut(rest, "/")
	if !ok || len(p) == 0 || p[0] != '{' {
		return false
	}
	var m pusherMsg
	return json.Unmarshal(p, &m) == nil && m.Channel == channel && m.Event != ""
}
