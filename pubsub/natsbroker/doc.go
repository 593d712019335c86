// Package natsbroker carries rally pub/sub between nodes through NATS: a
// pubsub.Broker that lets the hubs of many processes, on one machine or
// many, share topics, and an embedded NATS server for nodes that have no
// NATS of their own to point at.
//
// It is for fan-out across rally nodes: at most once, in the order each
// node published, while NATS is reachable. It is not a durable queue, not
// a general NATS client, and not a way to speak to arbitrary NATS
// subjects: it reads and writes only the subjects under its prefix, in its
// own format. For topics that need more, a History (Broker.OpenHistory)
// keeps their last messages in a JetStream stream, under PREFIX.h, so that
// a client that missed some can be given exactly those.
//
// # Subjects
//
// A topic travels on the subject PREFIX.tB where PREFIX is the subject
// prefix (WithSubjectPrefix, "rally" by default) and B is the topic's bytes
// in unpadded base64url (RFC 4648 section 5), after a literal "t". The
// encoding is one token of the characters A-Z a-z 0-9 - _ only, so no topic
// can contain a token separator ('.'), a wildcard ('*', '>'), white space or
// a byte NATS refuses, and two topics never share a subject; the "t" keeps
// the token non-empty for the empty topic. The mapping is reversible: a tool
// subscribed to "rally.>" can name the topic of every message it sees.
//
// # Messages
//
// The body of each NATS message is a small binary header followed by the
// payload as published (never re-encoded):
//
//	byte 0       format version (1)
//	byte 1       message type: 1 text, 2 binary (rally.Text, rally.Binary)
//	byte 2       length n of the publishing node's name (1..255)
//	n bytes      the node's name
//	4 bytes      the publishing broker's stream, big endian
//	8 bytes      the message's sequence number in its stream and topic, big endian
//	rest         the payload
//
// With a cluster secret (WithClusterSecret) the format version is 2 and
// the message ends with 32 more bytes: the HMAC-SHA256, under the secret,
// of the subject, a zero byte and the message before them (version byte
// included). A broker with a secret drops every message without a valid
// one; a broker without a secret reads version 1 only.
//
// A History opened on a broker with a secret signs each record it stores
// too (the header Rally-Mac: the HMAC-SHA256 of the subject, the record's
// Rally-Prev, its Rally-Encoding and its data, each but the data followed
// by a zero byte, in unpadded base64url), and drops and counts a record of
// the stream without a valid one (see History).
//
// Each broker numbers its publishes per topic, 1, 2, 3 and so on, within a
// stream it picks at random (and picks again when it forgets its counters).
// A receiving broker that sees a number jump knows how many messages of
// that topic it lost (in an outage, or because NATS dropped them for a slow
// consumer) and says so through Receiver.Error and Stats.Lost.
package natsbroker
