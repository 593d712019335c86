package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/bufpool"
	"github.com/rallyws/rally/pubsub"
)

// wsSession is what the server keeps of one WebSocket connection, on /ws
// or /echo (its Data): 24 bytes for a connection that uses neither
// history, presence nor an expiring token (the rest is made on first
// use, see wsMore). Its fields are used from the connection's callbacks
// only, which never run concurrently.
type wsSession struct {
	grant *grant
	x     *wsMore // nil until one of its parts is needed
	subs  int32   // topics subscribed to
	// recovers is set once the connection subscribes to a history topic:
	// if it is cut for being slow, it is told to recover (4010) what it
	// will miss. Read by the slow-subscriber watch, off the callbacks.
	recovers atomic.Bool
}

// wsMore is the part of a wsSession few connections need.
type wsMore struct {
	expiry *time.Timer // closes the connection when the token expires
	// hist holds the history topics subscribed to (their subscriptions
	// are in the server's histHub, not the pubsub hub).
	hist map[string]bool
	// lagging counts its history subscriptions whose deliveries wait for
	// its queue to empty (histSub.lagging): its drain callback resumes
	// them, and does nothing else when there are none. Changed by the
	// hub under a topic's lock: x is set before the first subscription
	// to a history topic is added, and never again.
	lagging atomic.Int32
	// client is the connection's id in presence (made on its first
	// subscribe to a presence topic); pres the presence topics it is a
	// member of.
	client string
	pres   map[string]bool
	// histOut queues this connection's publishes on history topics for
	// the goroutine that stores them in JetStream, in order (nil until
	// the first; with the memory history they are stored at once).
	histOut chan histPub
}

// more returns ss's wsMore, making it the first time.
func (ss *wsSession) more() *wsMore {
	if ss.x == nil {
		ss.x = &wsMore{}
	}
	return ss.x
}

// inHistory reports whether ss subscribes to the history topic topic;
// inPresence whether it is a member of topic's presence.
func (ss *wsSession) inHistory(topic string) bool  { return ss.x != nil && ss.x.hist[topic] }
func (ss *wsSession) inPresence(topic string) bool { return ss.x != nil && ss.x.pres[topic] }

// request is one message from a /ws client.
type request struct {
	Type  string          `json:"type"`
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data"`
	ID    json.RawMessage `json:"id"`
	Self  bool            `json:"self"`
	// Offset and Epoch, on a subscribe, are the last position the client
	// saw: it asks for what it missed since.
	//
	// Data and ID may point into the message (decodeRequest): valid
	// during the Message callback only.
	Offset *uint64 `json:"offset"`
	Epoch  string  `json:"epoch"`
}

// Error codes of error frames (docs/PROTOCOL.md).
const (
	codeBadRequest    = "bad_request"   // a field is missing or of the wrong kind
	codeUnknownType   = "unknown_type"  // "type" is none of subscribe, unsubscribe, publish
	codeInvalidTopic  = "invalid_topic" // the topic name breaks the rules
	codeForbidden     = "forbidden"     // the token does not grant this topic
	codeLimit         = "limit"         // too many subscriptions
	codeTooLarge      = "too_large"     // other nodes do not carry a message this large
	codeUnavailable   = "unavailable"   // other nodes could not be reached
	codeNoPresence    = "no_presence"   // a presence request on a topic without presence
	reasonTokenExpiry = "token expired"
)

func (s *Server) wsOpen(c *rally.Conn) {
	s.opened("ws")(c)
	s.wsConns.Add(1)
	s.slow.add(c)
}

// wsDrain runs when c's send queue has emptied: the history
// subscriptions that lag behind (their deliveries wait in the hub) are
// resumed, each on a goroutine of its own (see histHub.resume).
func (s *Server) wsDrain(c *rally.Conn) {
	ss, ok := c.Data().(*wsSession)
	if !ok || ss.x == nil || ss.x.lagging.Load() == 0 {
		return
	}
	for topic := range ss.x.hist {
		go s.histHub.resume(c, topic)
	}
}

func (s *Server) wsClose(c *rally.Conn, ce *rally.CloseError) {
	ss := c.Data().(*wsSession)
	s.wsConns.Add(-1)
	s.unwatch(c, ce)
	if x := ss.x; x != nil {
		for topic := range x.hist {
			s.histHub.remove(c, topic)
		}
		for topic := range x.pres {
			s.presence.leave(topic, x.client)
		}
	}
	s.subs.Add(int64(-ss.subs))
	s.m.subscriptions.Sub(float64(ss.subs))
	s.closed("ws")(c, ce)
}

// wsMessage serves one message of the /ws protocol. Problems with a
// request are answered with an error frame; only messages that are not
// the protocol at all (binary, not a JSON object) close the connection.
func (s *Server) wsMessage(c *rally.Conn, typ rally.MessageType, p []byte) {
	if typ != rally.Text {
		s.count("invalid", len(p))
		// RFC 6455 7.4.1: 1003 is for data of a type the endpoint cannot
		// accept, such as binary on a text-only protocol.
		c.Close(rally.CloseUnsupportedData, "the protocol is JSON text messages")
		return
	}
	var req request
	if err := decodeRequest(p, &req); err != nil {
		s.count("invalid", len(p))
		c.Close(rally.ClosePolicyViolation, "message is not a JSON object of the protocol")
		return
	}
	if string(req.ID) == "null" {
		req.ID = nil
	}
	id := req.ID
	if len(id) > 0 && !scalarJSON(id) {
		s.count("invalid", len(p))
		s.reply(c, errorFrame(nil, codeBadRequest, "id must be a string or a number"))
		return
	}
	ss := c.Data().(*wsSession)
	switch req.Type {
	case "subscribe":
		s.count(req.Type, len(p))
		s.reply(c, s.subscribe(c, ss, &req))
	case "unsubscribe":
		s.count(req.Type, len(p))
		s.reply(c, s.unsubscribe(c, ss, &req))
	case "publish":
		s.count(req.Type, len(p))
		s.reply(c, s.wsPublish(c, ss, &req))
	case "presence":
		s.count(req.Type, len(p))
		s.reply(c, s.presenceAnswer(ss, &req))
	case "":
		s.count("unknown", len(p))
		s.reply(c, errorFrame(id, codeBadRequest, `"type" is missing`))
	default:
		s.count("unknown", len(p))
		s.reply(c, errorFrame(id, codeUnknownType, "type "+strconv.Quote(req.Type)+" is not subscribe, unsubscribe, publish or presence"))
	}
}

func (s *Server) count(typ string, n int) {
	s.m.messagesIn.WithLabelValues(typ).Inc()
	s.m.bytesIn.WithLabelValues(typ).Add(float64(n))
}

func (s *Server) subscribe(c *rally.Conn, ss *wsSession, req *request) []byte {
	if err := validTopic(req.Topic); err != nil {
		return errorFrame(req.ID, codeInvalidTopic, err.Error())
	}
	if !ss.grant.maySubscribe(req.Topic) {
		return errorFrame(req.ID, codeForbidden, "the token does not allow subscribing to "+strconv.Quote(req.Topic))
	}
	if ss.inHistory(req.Topic) || s.hub.IsSubscribed(c, req.Topic) {
		return s.ackAfterInterest(c, ack(req.ID))
	}
	if s.cfg.MaxSubscriptions > 0 && int(ss.subs) >= s.cfg.MaxSubscriptions {
		s.m.refusals.WithLabelValues("subscriptions").Inc()
		return errorFrame(req.ID, codeLimit, "a connection may subscribe to at most "+strconv.Itoa(s.cfg.MaxSubscriptions)+" topics")
	}
	var from *position
	if req.Offset != nil && req.Epoch != "" {
		from = &position{*req.Offset, req.Epoch}
	}
	// What the subscription makes the server keep is charged before it
	// is kept: its presence entry, its entry among history subscribers
	// (the hub charges a plain subscription itself).
	presence := s.presenceOf(req.Topic)
	if presence {
		x := ss.more()
		if x.client == "" {
			x.client = newEpoch() + newEpoch()[:4]
		}
		if !s.presence.reserve(req.Topic, x.client, ss.grant.subject) {
			return s.noRoomToSubscribe(req.ID)
		}
	}
	unreserve := func() {
		if presence {
			s.presence.unreserve(req.Topic, ss.x.client, ss.grant.subject)
		}
	}
	if s.historyOf(req.Topic) && !s.budget.Reserve(rally.MemorySubscriptions, histSubCharge(req.Topic)) {
		unreserve()
		return s.noRoomToSubscribe(req.ID)
	}
	if !s.historyOf(req.Topic) {
		if err := s.hub.Subscribe(c, req.Topic); err != nil {
			switch {
			case errors.Is(err, rally.ErrClosed):
				unreserve()
				return nil
			case errors.Is(err, pubsub.ErrNoMemory):
				unreserve()
				return s.noRoomToSubscribe(req.ID)
			}
			// The local subscription stands; messages from other nodes
			// may not arrive until the broker is back.
			s.log.Warn("subscribe: other nodes not told", "topic", req.Topic, "err", err)
		}
	}
	client := s.joinPresence(c, ss, req.Topic)
	if s.historyOf(req.Topic) {
		x := ss.more()
		if x.hist == nil {
			x.hist = map[string]bool{}
		}
		x.hist[req.Topic] = true
		ss.recovers.Store(true)
		ss.subs++
		s.subs.Add(1)
		s.m.subscriptions.Inc()
		// The answer comes from subscribeHistory, id or not.
		// (Its own goroutine answers, after the callback: req.ID may
		// point into the message.)
		s.subscribeHistory(c, req.Topic, bytes.Clone(req.ID), from, client)
		return nil
	}
	ss.subs++
	s.subs.Add(1)
	s.m.subscriptions.Inc()
	if from != nil {
		no := false
		return s.ackAfterInterest(c, subscribeAck(req.ID, req.Topic, &recovery{reason: reasonNoHistory}, &no, client))
	}
	if client != "" {
		return s.ackAfterInterest(c, subscribeAck(req.ID, req.Topic, nil, nil, client))
	}
	return s.ackAfterInterest(c, ack(req.ID))
}

// ackAfterInterest sends a subscribe's ack b once NATS knows of the
// node's subscription (afterInterest), so that a client that has its ack
// gets whatever any node publishes on the topic after. It returns nil:
// nothing is left for the caller to send.
func (s *Server) ackAfterInterest(c *rally.Conn, b []byte) []byte {
	if b != nil {
		s.afterInterest(func() { s.reply(c, b) })
	}
	return nil
}

// noRoomToSubscribe counts and answers a subscribe refused because the
// memory budget has no room for what it would keep.
func (s *Server) noRoomToSubscribe(id []byte) []byte {
	s.m.refusals.WithLabelValues("subscriptions_memory").Inc()
	return errorFrame(id, codeLimit, "not subscribed: the server's memory budget has no room for another subscription; retry later")
}

// joinPresence makes c a member of topic if it has presence (what it
// costs was reserved), and returns c's client id then ("" otherwise).
func (s *Server) joinPresence(c *rally.Conn, ss *wsSession, topic string) string {
	if !s.presenceOf(topic) {
		return ""
	}
	x := ss.more()
	if x.pres == nil {
		x.pres = map[string]bool{}
	}
	x.pres[topic] = true
	s.presence.join(c, topic, x.client, ss.grant.subject)
	return x.client
}

func (s *Server) unsubscribe(c *rally.Conn, ss *wsSession, req *request) []byte {
	if err := validTopic(req.Topic); err != nil {
		return errorFrame(req.ID, codeInvalidTopic, err.Error())
	}
	if ss.inHistory(req.Topic) {
		delete(ss.x.hist, req.Topic)
		s.histHub.remove(c, req.Topic)
		ss.subs--
		s.subs.Add(-1)
		s.m.subscriptions.Dec()
	} else if s.hub.Unsubscribe(c, req.Topic) {
		ss.subs--
		s.subs.Add(-1)
		s.m.subscriptions.Dec()
	}
	if ss.inPresence(req.Topic) {
		// After the unsubscribe: the leaver is not told of its own leave.
		delete(ss.x.pres, req.Topic)
		s.presence.leave(req.Topic, ss.x.client)
	}
	return ack(req.ID)
}

func (s *Server) wsPublish(c *rally.Conn, ss *wsSession, req *request) []byte {
	if err := validTopic(req.Topic); err != nil {
		return errorFrame(req.ID, codeInvalidTopic, err.Error())
	}
	if !ss.grant.mayPublish(req.Topic) {
		return errorFrame(req.ID, codeForbidden, "the token does not allow publishing to "+strconv.Quote(req.Topic))
	}
	if len(req.Data) == 0 {
		return errorFrame(req.ID, codeBadRequest, `publish needs "data"`)
	}
	if s.historyOf(req.Topic) {
		if _, remote := s.history.(*jsHistory); remote {
			return s.queueHistoryPublish(c, ss, req)
		}
		// Every subscriber gets it, the publisher included: positions
		// have no holes.
		pos, err := s.history.publish(c, req.Topic, req.Data, false)
		s.publishes.Add(1)
		s.m.publishes.WithLabelValues("ws").Inc()
		if err != nil {
			return s.historyError(req.ID, err)
		}
		return publishAck(req.ID, pos)
	}
	// The envelope is built in a lent buffer: the hub frames a copy of it
	// once for every subscriber, and Send copies what it keeps.
	buf := bufpool.Get(envelopeSize(req.Topic, len(req.Data)))
	defer bufpool.Put(buf)
	env := appendEnvelope((*buf)[:0], req.Topic, req.Data, false)
	*buf = env
	res, err := s.hub.PublishFrom(c, req.Topic, rally.Text, env)
	if req.Self && s.hub.IsSubscribed(c, req.Topic) {
		res.Add(c.Send(rally.Text, env))
	}
	s.published("ws", res, len(env))
	if err != nil {
		return s.brokerError(req.ID, err)
	}
	return ack(req.ID)
}

// brokerError answers a publish that reached this node's subscribers but
// not the other nodes.
func (s *Server) brokerError(id json.RawMessage, err error) []byte {
	s.m.drops.WithLabelValues("broker").Inc()
	if errors.Is(err, pubsub.ErrTooLarge) {
		return errorFrame(id, codeTooLarge, "delivered on this node only: "+err.Error())
	}
	s.log.Warn("publish: other nodes not reached", "err", err)
	return errorFrame(id, codeUnavailable, "delivered on this node only: "+err.Error())
}

// published counts a publish and what became of it on this node.
func (s *Server) published(source string, res pubsub.Result, size int) {
	s.publishes.Add(1)
	s.m.publishes.WithLabelValues(source).Inc()
	s.delivered(res, size)
}

// delivered counts what became of a message of size bytes on this node's
// subscribers, whether it was published here or on another node.
func (s *Server) delivered(res pubsub.Result, size int) {
	n := res.Received()
	s.deliveries.Add(int64(n))
	s.m.deliveries.Add(float64(n))
	s.m.messagesOut.WithLabelValues("message").Add(float64(n))
	s.m.bytesOut.WithLabelValues("message").Add(float64(n * size))
	if res.Queued > 0 {
		s.m.backpressure.Add(float64(res.Queued))
	}
	if n := res.Dropped - res.Closing; n > 0 {
		// A subscriber that was closing is not counted: its close is.
		s.m.drops.WithLabelValues("buffer_limit").Add(float64(n))
	}
}

// reply sends an ack or error frame (nil: nothing) to c without blocking.
func (s *Server) reply(c *rally.Conn, b []byte) {
	if b == nil {
		return
	}
	kind := "ack"
	if bytes.HasPrefix(b, errorPrefix) {
		kind = "error"
	}
	st, err := c.Send(rally.Text, b)
	if err != nil || st == rally.Dropped {
		s.m.drops.WithLabelValues("reply").Inc()
		return
	}
	s.m.messagesOut.WithLabelValues(kind).Inc()
	s.m.bytesOut.WithLabelValues(kind).Add(float64(len(b)))
}

// appendEnvelope appends the delivery of a publish to dst, built once for
// all its subscribers: {"type":"message","topic":T,"data":D} (with
// "encoding":"base64" when data is base64 of bytes that were not UTF-8).
// topic is valid (validTopic), so it needs no escaping; data is JSON.
func appendEnvelope(dst []byte, topic string, data []byte, base64 bool) []byte {
	dst = appendEnvelopeStart(dst, topic)
	dst = append(dst, data...)
	return appendEnvelopeEnd(dst, base64)
}

// envelopeSize is the size of the envelope of data bytes (at most: the
// base64 mark included).
func envelopeSize(topic string, data int) int {
	return len(envelopeHead) + len(topic) + len(envelopeData) + data + len(envelopeBase64) + 1
}

const (
	envelopeHead   = `{"type":"message","topic":"`
	envelopeData   = `","data":`
	envelopeBase64 = `,"encoding":"base64"`
)

// appendEnvelopeStart appends the envelope up to its data.
func appendEnvelopeStart(dst []byte, topic string) []byte {
	dst = append(dst, envelopeHead...)
	dst = append(dst, topic...)
	return append(dst, envelopeData...)
}

// appendEnvelopeEnd appends what follows the data.
func appendEnvelopeEnd(dst []byte, base64 bool) []byte {
	if base64 {
		dst = append(dst, envelopeBase64...)
	}
	return append(dst, '}')
}

func ack(id json.RawMessage) []byte {
	if len(id) == 0 {
		return nil
	}
	b := make([]byte, 0, len(ackHead)+len(id)+1)
	b = append(b, ackHead...)
	b = append(b, id...)
	return append(b, '}')
}

const ackHead = `{"type":"ack","id":`

var errorPrefix = []byte(`{"type":"error",`)

func errorFrame(id json.RawMessage, code, message string) []byte {
	b := append([]byte(nil), errorPrefix...)
	if len(id) > 0 {
		b = append(b, `"id":`...)
		b = append(b, id...)
		b = append(b, ',')
	}
	b = append(b, `"code":"`...)
	b = append(b, code...)
	b = append(b, `","message":`...)
	b = append(b, jsonString([]byte(message))...)
	return append(b, '}')
}

// scalarJSON reports whether raw (valid JSON) is a string or a number.
func scalarJSON(raw json.RawMessage) bool {
	switch c := raw[0]; {
	case c == '"', c == '-', '0' <= c && c <= '9':
		return true
	}
	return false
}
