package pubsub

import (
	"errors"

	"github.com/rallyws/rally"
)

// Message is a publish as it travels between hubs.
type Message struct {
	// Topic is the topic it was published on.
	Topic string
	// Type is rally.Text or rally.Binary.
	Type rally.MessageType
	// Payload is the message. Whoever receives a Message reads it during
	// the call only; a Broker that keeps it longer copies it.
	Payload []byte
	// Node names the hub that published it (Options.Node).
	Node string
}

// Broker carries publishes between hubs, which may run in other processes
// or on other machines. A Broker value serves one Hub: NewHub attaches it
// and Hub.Close closes it.
//
// Delivery is at most once: a broker may lose a message (a connection to
// its server was down, the message was too large, a subscriber of the
// broker lagged) but never delivers one twice, never delivers a hub's own
// messages back to it, and reports what it lost through Receiver.Error
// when no call can return it. The methods may be called from many
// goroutines at once.
type Broker interface {
	// Attach connects the hub named node: from now on the broker hands
	// r every message other nodes publish on a topic this hub has shown
	// interest in. It is called once, before any other method.
	Attach(node string, r Receiver) error

	// Publish sends m to the other nodes interested in m.Topic. It must
	// not wait for them to receive it, nor keep m.Payload after it
	// returns. An error means m did not leave; a message larger than the
	// broker carries gets an error that wraps ErrTooLarge.
	Publish(m Message) error

	// Interest tells the broker that this hub has gained its first local
	// subscriber of topic (interested true) or lost its last (false).
	// The hub calls it in the order the changes happened, never twice in
	// a row with the same value for one topic.
	Interest(topic string, interested bool) error

	// Close detaches the hub: no delivery to its Receiver starts after
	// Close returns (one already under way may finish).
	Close() error
}

// Receiver is the hub's side of a Broker.
type Receiver interface {
	// Deliver fans m out to the hub's local subscribers of m.Topic. It
	// reads m.Payload during the call only and does not block on
	// subscribers (sends are non-blocking). It may be called from many
	// goroutines at once.
	Deliver(m Message)

	// Error reports a failure that no call of the hub's could return: a
	// lost connection to the broker's server, a message from another
	// node dropped on the way.
	Error(err error)
}

// ErrTooLarge is wrapped by the error of a Broker's Publish when the
// message is larger than the broker carries. The message still reached
// the publishing hub's own subscribers.
var ErrTooLarge = errors.New("pubsub: message too large for the broker")

// ErrBrokerClosed is returned by a Broker used after Close, or before
// Attach.
var ErrBrokerClosed = errors.New("pubsub: broker not attached or closed")
