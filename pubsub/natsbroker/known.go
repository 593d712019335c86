package natsbroker

import (
	"sync"
	"sync/atomic"
	"time"
)

// knownTimeout bounds the round trip that confirms subscriptions
// (AfterInterest): past it the callers are let go unconfirmed.
const knownTimeout = 5 * time.Second

// interestKnown follows which of the broker's subscriptions the NATS server has
// confirmed. Interest counts each subscription it sends in asked; a
// round trip (PING, PONG) begun after the count reached n confirms the
// first n, since NATS handles a connection's messages in order.
type interestKnown struct {
	asked     atomic.Uint64 // subscriptions sent to NATS
	confirmed atomic.Uint64 // of those, the first confirmed ones

	mu      sync.Mutex
	waiting []func() // callers of AfterInterest until the next round trip
	running bool     // a goroutine makes round trips for waiting
}

// AfterInterest calls f once the NATS server has every subscription this
// broker sent it before the call (on Interest), so that from then on what
// any node publishes through that server on those topics reaches this
// broker. A client told it is subscribed when f runs gets every message
// published after it heard so, on whichever node.
//
// With every subscription confirmed already, f runs at once, on the
// caller's goroutine. Otherwise it runs on a goroutine of the broker's
// after one round trip to the server, which serves every caller that came
// meanwhile: only a subscription new to this node costs a wait. If the
// round trip fails (NATS unreachable or closed, or no answer within 5 s)
// f runs all the same, and delivery is at most once as during any
// outage. In a cluster of NATS servers the others learn of a subscription
// from this node's server over their routes, a moment after: a publish
// through another server right after f may still miss it.
func (b *Broker) AfterInterest(f func()) {
	k := &b.known
	if k.confirmed.Load() >= k.asked.Load() {
		f()
		return
	}
	k.mu.Lock()
	k.waiting = append(k.waiting, f)
	start := !k.running
	k.running = true
	k.mu.Unlock()
	if start {
		go b.confirm()
	}
}

// confirm makes round trips to the server until nobody waits for one.
func (b *Broker) confirm() {
	k := &b.known
	for {
		k.mu.Lock()
		fs := k.waiting
		k.waiting = nil
		if len(fs) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		// Read before the round trip: every subscription counted was
		// handed to the NATS client before it, and goes before its PING.
		n := k.asked.Load()
		if b.nc.IsConnected() && b.nc.FlushTimeout(knownTimeout) == nil && n > k.confirmed.Load() {
			k.confirmed.Store(n) // this goroutine alone stores
		}
		for _, f := range fs {
			f()
		}
	}
}
