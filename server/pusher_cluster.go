package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// pusherCluster shares, through NATS, what each node knows of the Pusher
// apps' channels: how many of its connections subscribe to each, and
// the presence members among them. With it the HTTP API, the member
// lists and the webhooks speak for the whole cluster. Every node tells
// the others each change as it happens and its whole state every ttl/3;
// a node not heard of for ttl is taken to be gone, with its members.
type pusherCluster struct {
	s       *Server
	nc      *nats.Conn
	broker  *natsbroker.Broker
	subject string
	sub     *nats.Subscription
	ttl     time.Duration
	done    chan struct{}
	stopped chan struct{}

	mu     sync.Mutex
	remote map[string]*pusherNode // node: what it told
}

// pusherNode is what another node told of its apps.
type pusherNode struct {
	seen time.Time
	apps map[string]*pusherAppState
}

// pusherAppState is one node's view of one app.
type pusherAppState struct {
	Channels map[string]int                        `json:"channels"`          // channel: subscriptions
	Members  map[string]map[string]json.RawMessage `json:"members,omitempty"` // channel: user_id: user_info
}

// pusherNote is a message between nodes.
type pusherNote struct {
	Node string `json:"node"`
	// Ev is state (Apps), subs (App, Channel, Subs), member (App,
	// Channel, User, Info, On), terminate (App, User), event (below),
	// cache (a cache channel's last event, Frame, for every node to keep,
	// subscribers or not), hello or bye.
	Ev      string                     `json:"ev"`
	Apps    map[string]*pusherAppState `json:"apps,omitempty"`
	App     string                     `json:"app,omitempty"`
	Channel string                     `json:"channel,omitempty"`
	Subs    int                        `json:"subs,omitempty"`
	User    string                     `json:"user,omitempty"`
	Info    json.RawMessage            `json:"info,omitempty"`
	On      bool                       `json:"on,omitempty"`
	// An event of the HTTP API (Frame, on App's Channel) for every
	// connection but SocketID's.
	SocketID string          `json:"socket_id,omitempty"`
	Frame    json.RawMessage `json:"frame,omitempty"`
}

func (s *Server) startPusherCluster() error {
	b, ok := s.cfg.Broker.(*natsbroker.Broker)
	if !ok || len(s.pusherIDs) == 0 {
		return nil
	}
	pc := &pusherCluster{s: s, nc: b.Conn(), broker: b, subject: b.SubjectPrefix() + ".pusher",
		ttl: s.cfg.Presence.TTL, remote: map[string]*pusherNode{},
		done: make(chan struct{}), stopped: make(chan struct{})}
	sub, err := pc.nc.Subscribe(pc.subject, pc.receive)
	if err != nil {
		return fmt.Errorf("rally serve: pusher across nodes: %w", err)
	}
	if err := pc.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("rally serve: pusher across nodes: %w", err)
	}
	pc.sub = sub
	s.pusherCluster = pc
	go pc.run()
	pc.tell(pusherNote{Ev: "hello"})
	s.closers = append(s.closers, pc.stop)
	return nil
}

func (pc *pusherCluster) run() {
	defer close(pc.stopped)
	t := time.NewTicker(pc.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-pc.done:
			return
		case <-t.C:
		}
		pc.tellState()
		pc.expire()
	}
}

func (pc *pusherCluster) stop() {
	close(pc.done)
	<-pc.stopped
	pc.tell(pusherNote{Ev: "bye"})
	pc.nc.Flush()
	pc.sub.Unsubscribe()
}

// tell sends a note to the other nodes (nothing without them).
func (pc *pusherCluster) tell(n pusherNote) {
	if pc == nil {
		return
	}
	n.Node = pc.s.cfg.Node
	b, _ := json.Marshal(n)
	if err := pc.nc.Publish(pc.subject, pc.broker.Sign(pc.subject, b)); err != nil {
		pc.s.log.Warn("pusher: telling other nodes", "err", err)
	}
}

// tellState sends this node's whole state.
func (pc *pusherCluster) tellState() {
	apps := map[string]*pusherAppState{}
	for id, a := range pc.s.pusherIDs {
		a.mu.Lock()
		st := &pusherAppState{Channels: make(map[string]int, a.channels.Len()), Members: map[string]map[string]json.RawMessage{}}
		for ch, n := range a.channels.All() {
			st.Channels[ch] = n
		}
		for ch, ms := range a.members.All() {
			users := make(map[string]json.RawMessage, len(ms))
			for u, m := range ms {
				users[u] = orNull(m.info)
			}
			st.Members[ch] = users
		}
		a.mu.Unlock()
		apps[id] = st
	}
	pc.tell(pusherNote{Ev: "state", Apps: apps})
}

func (pc *pusherCluster) expire() {
	now := time.Now()
	pc.mu.Lock()
	var gone []*pusherNode
	for name, n := range pc.remote {
		if now.Sub(n.seen) > pc.ttl {
			gone = append(gone, n)
			delete(pc.remote, name)
		}
	}
	pc.mu.Unlock()
	for _, n := range gone {
		pc.forget(n)
	}
}

// forget tells this node's subscribers of the members of a node that
// is gone, who are members nowhere else now.
func (pc *pusherCluster) forget(n *pusherNode) {
	for id, st := range n.apps {
		a := pc.s.pusherIDs[id]
		if a == nil {
			continue
		}
		for ch, users := range st.Members {
			for u := range users {
				a.mu.Lock()
				ms, _ := a.members.Get(ch)
				here := ms[u] != nil
				a.mu.Unlock()
				if !here && !pc.hasMember(id, ch, u) {
					md, _ := json.Marshal(map[string]string{"user_id": u})
					pc.s.hub.PublishLocal(nil, a.topic(ch), rally.Text, pusherFrame("pusher_internal:member_removed", ch, md, ""))
				}
			}
		}
	}
}

func (pc *pusherCluster) receive(msg *nats.Msg) {
	data, err := pc.broker.Verify(msg.Subject, msg.Data)
	if err != nil {
		pc.s.log.Warn("pusher: dropped a note from another node", "err", err)
		return
	}
	var n pusherNote
	if json.Unmarshal(data, &n) != nil || n.Node == "" || n.Node == pc.s.cfg.Node {
		return
	}
	switch n.Ev {
	case "hello":
		pc.tellState()
		return
	case "bye":
		pc.mu.Lock()
		gone := pc.remote[n.Node]
		delete(pc.remote, n.Node)
		pc.mu.Unlock()
		if gone != nil {
			pc.forget(gone)
		}
		return
	case "event":
		a := pc.s.pusherIDs[n.App]
		if a == nil || !validChannel(n.Channel) || !isPusherFrame(a.topic(n.Channel), n.Frame) {
			return
		}
		a.mu.Lock()
		except, _ := a.sockets.Get(n.SocketID)
		a.mu.Unlock()
		res, _ := pc.s.hub.PublishLocal(except, a.topic(n.Channel), rally.Text, n.Frame)
		pc.s.delivered(res, len(n.Frame))
		a.keep(n.Channel, bytes.Clone(n.Frame))
		return
	case "cache":
		if a := pc.s.pusherIDs[n.App]; a != nil && isCache(n.Channel) && validChannel(n.Channel) && isPusherFrame(a.topic(n.Channel), n.Frame) {
			a.keep(n.Channel, bytes.Clone(n.Frame))
		}
		return
	case "terminate":
		if a := pc.s.pusherIDs[n.App]; a != nil {
			a.terminate(n.User)
		}
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	node := pc.remote[n.Node]
	if node == nil {
		node = &pusherNode{apps: map[string]*pusherAppState{}}
		pc.remote[n.Node] = node
	}
	node.seen = time.Now()
	switch n.Ev {
	case "state":
		node.apps = n.Apps
		if node.apps == nil {
			node.apps = map[string]*pusherAppState{}
		}
	case "subs", "member":
		st := node.apps[n.App]
		if st == nil {
			st = &pusherAppState{Channels: map[string]int{}, Members: map[string]map[string]json.RawMessage{}}
			node.apps[n.App] = st
		}
		if st.Channels == nil {
			st.Channels = map[string]int{}
		}
		if st.Members == nil {
			st.Members = map[string]map[string]json.RawMessage{}
		}
		if n.Ev == "subs" {
			if n.Subs > 0 {
				st.Channels[n.Channel] = n.Subs
			} else {
				delete(st.Channels, n.Channel)
			}
			return
		}
		if n.On {
			if st.Members[n.Channel] == nil {
				st.Members[n.Channel] = map[string]json.RawMessage{}
			}
			st.Members[n.Channel][n.User] = n.Info
		} else {
			delete(st.Members[n.Channel], n.User)
			if len(st.Members[n.Channel]) == 0 {
				delete(st.Members, n.Channel)
			}
		}
	}
}

// subs is the subscriptions to an app's channel on the other nodes.
func (pc *pusherCluster) subs(app, ch string) int {
	if pc == nil {
		return 0
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	n := 0
	for _, node := range pc.remote {
		if st := node.apps[app]; st != nil {
			n += st.Channels[ch]
		}
	}
	return n
}

// hasMember reports whether user is a member of an app's channel on
// another node.
func (pc *pusherCluster) hasMember(app, ch, user string) bool {
	if pc == nil {
		return false
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, node := range pc.remote {
		if st := node.apps[app]; st != nil {
			if _, ok := st.Members[ch][user]; ok {
				return true
			}
		}
	}
	return false
}

// addRemote adds to channels and members what the other nodes have of
// an app.
func (pc *pusherCluster) addRemote(app string, channels map[string]int, members map[string]map[string]json.RawMessage) {
	if pc == nil {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, node := range pc.remote {
		st := node.apps[app]
		if st == nil {
			continue
		}
		if channels != nil {
			for ch, n := range st.Channels {
				channels[ch] += n
			}
		}
		if members != nil {
			for ch, users := range st.Members {
				if members[ch] == nil {
					members[ch] = map[string]json.RawMessage{}
				}
				for u, info := range users {
					if _, ok := members[ch][u]; !ok {
						members[ch][u] = info
					}
				}
			}
		}
	}
}

// pusherDelivered keeps the last event of a cache channel that came from
// another node, for this node's next subscribers. With the Pusher cluster
// every node keeps it from the cluster's cache note instead, which reaches
// the nodes without subscribers too (tellCache).
func (s *Server) pusherDelivered(m pubsub.Message) {
	rest, ok := strings.CutPrefix(m.Topic, "pusher/")
	if !ok || s.pusherCluster != nil {
		return
	}
	id, ch, _ := strings.Cut(rest, "/")
	a := s.pusherIDs[id]
	if a == nil || strings.HasPrefix(string(m.Payload), `{"event":"pusher`) {
		return
	}
	a.keep(ch, bytes.Clone(m.Payload))
}

// tellCache tells the other nodes the last event b of cache channel ch,
// so that a subscriber on any node gets it rather than cache_miss.
func (pc *pusherCluster) tellCache(app, ch string, b []byte) {
	if pc == nil || !isCache(ch) {
		return
	}
	pc.tell(pusherNote{Ev: "cache", App: app, Channel: ch, Frame: b})
}
