package natsbroker

import (
	"time"

	"github.com/nats-io/nats.go"
)

// Option configures New.
type Option func(*config)

type config struct {
	name          string
	prefix        string
	reconnectWait time.Duration
	onError       func(error)
	natsOptions   []nats.Option
	secret        []byte
}

func defaultConfig() config {
	return config{name: "rally", prefix: "rally", reconnectWait: 2 * time.Second}
}

// WithName sets the name the connection shows in NATS monitoring ("rally"
// by default). It is not the hub's node name, which the hub chooses.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithSubjectPrefix sets the subject tokens under which topics travel
// ("rally" by default): the nodes that share topics use the same prefix,
// and nodes with different prefixes on one NATS do not see each other.
// New refuses a prefix with an empty token, a wildcard or white space.
func WithSubjectPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithReconnectWait sets how long the broker waits between attempts to
// reconnect to NATS (2 s by default). It tries for ever, until Close.
func WithReconnectWait(d time.Duration) Option {
	return func(c *config) { c.reconnectWait = d }
}

// WithErrorHandler makes f receive every failure the broker reports, as
// the hub's Receiver does, and also those that happen before Attach or
// after Close. f is called from the broker's goroutines and must not
// block.
func WithErrorHandler(f func(error)) Option { return func(c *config) { c.onError = f } }

// WithNATSOptions passes options to the NATS client (credentials, TLS,
// timeouts). They are applied after the broker's own, so they win; the
// broker's handlers of disconnection, reconnection and asynchronous errors
// run before any the options set. Do not turn echo back on
// (nats.NoEcho is how a node's own messages stay out of its hub) nor limit
// the reconnection attempts unless the node should give up on NATS.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *config) { c.natsOptions = append(c.natsOptions, opts...) }
}

// WithClusterSecret makes the broker sign every message it publishes with
// an HMAC-SHA256 under secret (over the subject and the message), and
// drop, count (Stats.Forged) and report every message it receives that
// does not carry a valid one: a client of NATS that lacks the secret
// cannot speak for a node. Every node of a cluster needs the same secret;
// a broker without one neither signs nor accepts signed messages. The
// secret is copied.
func WithClusterSecret(secret []byte) Option {
	return func(c *config) { c.secret = append([]byte(nil), secret...) }
}
