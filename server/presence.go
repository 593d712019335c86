package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// PresenceConfig tells subscribers of some topics who else subscribes
// (docs/PROTOCOL.md, "Presence").
type PresenceConfig struct {
	// Topics are the patterns of the topics with presence. None: no
	// presence.
	Topics []string
	// TTL is how long the members of a node that stopped announcing
	// itself are kept (with NATS): every node announces its members every
	// TTL/3. Default 30 s.
	TTL time.Duration
}

func (p *PresenceConfig) fill() error {
	if p.TTL < 0 {
		return configErrorf("--presence-ttl must be positive")
	}
	if p.TTL == 0 {
		p.TTL = 30 * time.Second
	}
	for _, t := range p.Topics {
		if err := validPattern(t); err != nil {
			return configErrorf("--presence: %v", err)
		}
	}
	return nil
}

// member is one subscriber of a presence topic.
type member struct {
	Client string `json:"client"`
	User   string `json:"user"`
}

// presence knows the members of presence topics: this node's, and, with
// NATS, those other nodes announce. Nodes tell each other of each join
// and leave as it happens, and every TTL/3 send their whole membership
// (which repairs lost events); a node not heard of for TTL is taken to be
// gone, with its members.
type presence struct {
	s   *Server
	ttl time.Duration

	nc      *nats.Conn // nil alone
	subject string
	broker  *natsbroker.Broker // signs and checks announcements
	sub     *nats.Subscription
	done    chan struct{}
	stopped chan struct{}

	// sendMu orders this node's announcements with the changes they
	// tell: a round of announcements shows the membership of one moment,
	// and the joins and leaves go out in the order they happened.
	sendMu sync.Mutex

	mu     sync.Mutex
	local  *memberSets            // this node's
	remote map[string]*remoteNode // node → what it announced
	round  uint64
	muted  bool // tests: a node that stopped announcing (as if dead)
}

// remoteNode is what another node announced: its members by topic, and
// those of the round of announcements under way (which replace them at
// the round's end).
type remoteNode struct {
	seen    time.Time
	topics  *memberSets
	pending *memberSets
	round   uint64 // of pending
	parts   int    // state announcements of the round received
}

// maxStateMembers bounds the members of one state announcement (a
// topic's members go in several when there are more).
const maxStateMembers = 500

// announcement is a presence message between nodes.
type announcement struct {
	Node  string `json:"node"`
	Event string `json:"ev"` // join, leave, state, beat, hello, bye
	Topic string `json:"topic,omitempty"`
	member
	Members []member `json:"members,omitempty"`
	Round   uint64   `json:"round,omitempty"`
	Parts   int      `json:"parts,omitempty"` // of a beat: the state announcements of its round
}

func (s *Server) presenceOf(topic string) bool {
	return s.presence != nil && matchAny(s.cfg.Presence.Topics, topic)
}

func (s *Server) startPresence() error {
	if len(s.cfg.Presence.Topics) == 0 {
		return nil
	}
	p := &presence{s: s, ttl: s.cfg.Presence.TTL, local: new(memberSets), remote: map[string]*remoteNode{}}
	s.presence = p
	switch b := s.cfg.Broker.(type) {
	case nil:
		return nil
	case *natsbroker.Broker:
		p.nc, p.broker = b.Conn(), b
		p.subject = b.SubjectPrefix() + ".presence"
	default:
		return errors.New("rally serve: presence needs NATS to span several nodes, or no other nodes")
	}
	sub, err := p.nc.Subscribe(p.subject, p.receive)
	if err != nil {
		return fmt.Errorf("rally serve: presence: %w", err)
	}
	if err := p.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("rally serve: presence: %w", err)
	}
	p.sub = sub
	p.done, p.stopped = make(chan struct{}), make(chan struct{})
	go p.run()
	p.announce(announcement{Event: "hello"})
	// Closers run last first: presence says goodbye before NATS goes.
	s.closers = append(s.closers, p.stop)
	return nil
}

func (p *presence) run() {
	defer close(p.stopped)
	t := time.NewTicker(p.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		p.beat()
		p.expire()
	}
}

func (p *presence) stop() {
	close(p.done)
	<-p.stopped
	p.announce(announcement{Event: "bye"})
	p.nc.Flush()
	p.sub.Unsubscribe()
}

func (p *presence) announce(a announcement) {
	if p.nc == nil {
		return
	}
	p.mu.Lock()
	muted := p.muted
	p.mu.Unlock()
	if muted {
		return
	}
	a.Node = p.s.cfg.Node
	b, _ := json.Marshal(a)
	if err := p.nc.Publish(p.subject, p.broker.Sign(p.subject, b)); err != nil {
		p.s.log.Warn("presence: announcing to other nodes", "err", err)
	}
}

// beat sends this node's whole membership, a topic at a time (in parts
// of at most maxStateMembers), then the end of the round.
func (p *presence) beat() {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	p.round++
	round := p.round
	var states []announcement
	for topic, ms := range p.local.all() {
		all := slices.Collect(maps.Values(ms))
		for len(all) > 0 {
			n := min(len(all), maxStateMembers)
			states = append(states, announcement{Event: "state", Topic: topic, Members: all[:n], Round: round})
			all = all[n:]
		}
	}
	p.mu.Unlock()
	for _, a := range states {
		p.announce(a)
	}
	p.announce(announcement{Event: "beat", Round: round, Parts: len(states)})
}

// expire drops the nodes not heard of for ttl, and their members.
func (p *presence) expire() {
	now := time.Now()
	var evs []event
	p.mu.Lock()
	for name, n := range p.remote {
		if now.Sub(n.seen) > p.ttl {
			evs = append(evs, p.dropNodeLocked(name)...)
		}
	}
	p.mu.Unlock()
	p.emit(evs)
}

// event is a join or leave to tell this node's subscribers of topic.
type event struct {
	leave bool
	topic string
	m     member
	from  *rally.Conn // left out of the delivery
}

func (p *presence) dropNodeLocked(name string) []event {
	n := p.remote[name]
	if n == nil {
		return nil
	}
	delete(p.remote, name)
	var evs []event
	for topic, ms := range n.topics.all() {
		for _, m := range ms {
			evs = append(evs, event{leave: true, topic: topic, m: m})
		}
	}
	return evs
}

// receive handles an announcement of another node.
func (p *presence) receive(msg *nats.Msg) {
	data, err := p.broker.Verify(msg.Subject, msg.Data)
	if err != nil {
		p.s.log.Warn("presence: dropped an announcement", "err", err)
		return
	}
	var a announcement
	if json.Unmarshal(data, &a) != nil || a.Node == "" || a.Node == p.s.cfg.Node {
		return
	}
	var evs []event
	p.mu.Lock()
	if a.Event == "bye" {
		evs = p.dropNodeLocked(a.Node)
		p.mu.Unlock()
		p.emit(evs)
		return
	}
	n := p.remote[a.Node]
	if n == nil {
		n = &remoteNode{topics: new(memberSets)}
		p.remote[a.Node] = n
	}
	n.seen = time.Now()
	switch a.Event {
	case "hello":
		// A node that just started: tell it who is here now.
		p.mu.Unlock()
		p.beat()
		return
	case "join":
		if validTopic(a.Topic) != nil {
			break
		}
		if n.topics.add(a.Topic, a.member) {
			evs = append(evs, event{topic: a.Topic, m: a.member})
		}
		if n.pending != nil {
			n.pending.add(a.Topic, a.member)
		}
	case "leave":
		if m, ok := n.topics.remove(a.Topic, a.Client); ok {
			evs = append(evs, event{leave: true, topic: a.Topic, m: m})
		}
		if n.pending != nil {
			n.pending.remove(a.Topic, a.Client)
		}
	case "state":
		if validTopic(a.Topic) != nil {
			break
		}
		if n.pending == nil || n.round != a.Round {
			n.pending, n.round, n.parts = new(memberSets), a.Round, 0
		}
		n.parts++
		for _, m := range a.Members {
			n.pending.add(a.Topic, m)
		}
	case "beat":
		// The round's announcements are the node's membership now: what
		// they leave out has left, what they add has joined (lost events
		// repaired).
		now, got := n.pending, n.parts
		if now == nil || n.round != a.Round {
			now, got = new(memberSets), 0
		}
		if got != a.Parts {
			// Some of the round was lost: keep what we have until the next.
			n.pending = nil
			break
		}
		for topic, ms := range n.topics.all() {
			for c, m := range ms {
				if _, ok := now.of(topic)[c]; !ok {
					evs = append(evs, event{leave: true, topic: topic, m: m})
				}
			}
		}
		for topic, ms := range now.all() {
			for c, m := range ms {
				if _, ok := n.topics.of(topic)[c]; !ok {
					evs = append(evs, event{topic: topic, m: m})
				}
			}
		}
		n.topics, n.pending = now, nil
	}
	p.mu.Unlock()
	p.emit(evs)
}

// memberSets are members by topic and client. The map of topics gives
// its room back as topics empty (shrinkmap).
type memberSets struct {
	topics shrinkmap.Map[string, map[string]member]
}

// add adds m to topic and reports whether it is new there.
func (ms *memberSets) add(topic string, m member) bool {
	t, _ := ms.topics.Get(topic)
	if t == nil {
		t = map[string]member{}
		ms.topics.Set(topic, t)
	}
	if _, ok := t[m.Client]; ok {
		return false
	}
	t[m.Client] = m
	return true
}

// remove takes client out of topic and returns the member it was.
func (ms *memberSets) remove(topic, client string) (member, bool) {
	t, _ := ms.topics.Get(topic)
	m, ok := t[client]
	if !ok {
		return member{}, false
	}
	delete(t, client)
	if len(t) == 0 {
		ms.topics.Delete(topic)
	}
	return m, true
}

// of returns topic's members by client (nil if it has none).
func (ms *memberSets) of(topic string) map[string]member {
	t, _ := ms.topics.Get(topic)
	return t
}

// all returns every topic's members, to range over.
func (ms *memberSets) all() map[string]map[string]member { return ms.topics.All() }

// memberCost estimates what a member of this node costs in the maps
// that keep it, on a 64-bit machine; its topic, client id and user are
// added (memberCharge).
const memberCost = 256

func memberCharge(topic, client, user string) int64 {
	return memberCost + int64(len(topic)+len(client)+len(user))
}

// reserve charges the memory budget for client, of user, joining topic,
// before join keeps it, and reports whether the budget had room.
func (p *presence) reserve(topic, client, user string) bool {
	return p.s.budget.Reserve(rally.MemorySubscriptions, memberCharge(topic, client, user))
}

// unreserve gives back what reserve charged, for a join that did not
// happen.
func (p *presence) unreserve(topic, client, user string) {
	p.s.budget.Release(rally.MemorySubscriptions, memberCharge(topic, client, user))
}

// join makes c, as client id of user, a member of topic here and tells
// everyone. What the member costs was reserved (reserve); leave gives it
// back.
func (p *presence) join(c *rally.Conn, topic, client, user string) {
	m := member{client, user}
	p.sendMu.Lock()
	p.mu.Lock()
	if !p.local.add(topic, m) {
		p.mu.Unlock()
		p.sendMu.Unlock()
		p.unreserve(topic, client, user)
		return
	}
	p.mu.Unlock()
	p.announce(announcement{Event: "join", Topic: topic, member: m})
	p.sendMu.Unlock()
	p.emit([]event{{topic: topic, m: m, from: c}})
}

func (p *presence) leave(topic, client string) {
	p.sendMu.Lock()
	p.mu.Lock()
	m, ok := p.local.remove(topic, client)
	p.mu.Unlock()
	if ok {
		p.unreserve(topic, m.Client, m.User)
		p.announce(announcement{Event: "leave", Topic: topic, member: m})
	}
	p.sendMu.Unlock()
	if ok {
		p.emit([]event{{leave: true, topic: topic, m: m}})
	}
}

// members returns the members of topic on every node, ordered by client.
func (p *presence) members(topic string) []member {
	p.mu.Lock()
	var all []member
	for _, m := range p.local.of(topic) {
		all = append(all, m)
	}
	for _, n := range p.remote {
		for _, m := range n.topics.of(topic) {
			all = append(all, m)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(all, func(a, b member) int { return strings.Compare(a.Client, b.Client) })
	return all
}

// emit tells this node's subscribers of each event's topic.
func (p *presence) emit(evs []event) {
	for _, e := range evs {
		typ := "join"
		if e.leave {
			typ = "leave"
		}
		b, _ := json.Marshal(struct {
			Type  string `json:"type"`
			Topic string `json:"topic"`
			member
		}{typ, e.topic, e.m})
		p.s.hub.PublishLocal(e.from, e.topic, rally.Text, b)
		p.s.histHub.broadcast(e.from, e.topic, b)
	}
}

// presenceAnswer answers {"type":"presence","topic":…}.
func (s *Server) presenceAnswer(ss *wsSession, req *request) []byte {
	if err := validTopic(req.Topic); err != nil {
		return errorFrame(req.ID, codeInvalidTopic, err.Error())
	}
	if !ss.grant.maySubscribe(req.Topic) {
		return errorFrame(req.ID, codeForbidden, "the token does not allow subscribing to "+strconv.Quote(req.Topic))
	}
	if !s.presenceOf(req.Topic) {
		return errorFrame(req.ID, codeNoPresence, "topic "+strconv.Quote(req.Topic)+" has no presence")
	}
	ms := s.presence.members(req.Topic)
	if ms == nil {
		ms = []member{}
	}
	users := map[string]bool{}
	for _, m := range ms {
		users[m.User] = true
	}
	b, _ := json.Marshal(struct {
		Type    string          `json:"type"`
		ID      json.RawMessage `json:"id,omitempty"`
		Topic   string          `json:"topic"`
		Count   int             `json:"count"`
		Users   int             `json:"users"`
		Members []member        `json:"members"`
	}{"presence", req.ID, req.Topic, len(ms), len(users), ms})
	return b
}

// mute stops the node's announcements, as if it had died (tests).
func (p *presence) mute() {
	p.mu.Lock()
	p.muted = true
	p.mu.Unlock()
}
