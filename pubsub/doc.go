// Package pubsub is topic-based publish/subscribe over rally connections:
// a Hub keeps which connections subscribe to which topics, and a publish
// reaches every subscriber of its topic.
//
// A publish frames its message once (rally.NewPreparedMessage) and hands
// that frame to each subscriber with the non-blocking SendPrepared, so it
// never waits for a slow subscriber: the subscriber's own buffer limit
// decides whether the message is queued or dropped for it, and the Result
// says what happened (how many received it, how many were queued under
// backpressure or dropped). Deliveries allocate nothing; a publish costs
// two allocations (the prepared frame), however many subscribers it has.
//
// PublishFrom, called from a Server callback of the sending connection,
// batches the deliveries of that callback's read batch: every subscriber
// joins the sender's cork (rally.Conn.JoinCork), so the messages one read
// of the sender produces leave in one write per subscriber, as in
// uWebSockets. Subscriptions end by themselves when a connection ends.
//
// A Broker carries publishes between hubs, in one process (Bus) or across
// machines (pubsub/natsbroker); each hub tells its broker which topics it
// has local subscribers for, so that messages go only where they are
// wanted. Delivery across hubs is at most once.
//
// pubsub is for fan-out to WebSocket connections in one server or a few.
// It is not a message queue: nothing is stored, a subscriber that is away
// or too slow misses messages, and there is no acknowledgement or replay.
// Topics are exact strings (no wildcards). Messages published concurrently
// on one topic may reach two subscribers in different orders; the messages
// of one publishing goroutine reach each subscriber in the order published.
package pubsub
