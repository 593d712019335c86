package pubsub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/shrinkmap"
	"github.com/rallyws/rally/internal/smallmap"
)

// Options configure a Hub. A nil *Options is valid and means the defaults.
type Options struct {
	// PublishToSelf makes PublishFrom deliver to the sending connection
	// too, when it subscribes to the topic (Bun's publishToSelf). By
	// default the sender is left out.
	PublishToSelf bool

	// Broker, when set, carries publishes to and from other hubs (see
	// Bus for hubs of one process). nil means this hub is alone: its
	// publishes reach its own subscribers only.
	Broker Broker

	// Node names this hub to the broker; messages the broker carries say
	// which node published them. "" means a random name.
	Node string

	// OnError receives the failures that no call returns: a broker that
	// lost its connection, a lost interest change (a subscriber leaving),
	// a message from another node that could not be delivered. nil means
	// they are logged with slog.Default().
	OnError func(err error)

	// OnDeliver, when set, is told what became of each message that
	// arrived from another node through the broker, after it was fanned
	// out to this hub's subscribers (its own publishes are counted by the
	// Result of Publish). It runs on the broker's goroutine: keep it short.
	OnDeliver func(m Message, r Result)

	// MemoryBudget, when set, is charged for what the hub keeps for its
	// subscribers (rally.MemorySubscriptions) before it keeps it: each
	// subscription, each topic with its name, each subscribing
	// connection. A Subscribe that does not fit returns ErrNoMemory and
	// subscribes nothing; the charge goes back on Unsubscribe and when
	// the connection ends.
	MemoryBudget *rally.MemoryBudget
}

// ErrNoMemory is Subscribe's error when the hub's memory budget has no
// room for the subscription.
var ErrNoMemory = errors.New("pubsub: the memory budget has no room for another subscription")

// What the hub charges to its memory budget: estimates of what each
// thing costs in maps and slices, on a 64-bit machine.
const (
	// subscriptionCost is one connection's entry in a topic (its slot
	// in subs and index) and the topic's entry in its member.
	subscriptionCost = 160
	// topicCost is a topic's subscribers, its entry in the hub's map
	// and a broker's subscription for it; its name is added.
	topicCost = 512
	// memberCost is a subscribing connection's member and its entry in
	// the hub's map.
	memberCost = 256
)

func topicCharge(name string) int64 { return topicCost + int64(len(name)) }

// Hub is a set of topics and their subscribers, which are rally
// connections. The zero Hub is ready to use: alone (no broker), without
// publish-to-self. All methods are safe for concurrent use, also from
// rally callbacks, and none of them blocks on a connection.
type Hub struct {
	publishToSelf bool
	broker        Broker // set by NewHub only
	detached      atomic.Bool
	node          string
	onError       func(error)
	onDeliver     func(Message, Result)
	budget        *rally.MemoryBudget

	mu      sync.RWMutex
	topics  shrinkmap.Map[string, *subscribers] // gives back the room of topics gone
	members shrinkmap.Map[*rally.Conn, *member] // gives back the room of a crowd that left

	// imu is held while a change of interest is told to the broker, so
	// that the broker hears the changes of a topic in the order they
	// happened.
	imu sync.Mutex
}

// subscribers are one topic's subscribers, in no particular order.
type subscribers struct {
	name  string
	subs  []*rally.Conn
	index shrinkmap.Map[*rally.Conn, int] // where each subscriber is in subs, past smallTopic of them
}

// member is what the hub knows of one connection: the topics it
// subscribes to. It lives from the connection's first Subscribe until the
// connection ends. Most connections subscribe to one topic, which
// smallmap keeps without a map.
type member struct {
	topics smallmap.Map[*subscribers]
}

// NewHub returns a hub with opts, attached to opts.Broker if one is set.
// The error is the broker's refusal to attach.
func NewHub(opts *Options) (*Hub, error) {
	h := &Hub{}
	if opts == nil {
		return h, nil
	}
	h.publishToSelf = opts.PublishToSelf
	h.onError = opts.OnError
	h.onDeliver = opts.OnDeliver
	h.budget = opts.MemoryBudget
	h.node = opts.Node
	if h.node == "" {
		var b [8]byte
		rand.Read(b[:])
		h.node = hex.EncodeToString(b[:])
	}
	if opts.Broker != nil {
		if err := opts.Broker.Attach(h.node, receiver{h}); err != nil {
			return nil, fmt.Errorf("pubsub: attaching node %q to the broker: %w", h.node, err)
		}
		h.broker = opts.Broker
	}
	return h, nil
}

// Node returns the name this hub has on its broker ("" for a zero Hub).
func (h *Hub) Node() string { return h.node }

// Close detaches the hub from its broker and closes the broker. The hub
// keeps serving its own subscribers; nothing crosses to other hubs any
// more.
func (h *Hub) Close() error {
	h.imu.Lock()
	defer h.imu.Unlock()
	if h.broker == nil || h.detached.Swap(true) {
		return nil
	}
	return h.broker.Close()
}

// Subscribe makes c a subscriber of topic. Subscribing again is a no-op.
// The subscription ends with Unsubscribe or when c ends, whichever comes
// first. It returns rally.ErrClosed if c has already ended, or an error
// wrapping ErrNoMemory if the hub's memory budget has no room for it (and
// subscribes nothing either way), or the broker's error if it could not be told of the hub's
// interest in topic (the local subscription stands; messages from other
// hubs may not arrive).
func (h *Hub) Subscribe(c *rally.Conn, topic string) error {
	h.imu.Lock()
	h.mu.Lock()
	m, _ := h.members.Get(c)
	hook := m == nil
	if !hook {
		if _, ok := m.topics.Get(topic); ok {
			h.mu.Unlock()
			h.imu.Unlock()
			return nil
		}
	}
	t, _ := h.topics.Get(topic)
	first := t == nil
	cost := int64(subscriptionCost)
	if hook {
		cost += memberCost
	}
	if first {
		cost += topicCharge(topic)
	}
	if !h.budget.Reserve(rally.MemorySubscriptions, cost) {
		h.mu.Unlock()
		h.imu.Unlock()
		return fmt.Errorf("%w (topic %q)", ErrNoMemory, topic)
	}
	if hook {
		m = &member{}
		h.members.Set(c, m)
	}
	if first {
		t = newSubscribers(topic)
		h.topics.Set(topic, t)
	}
	t.add(c)
	m.topics.Set(topic, t)
	h.mu.Unlock()
	var err error
	if first {
		err = h.interest(topic, true)
	}
	h.imu.Unlock()
	if hook {
		// Runs at once if c has ended (before this Subscribe, or
		// meanwhile): then the subscription is gone already. (Asking
		// c.Done first would make a channel for every connection.)
		c.OnClose(func(*rally.CloseError) { h.forget(c, m) })
		h.mu.RLock()
		now, _ := h.members.Get(c)
		gone := now != m
		h.mu.RUnlock()
		if gone {
			return rally.ErrClosed
		}
	}
	return err
}

// Unsubscribe ends c's subscription to topic and reports whether there was
// one. A publish that began before Unsubscribe returned may still deliver
// to c; one that begins after does not.
func (h *Hub) Unsubscribe(c *rally.Conn, topic string) bool {
	h.imu.Lock()
	defer h.imu.Unlock()
	h.mu.Lock()
	m, _ := h.members.Get(c)
	var t *subscribers
	if m != nil {
		t, _ = m.topics.Get(topic)
	}
	if t == nil {
		h.mu.Unlock()
		return false
	}
	m.topics.Delete(topic)
	last := h.removeLocked(t, c)
	h.mu.Unlock()
	h.budget.Release(rally.MemorySubscriptions, subscriptionCost)
	if last {
		h.report(h.interest(topic, false))
	}
	return true
}

// forget ends every subscription of c, which has ended.
func (h *Hub) forget(c *rally.Conn, m *member) {
	h.imu.Lock()
	defer h.imu.Unlock()
	h.mu.Lock()
	if now, _ := h.members.Get(c); now != m {
		h.mu.Unlock()
		return
	}
	h.members.Delete(c)
	var emptied []string
	held := int64(memberCost + subscriptionCost*m.topics.Len())
	for name, t := range m.topics.All() {
		if h.removeLocked(t, c) {
			emptied = append(emptied, name)
		}
	}
	m.topics = smallmap.Map[*subscribers]{}
	h.mu.Unlock()
	h.budget.Release(rally.MemorySubscriptions, held)
	for _, name := range emptied {
		h.report(h.interest(name, false))
	}
}

// removeLocked takes c out of t and reports whether t is now empty (and
// gone from the hub). The caller holds h.mu.
func (h *Hub) removeLocked(t *subscribers, c *rally.Conn) bool {
	last := t.remove(c)
	if last > 0 {
		return false
	}
	h.topics.Delete(t.name)
	h.budget.Release(rally.MemorySubscriptions, topicCharge(t.name))
	return true
}

// interest tells the broker, if any, of a change of interest in topic. The
// caller holds h.imu.
func (h *Hub) interest(topic string, interested bool) error {
	if h.broker == nil || h.detached.Load() {
		return nil
	}
	if err := h.broker.Interest(topic, interested); err != nil {
		return fmt.Errorf("pubsub: telling the broker of interest %v in topic %q: %w", interested, topic, err)
	}
	return nil
}

func newSubscribers(name string) *subscribers {
	return &subscribers{name: name}
}

// A topic with up to smallTopic subscribers finds one in subs itself,
// without index: most topics have few subscribers (a user's own topic, a
// document's editors), and a map for them would be most of what their
// subscriptions cost. A topic that grew past smallTopic keeps its index
// until it has half as many again.
const smallTopic = 8

// indexed reports whether t keeps an index of its subscribers.
func (t *subscribers) indexed() bool { return t.index.Len() > 0 }

func (t *subscribers) add(c *rally.Conn) {
	switch {
	case t.indexed():
		t.index.Set(c, len(t.subs))
	case len(t.subs) >= smallTopic:
		for i, s := range t.subs {
			t.index.Set(s, i)
		}
		t.index.Set(c, len(t.subs))
	}
	t.subs = append(t.subs, c)
}

// find returns where c is in subs.
func (t *subscribers) find(c *rally.Conn) int {
	if t.indexed() {
		i, _ := t.index.Get(c)
		return i
	}
	return slices.Index(t.subs, c)
}

// remove takes c, a subscriber, out of t and returns how many are left.
func (t *subscribers) remove(c *rally.Conn) int {
	i := t.find(c)
	last := len(t.subs) - 1
	if i != last {
		moved := t.subs[last]
		t.subs[i] = moved
		if t.indexed() {
			t.index.Set(moved, i)
		}
	}
	t.subs[last] = nil
	t.subs = t.subs[:last]
	if cap(t.subs) >= shrinkmap.Min && last <= cap(t.subs)/4 {
		// As index does: give back the room of subscribers gone.
		t.subs = slices.Clip(slices.Clone(t.subs))
	}
	if t.indexed() {
		if last <= smallTopic/2 {
			t.index.Clear()
		} else {
			t.index.Delete(c)
		}
	}
	return last
}

// IsSubscribed reports whether c subscribes to topic.
func (h *Hub) IsSubscribed(c *rally.Conn, topic string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	m, _ := h.members.Get(c)
	if m == nil {
		return false
	}
	_, ok := m.topics.Get(topic)
	return ok
}

// SubscriberCount returns the number of this hub's subscribers of topic
// (subscribers on other hubs are not counted).
func (h *Hub) SubscriberCount(topic string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if t, _ := h.topics.Get(topic); t != nil {
		return len(t.subs)
	}
	return 0
}

// Result is what became of one publish on this hub: how many of its
// subscribers the message was sent to, queued for under backpressure, or
// dropped for (by the subscriber's buffer limit, or because it was
// closing). Subscribers on other hubs are not counted.
type Result struct {
	Sent    int
	Queued  int
	Dropped int
	// Closing is the part of Dropped that went to subscribers closing or
	// closed but not yet unsubscribed (their Close callback had not run):
	// not a drop by their buffer limit.
	Closing int
}

// Received returns how many subscribers accepted the message: Sent plus
// Queued.
func (r Result) Received() int { return r.Sent + r.Queued }

// Worst returns the worst status among the subscribers (rally.Dropped,
// then rally.Queued, then rally.Sent), or 0 if the message was offered to
// no one.
func (r Result) Worst() rally.SendStatus {
	switch {
	case r.Dropped > 0:
		return rally.Dropped
	case r.Queued > 0:
		return rally.Queued
	case r.Sent > 0:
		return rally.Sent
	}
	return 0
}

// Add counts one more subscriber's send as Send or SendPrepared returned
// it: for a publish's own sender with Options.PublishToSelf unset, say.
func (r *Result) Add(st rally.SendStatus, err error) {
	switch st {
	case rally.Sent:
		r.Sent++
	case rally.Queued:
		r.Queued++
	default:
		r.Dropped++
		if err != nil {
			r.Closing++
		}
	}
}

// Publish sends payload as a message of type typ (rally.Text or
// rally.Binary) to every subscriber of topic, on this hub and, through the
// broker, on others. It never blocks on a subscriber; payload is not kept
// after it returns. The Result counts this hub's subscribers. The error is
// non-nil if typ is invalid (nothing was sent) or if the broker did not
// take the message (this hub's subscribers got it all the same).
func (h *Hub) Publish(topic string, typ rally.MessageType, payload []byte) (Result, error) {
	return h.PublishFrom(nil, topic, typ, payload)
}

// PublishFrom is Publish on behalf of the connection from, which is left
// out of the delivery unless Options.PublishToSelf is set (from need not
// be a subscriber). Called from one of from's Server callbacks, it batches
// the deliveries: each subscriber joins from's cork, so what from's read
// batch publishes reaches each subscriber in one write. A nil from is
// Publish.
func (h *Hub) PublishFrom(from *rally.Conn, topic string, typ rally.MessageType, payload []byte) (Result, error) {
	if typ != rally.Text && typ != rally.Binary {
		return Result{}, fmt.Errorf("pubsub: publish on topic %q: message type %v is not Text or Binary", topic, typ)
	}
	r := h.deliver(from, topic, typ, payload, h.publishToSelf)
	if h.broker == nil || h.detached.Load() {
		return r, nil
	}
	if err := h.broker.Publish(Message{Topic: topic, Type: typ, Payload: payload, Node: h.node}); err != nil {
		return r, fmt.Errorf("pubsub: publish on topic %q to other nodes: %w", topic, err)
	}
	return r, nil
}

// PublishLocal sends payload to this hub's subscribers of topic only,
// leaving out from (which may be nil): nothing goes to the broker. It is
// for messages every node makes for its own subscribers, such as
// presence events.
func (h *Hub) PublishLocal(from *rally.Conn, topic string, typ rally.MessageType, payload []byte) (Result, error) {
	if typ != rally.Text && typ != rally.Binary {
		return Result{}, fmt.Errorf("pubsub: publish on topic %q: message type %v is not Text or Binary", topic, typ)
	}
	return h.deliver(from, topic, typ, payload, false), nil
}

// scratch holds the copies of subscriber lists that publishes iterate
// over without holding the hub's lock.
var scratch = sync.Pool{New: func() any { return new([]*rally.Conn) }}

// deliver sends the message to this hub's subscribers of topic, but from
// unless toSelf is set.
func (h *Hub) deliver(from *rally.Conn, topic string, typ rally.MessageType, payload []byte, toSelf bool) Result {
	var r Result
	h.mu.RLock()
	t, _ := h.topics.Get(topic)
	if t == nil {
		h.mu.RUnlock()
		return r
	}
	sp := scratch.Get().(*[]*rally.Conn)
	subs := append((*sp)[:0], t.subs...)
	h.mu.RUnlock()

	pm, err := rally.NewPreparedMessage(typ, payload)
	if err == nil {
		for _, c := range subs {
			if c == from && !toSelf {
				continue
			}
			if from != nil {
				c.JoinCork(from)
			}
			r.Add(c.SendPrepared(pm))
		}
	}
	clear(subs) // the pool must not keep connections alive
	*sp = subs[:0]
	scratch.Put(sp)
	return r
}

func (h *Hub) report(err error) {
	if err == nil {
		return
	}
	if h.onError != nil {
		h.onError(err)
		return
	}
	slog.Default().Warn("pubsub: "+err.Error(), "node", h.node)
}

// receiver is the hub's side of its broker.
type receiver struct{ h *Hub }

func (r receiver) Deliver(m Message) {
	if m.Node == r.h.node {
		return // at most once: a hub's own publish already reached its subscribers
	}
	if m.Type != rally.Text && m.Type != rally.Binary {
		r.h.report(fmt.Errorf("pubsub: message from node %q on topic %q has type %v, not Text or Binary", m.Node, m.Topic, m.Type))
		return
	}
	res := r.h.deliver(nil, m.Topic, m.Type, m.Payload, false)
	if r.h.onDeliver != nil {
		r.h.onDeliver(m, res)
	}
}

func (r receiver) Error(err error) { r.h.report(err) }
