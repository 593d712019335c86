package pubsub

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Bus is the in-process broker: it joins hubs of one process, each through
// the Broker that Bus.Broker returns. A publish on one hub reaches the
// subscribers of the other hubs attached to the same Bus that have
// interest in its topic, synchronously, on the publisher's goroutine
// (each receiving hub sends without blocking). It starts no goroutine.
//
// The zero Bus is ready to use. MaxPayload must not change once a Broker
// of the Bus is attached.
type Bus struct {
	// MaxPayload is the largest payload the Bus carries between hubs; a
	// larger one gets an error wrapping ErrTooLarge. 0 means no limit.
	MaxPayload int

	mu    sync.Mutex // serialises changes of nodes
	nodes atomic.Pointer[[]*busNode]
}

// Broker returns a new Broker on the Bus, for one Hub.
func (b *Bus) Broker() Broker { return &busNode{bus: b} }

type busNode struct {
	bus  *Bus
	name string
	r    Receiver
	open atomic.Bool

	mu       sync.RWMutex
	interest map[string]struct{}
}

func (n *busNode) Attach(node string, r Receiver) error {
	b := n.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if n.r != nil {
		return fmt.Errorf("pubsub: bus broker attached twice (node %q)", n.name)
	}
	var nodes []*busNode
	if p := b.nodes.Load(); p != nil {
		nodes = *p
	}
	for _, o := range nodes {
		if o.name == node {
			return fmt.Errorf("pubsub: node %q is already on the bus", node)
		}
	}
	n.name, n.r = node, r
	n.interest = map[string]struct{}{}
	next := append(append(make([]*busNode, 0, len(nodes)+1), nodes...), n)
	b.nodes.Store(&next)
	n.open.Store(true)
	return nil
}

func (n *busNode) Publish(m Message) error {
	if !n.open.Load() {
		return ErrBrokerClosed
	}
	if max := n.bus.MaxPayload; max > 0 && len(m.Payload) > max {
		return fmt.Errorf("%w: %d bytes on topic %q, the bus carries at most %d", ErrTooLarge, len(m.Payload), m.Topic, max)
	}
	p := n.bus.nodes.Load()
	if p == nil {
		return nil
	}
	for _, o := range *p {
		if o == n || !o.open.Load() || !o.wants(m.Topic) {
			continue
		}
		o.r.Deliver(m)
	}
	return nil
}

func (n *busNode) wants(topic string) bool {
	n.mu.RLock()
	_, ok := n.interest[topic]
	n.mu.RUnlock()
	return ok
}

func (n *busNode) Interest(topic string, interested bool) error {
	if !n.open.Load() {
		return ErrBrokerClosed
	}
	n.mu.Lock()
	if interested {
		n.interest[topic] = struct{}{}
	} else {
		delete(n.interest, topic)
	}
	n.mu.Unlock()
	return nil
}

func (n *busNode) Close() error {
	b := n.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if !n.open.Swap(false) {
		return ErrBrokerClosed
	}
	nodes := *b.nodes.Load()
	next := make([]*busNode, 0, len(nodes))
	for _, o := range nodes {
		if o != n {
			next = append(next, o)
		}
	}
	b.nodes.Store(&next)
	return nil
}
