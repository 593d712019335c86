package server

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/bufpool"
	"github.com/rallyws/rally/internal/shrinkmap"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// HistoryConfig keeps the last messages of some topics, so that a client
// that reconnects gets what it missed (docs/PROTOCOL.md, "History and
// recovery"). Alone, a server keeps them in memory; with NATS, in a
// JetStream stream that every node shares and that outlives them.
type HistoryConfig struct {
	// Topics are the patterns (as in tokens: "*" for any run of
	// characters) of the topics with history. None: no history.
	Topics []string
	// Size is how many messages a topic keeps at most. Default 100.
	Size int
	// Age is how long a message is kept at most. Default 10 minutes.
	Age time.Duration
	// RecoveryLimit is how many messages one recovery replays at most;
	// a client that missed more is told recovered:false, reason
	// "limit". Default 1000.
	RecoveryLimit int
	// StoreDir is where the embedded NATS server keeps its JetStream
	// data (needed with history and an embedded NATS server).
	StoreDir string
	// Stream names the JetStream stream of the history. Default "RALLY_HISTORY".
	Stream string
	// Replays is how many recoveries are read and sent at once; the
	// others wait their turn (their acks come when they start), so that
	// a reconnect storm of clients that each missed many messages does
	// not take the CPU from clients that are already connected. Default
	// 4 per CPU.
	Replays int
}

func (h *HistoryConfig) fill() error {
	switch {
	case h.Size < 0:
		return configErrorf("--history-size must be positive")
	case h.Age < 0:
		return configErrorf("--history-age must be positive")
	case h.RecoveryLimit < 0:
		return configErrorf("--recovery-limit must be positive")
	case h.Replays < 0:
		return configErrorf("history replays must be positive")
	}
	for _, p := range h.Topics {
		if err := validPattern(p); err != nil {
			return configErrorf("--history: %v", err)
		}
	}
	if h.Size == 0 {
		h.Size = 100
	}
	if h.Age == 0 {
		h.Age = 10 * time.Minute
	}
	if h.RecoveryLimit == 0 {
		h.RecoveryLimit = 1000
	}
	if h.Stream == "" {
		h.Stream = "RALLY_HISTORY"
	}
	if h.Replays == 0 {
		h.Replays = 4 * runtime.GOMAXPROCS(0)
	}
	return nil
}

// position is where a message stands in its topic's history.
type position struct {
	offset uint64
	epoch  string
}

// Reasons of recovered:false (docs/PROTOCOL.md).
const (
	reasonEpoch       = "epoch"
	reasonExpired     = "expired"
	reasonLimit       = "limit"
	reasonNoHistory   = "no_history"
	reasonUnavailable = "unavailable"
)

// closeInsufficientState closes a connection that would miss a message
// of a history topic: the client reconnects and recovers it.
const closeInsufficientState = 4010

// recovery is what a history holds after a position: the deliveries
// (positions included), framed, in order, or why it cannot say (reason),
// and the topic's position at the time of reading.
type recovery struct {
	msgs   []*rally.PreparedMessage
	top    position
	reason string
}

// historyStore keeps the history of topics and delivers each new message
// of a topic, in offset order, to histHub.deliver.
type historyStore interface {
	// publish stores a message; from, if not nil, is the publishing
	// connection, in one of whose callbacks the call runs.
	publish(from *rally.Conn, topic string, data []byte, base64 bool) (position, error)
	since(topic string, pos position, limit int) (recovery, error)
	top(topic string) (position, error)
	close()
}

// histHub is the subscribers of this node to history topics. A
// subscriber is first buffering (its replay is being written; live
// messages wait in its buffer), then live.
type histHub struct {
	mu     sync.RWMutex
	topics shrinkmap.Map[string, *histTopic] // gives back the room of topics gone
	// bufferLimit bounds the messages a buffering subscriber holds;
	// lagLimit those a lagging one holds (see histSub.lagging).
	bufferLimit, lagLimit int
	// budget is charged for the subscribers and their buffers.
	budget    *rally.MemoryBudget
	onDeliver func(res pubsub.Result, size int)
}

type histTopic struct {
	mu   sync.Mutex
	subs shrinkmap.Map[*rally.Conn, *histSub] // gives back the room of a crowd that left
	// gone is set, under mu, when the last subscriber left and the topic
	// is being taken out of the hub: an add that found it makes another.
	gone bool
}

type histSub struct {
	buffering bool
	// lagging is set, with buffering, on a live subscriber whose queue
	// refused a delivery (its peer reads slower than the topic is
	// published, for now): the delivery and the ones after it wait in
	// buf, in order, and go once its queue has emptied (resume), instead
	// of the connection being closed to reconnect and recover them. A
	// subscriber that falls further behind than lagLimit messages is
	// closed with 4010; one whose queue stays full is cut by the slow
	// subscriber watch (4010 too).
	lagging  bool
	buf      []histMsg
	charged  int64 // to the budget's recovery category, for buf
	overflow bool
	// sent is the offset of the last message sent to the subscriber:
	// a later delivery at or before it is a duplicate (with NATS, the
	// replay read from JetStream may be ahead of this node's delivery).
	sent uint64
}

type histMsg struct {
	offset, prev uint64
	pm           *rally.PreparedMessage
}

// framed frames a delivery (env) once for all its receivers: the history
// that keeps it, each subscriber's queue that must wait to send it, each
// replay that sends it again. A queue refers to the frame instead of
// copying it, and the memory budget charges it once however many do.
func framed(env []byte) *rally.PreparedMessage {
	pm, err := rally.NewPreparedMessage(rally.Text, env)
	if err != nil {
		panic(err) // Text is a message type
	}
	return pm
}

func newHistHub(bufferLimit, lagLimit int) *histHub {
	return &histHub{bufferLimit: bufferLimit, lagLimit: lagLimit}
}

// histSubCost estimates what a subscriber of a history topic costs in
// the hub's maps, on a 64-bit machine; its topic's name is added
// (histSubCharge). histMsgCost is a message's entry in a buffer.
const (
	histSubCost = 256
	histMsgCost = 48
)

func histSubCharge(topic string) int64 { return histSubCost + int64(len(topic)) }

// add makes c a buffering subscriber of topic. Its cost
// (histSubCharge) was charged to the hub's budget; remove gives it back.
// The hub's lock is never held while waiting for a topic's: a topic's
// lock is held for a whole delivery to its subscribers, and a subscribe
// to a busy topic must not hold up the deliveries to the others.
func (h *histHub) add(c *rally.Conn, topic string) *histSub {
	s := &histSub{buffering: true}
	var gone *histTopic
	for {
		t := h.topicFor(topic, gone)
		t.mu.Lock()
		if !t.gone {
			t.subs.Set(c, s)
			t.mu.Unlock()
			return s
		}
		t.mu.Unlock()
		gone = t
	}
}

// topicNamed returns topic's entry, nil if it has none.
func (h *histHub) topicNamed(topic string) *histTopic {
	h.mu.RLock()
	t, _ := h.topics.Get(topic)
	h.mu.RUnlock()
	return t
}

// topicFor returns topic's entry, made if it has none or if the one it
// has is gone (being taken out by remove, which then leaves the new one).
func (h *histHub) topicFor(topic string, gone *histTopic) *histTopic {
	h.mu.RLock()
	t, _ := h.topics.Get(topic)
	h.mu.RUnlock()
	if t != nil && t != gone {
		return t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, _ = h.topics.Get(topic); t == nil || t == gone {
		t = &histTopic{}
		h.topics.Set(topic, t)
	}
	return t
}

// remove ends c's subscription to topic. A topic left without
// subscribers is marked gone under its lock, then taken out of the hub.
func (h *histHub) remove(c *rally.Conn, topic string) {
	t := h.topicNamed(topic)
	if t == nil {
		return
	}
	t.mu.Lock()
	if s, ok := t.subs.Get(c); ok {
		t.subs.Delete(c)
		h.endLag(c, s) // an unsubscribe: the connection stays
		h.drop(s)
		h.budget.Release(rally.MemorySubscriptions, histSubCharge(topic))
	}
	empty := t.subs.Len() == 0 && !t.gone
	if empty {
		t.gone = true
	}
	t.mu.Unlock()
	if empty {
		h.mu.Lock()
		if now, _ := h.topics.Get(topic); now == t {
			h.topics.Delete(topic)
		}
		h.mu.Unlock()
	}
}

// drop empties s's buffer and gives back its charge.
func (h *histHub) drop(s *histSub) {
	h.budget.Release(rally.MemoryRecovery, s.charged)
	s.buf, s.charged = nil, 0
}

func (h *histHub) count(topic string) int {
	t := h.topicNamed(topic)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subs.Len()
}

// deliver hands the message at offset of topic, whose predecessor in
// the topic is at prev, to the topic's subscribers here: sent to the live
// ones, kept for the buffering ones. A subscriber that was sent the
// message already is left out (with NATS, a replay read from JetStream
// may be ahead of this node's delivery); one that was not sent its
// predecessor (this node lost messages between nodes), or that cannot
// take it (its send buffer is full), is closed with 4010: it will
// recover them.
//
// from, if not nil, is the publisher, in one of whose callbacks deliver
// runs: the sends join its cork (one write per batch of publishes). pm is
// the delivery, framed (see framed).
func (h *histHub) deliver(from *rally.Conn, topic string, offset, prev uint64, pm *rally.PreparedMessage) {
	t := h.topicNamed(topic)
	if t == nil {
		return
	}
	var res pubsub.Result
	size := int64(len(pm.Payload()))
	t.mu.Lock()
	for c, s := range t.subs.All() {
		if s.buffering {
			if !h.keep(s, histMsg{offset, prev, pm}) && s.lagging {
				// It fell further behind than it may: it recovers them.
				h.endLag(c, s)
				res.Dropped++
				c.Close(closeInsufficientState, "insufficient state")
				continue
			}
			if s.lagging {
				res.Queued++
			}
			continue
		}
		if offset <= s.sent {
			continue
		}
		if s.sent != 0 && prev > s.sent {
			res.Dropped++
			c.Close(closeInsufficientState, "insufficient state")
			continue
		}
		s.sent = offset
		if from != nil {
			c.JoinCork(from)
		}
		st, err := c.SendPrepared(pm)
		if err == nil && st == rally.Dropped {
			// Its queue is at its limit: it lags until the queue empties.
			s.buffering, s.lagging = true, true
			lagging(c, 1)
			if h.keep(s, histMsg{offset, prev, pm}) {
				res.Queued++
				if c.BufferedAmount() == 0 {
					// It emptied before its drain callback could see it
					// lagging: no drain is coming for it.
					go h.resume(c, topic)
				}
				continue
			}
			h.endLag(c, s)
		}
		if err != nil || st == rally.Dropped {
			res.Add(rally.Dropped, err) // a closing subscriber counts in Closing too
			c.Close(closeInsufficientState, "insufficient state")
			continue
		}
		res.Sent++
	}
	t.mu.Unlock()
	if h.onDeliver != nil {
		h.onDeliver(res, int(size))
	}
}

// keep puts m in s's buffer, charged to the budget, and reports whether
// s has every message since it began buffering (it did not overflow). A
// message there already (with NATS, a replay may be ahead of this node's
// delivery) is left out. A buffering subscriber's messages are charged
// whole: they wait for its replay, which may be read from JetStream and
// hold its own copies. A lagging one's are charged for their entry only:
// their frames are those the history keeps, and the queues of the
// subscribers that are not lagging share them (a thousand subscribers
// lagging behind a flood would otherwise be charged a thousand times
// what the process holds, and the budget would refuse fresh clients).
func (h *histHub) keep(s *histSub, m histMsg) bool {
	if s.overflow {
		return false
	}
	if len(s.buf) > 0 && m.offset <= s.buf[len(s.buf)-1].offset {
		return true
	}
	limit, cost := h.bufferLimit, histMsgCost+int64(len(m.pm.Payload()))
	if s.lagging {
		limit, cost = h.lagLimit, histMsgCost
	}
	if len(s.buf) >= limit || !h.budget.Reserve(rally.MemoryRecovery, cost) {
		s.overflow = true
		h.drop(s)
		return false
	}
	s.buf = append(s.buf, m)
	s.charged += cost
	return true
}

// endLag ends s's lag, whether it caught up or is being closed.
func (h *histHub) endLag(c *rally.Conn, s *histSub) {
	if s.lagging {
		s.lagging = false
		lagging(c, -1)
	}
}

// lagging adds delta to the count of c's lagging subscriptions, which
// its drain callback reads to know whether it has any to resume.
func lagging(c *rally.Conn, delta int32) {
	if ss, ok := c.Data().(*wsSession); ok && ss.x != nil {
		ss.x.lagging.Add(delta)
	}
}

// resume sends c the messages its subscription to topic kept while it
// lagged, in order, until its queue refuses one (it lags on, and resumes
// at the next drain) or none is left (it is live again). It runs on a
// goroutine of its own, started by the connection's drain callback: the
// callback may run inside a send of deliver, which holds the topic's
// lock.
func (h *histHub) resume(c *rally.Conn, topic string) {
	t := h.topicNamed(topic)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, _ := t.subs.Get(c)
	if s == nil || !s.lagging {
		return
	}
	n := 0
	for _, m := range s.buf {
		if s.sent != 0 && m.prev > s.sent {
			// Its predecessor did not reach this node.
			break
		}
		st, err := c.SendPrepared(m.pm)
		if err == nil && st == rally.Dropped {
			break
		}
		if err != nil {
			h.endLag(c, s)
			h.drop(s)
			return
		}
		s.sent = m.offset
		n++
	}
	if n < len(s.buf) && s.sent != 0 && s.buf[n].prev > s.sent {
		h.endLag(c, s)
		h.drop(s)
		c.Close(closeInsufficientState, "insufficient state")
		return
	}
	h.budget.Release(rally.MemoryRecovery, int64(n)*histMsgCost)
	s.charged -= int64(n) * histMsgCost
	clear(s.buf[:n])
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf, s.buffering = nil, false
		h.endLag(c, s)
	}
}

// broadcast sends b to the live subscribers of topic here but from,
// without a position: presence events.
func (h *histHub) broadcast(from *rally.Conn, topic string, b []byte) {
	t := h.topicNamed(topic)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, s := range t.subs.All() {
		if c != from && !s.buffering {
			c.Send(rally.Text, b)
		}
	}
}

// goLive sends c first, if not nil, and the messages its buffer holds
// after offset, then makes it live, all under the topic's lock: a
// subscribe ack sent as first reaches the client before anything it then
// publishes is delivered, so a publisher subscribed with no position gets
// its own message before its publish's ack. It reports false if sub is
// no longer c's subscription to topic, or its buffer overflowed (c is
// closed with 4010 then).
func (h *histHub) goLive(c *rally.Conn, topic string, sub *histSub, after uint64, first []byte) bool {
	t := h.topicNamed(topic)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, _ := t.subs.Get(c)
	if s != sub {
		return false
	}
	defer h.drop(s)
	if first != nil {
		if st, err := c.Send(rally.Text, first); err != nil || st == rally.Dropped {
			c.Close(closeInsufficientState, "insufficient state")
			return false
		}
	}
	if s.overflow {
		c.Close(closeInsufficientState, "insufficient state")
		return false
	}
	for _, m := range s.buf {
		if m.offset <= after {
			continue // in the replay already
		}
		if after != 0 && m.prev > after {
			// Its predecessor was neither replayed nor delivered here.
			c.Close(closeInsufficientState, "insufficient state")
			return false
		}
		if st, err := c.SendPrepared(m.pm); err != nil || st == rally.Dropped {
			c.Close(closeInsufficientState, "insufficient state")
			return false
		}
		after = m.offset
	}
	s.buffering, s.sent = false, after
	return true
}

// historyOf reports whether topic has history.
func (s *Server) historyOf(topic string) bool {
	return s.history != nil && matchAny(s.cfg.History.Topics, topic)
}

// subscribeHistory subscribes c to a history topic: it answers with the
// topic's position and, if the client asked (from != nil), replays what
// it missed since from, then goes live, without gap or duplicate. It
// runs on its own goroutine: a replay may wait for the client to read.
func (s *Server) subscribeHistory(c *rally.Conn, topic string, id []byte, from *position, client string) {
	sub := s.histHub.add(c, topic)
	go func() {
		if from != nil {
			if !s.replays.enter(c.Done()) {
				return // gone while waiting its turn
			}
			defer s.replays.leave()
		}
		var r recovery
		var err error
		if from != nil {
			r, err = s.history.since(topic, *from, s.cfg.History.RecoveryLimit)
		} else {
			r.top, err = s.history.top(topic)
		}
		if err != nil {
			s.log.Warn("history: reading failed", "topic", topic, "err", err)
			r = recovery{reason: reasonUnavailable}
			if from == nil {
				// Without a position to start from, the subscription is live
				// from now on; the client learns it with the next message.
				s.histHub.goLive(c, topic, sub, 0, subscribeAck(id, topic, nil, nil, client))
				return
			}
		}
		// The messages read to be replayed are held until they are
		// written: charged, or not replayed (the client learns it
		// was not recovered, and goes on from the top).
		held := int64(0)
		for _, pm := range r.msgs {
			held += histMsgCost + int64(len(pm.Payload()))
		}
		if !s.budget.Reserve(rally.MemoryRecovery, held) {
			s.m.refusals.WithLabelValues("recovery_memory").Inc()
			r = recovery{top: r.top, reason: reasonUnavailable}
			held = 0
		}
		defer s.budget.Release(rally.MemoryRecovery, held)
		recovered := from != nil && r.reason == ""
		var flag *bool
		if from != nil {
			flag = &recovered
		}
		ack := subscribeAck(id, topic, &r, flag, client)
		if from != nil {
			s.recoveries.WithLabelValues(orOK(r.reason)).Inc()
		}
		if from == nil {
			// Nothing to replay: the ack goes with the subscription going
			// live (see goLive).
			s.histHub.goLive(c, topic, sub, r.top.offset, ack)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.replayTimeout())
		defer cancel()
		if err := c.Write(ctx, rally.Text, ack); err != nil {
			return
		}
		if err := replay(ctx, c, r.msgs); err != nil {
			c.Close(closeInsufficientState, "insufficient state")
			return
		}
		s.m.messagesOut.WithLabelValues("message").Add(float64(len(r.msgs)))
		s.histHub.goLive(c, topic, sub, r.top.offset, nil)
	}()
}

// replayBatch bounds a batch of a replay: messages, and bytes (at least
// one message).
const (
	replayBatch      = 64
	replayBatchBytes = 64 << 10
)

// replay sends envs to c in order, in batches: each gathered in one cork
// (one system call, where the kernel takes it), the next one sent once
// the last frame of this one has left, so that a client that reads
// slowly paces its replay and its queue holds one batch at most. A
// blocking Write per message cost a system call and a wake-up each: a
// reconnect storm of 2,000 clients recovering 999 messages, again and
// again, made 230,000 of them a second, and a fresh client's handshake
// waited 100-260 ms for a processor.
func replay(ctx context.Context, c *rally.Conn, msgs []*rally.PreparedMessage) error {
	left := make(chan error, 1)
	done := func(err error) { left <- err }
	for len(msgs) > 0 {
		n, size := 0, 0
		for n < len(msgs) && n < replayBatch && (n == 0 || size+len(msgs[n].Payload()) <= replayBatchBytes) {
			size += len(msgs[n].Payload())
			n++
		}
		var err error
		c.Cork(func() {
			for i, pm := range msgs[:n] {
				var st rally.SendStatus
				if i < n-1 {
					st, err = c.SendPrepared(pm)
				} else {
					st, err = c.SendPreparedDone(pm, done)
				}
				if err == nil && st == rally.Dropped {
					err = errReplayDropped
				}
				if err != nil {
					return
				}
			}
		})
		if err != nil {
			return err
		}
		select {
		case err = <-left:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		msgs = msgs[n:]
	}
	return nil
}

// errReplayDropped: a replayed message did not fit the subscriber's
// buffer limit.
var errReplayDropped = errors.New("rally serve: a replayed message was dropped by the buffer limit")

func orOK(reason string) string {
	if reason == "" {
		return "recovered"
	}
	return reason
}

// admission lets at most n goroutines at once through enter and records the most it ever let through at once.
type admission struct {
	slots        chan struct{}
	active, peak atomic.Int64
}

func newAdmission(n int) *admission {
	return &admission{slots: make(chan struct{}, n)}
}

// enter waits for a slot and reports true, or reports false if gone is
// closed first.
func (a *admission) enter(gone <-chan struct{}) bool {
	select {
	case a.slots <- struct{}{}:
	case <-gone:
		return false
	}
	n := a.active.Add(1)
	for p := a.peak.Load(); n > p && !a.peak.CompareAndSwap(p, n); p = a.peak.Load() {
	}
	return true
}

func (a *admission) leave() {
	a.active.Add(-1)
	<-a.slots
}

// replayTimeout bounds how long a replay may wait for its client.
func (s *Server) replayTimeout() time.Duration {
	if s.cfg.WriteStallTimeout > 0 {
		return s.cfg.WriteStallTimeout
	}
	return time.Minute
}

// subscribeAck is the answer to a subscribe on a history or presence
// topic, sent with or without an id: {"type":"ack","id":…,"topic":…,
// "offset":…,"epoch":…,"recovered":…,"reason":…,"replayed":…,"client":…}.
func subscribeAck(id []byte, topic string, r *recovery, recovered *bool, client string) []byte {
	b := []byte(`{"type":"ack",`)
	if len(id) > 0 {
		b = append(b, `"id":`...)
		b = append(b, id...)
		b = append(b, ',')
	}
	b = append(b, `"topic":"`...)
	b = append(b, topic...)
	b = append(b, '"')
	if r != nil && r.top.epoch != "" {
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, r.top.offset, 10)
		b = append(b, `,"epoch":`...)
		b = append(b, jsonString([]byte(r.top.epoch))...)
	}
	if recovered != nil {
		b = append(b, `,"recovered":`...)
		b = strconv.AppendBool(b, *recovered)
		if *recovered {
			b = append(b, `,"replayed":`...)
			b = strconv.AppendInt(b, int64(len(r.msgs)), 10)
		} else {
			b = append(b, `,"reason":"`...)
			b = append(b, r.reason...)
			b = append(b, '"')
		}
	}
	if client != "" {
		b = append(b, `,"client":"`...)
		b = append(b, client...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// publishAck is the answer to a publish on a history topic.
func publishAck(id []byte, pos position) []byte {
	if len(id) == 0 {
		return nil
	}
	b := append([]byte(`{"type":"ack","id":`), id...)
	b = append(b, `,"offset":`...)
	b = strconv.AppendUint(b, pos.offset, 10)
	b = append(b, `,"epoch":`...)
	b = append(b, jsonString([]byte(pos.epoch))...)
	return append(b, '}')
}

// framedDelivery frames the delivery of a message of a history topic
// (see framed), built in a pooled buffer that the frame copies: the
// envelope itself is not kept.
func framedDelivery(topic string, offset uint64, epoch string, data []byte, base64 bool) *rally.PreparedMessage {
	buf := bufpool.Get(80 + len(topic) + len(epoch) + len(data))
	defer bufpool.Put(buf)
	*buf = appendPositionedEnvelope((*buf)[:0], topic, offset, epoch, data, base64)
	return framed(*buf)
}

// appendPositionedEnvelope appends the delivery of a message of a history
// topic to b:
// {"type":"message","topic":T,"offset":N,"epoch":E,"data":D}.
func appendPositionedEnvelope(b []byte, topic string, offset uint64, epoch string, data []byte, base64 bool) []byte {
	b = append(b, `{"type":"message","topic":"`...)
	b = append(b, topic...)
	b = append(b, `","offset":`...)
	b = strconv.AppendUint(b, offset, 10)
	b = append(b, `,"epoch":`...)
	b = append(b, jsonString([]byte(epoch))...)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	if base64 {
		b = append(b, `,"encoding":"base64"`...)
	}
	return append(b, '}')
}

// historyError answers a publish on a history topic that did not get a
// position: it reached no one.
func (s *Server) historyError(id []byte, err error) []byte {
	s.m.drops.WithLabelValues("history").Inc()
	s.log.Warn("publish: history refused it", "err", err)
	if errors.Is(err, pubsub.ErrTooLarge) {
		return errorFrame(id, codeTooLarge, "not published: "+err.Error())
	}
	return errorFrame(id, codeUnavailable, "not published: "+err.Error())
}

// startHistory sets up the history of cfg.History.Topics, if any: in
// memory alone, in JetStream with NATS.
func (s *Server) startHistory() error {
	// A subscriber lags by half the history at most: closed then (4010),
	// it can still recover what it missed if it comes back before the
	// other half is published.
	s.histHub = newHistHub(s.cfg.History.RecoveryLimit+1024, max(1, s.cfg.History.Size/2))
	s.replays = newAdmission(s.cfg.History.Replays)
	s.histHub.onDeliver = s.delivered
	s.recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_recoveries_total",
		Help: "Subscribes that asked for the messages missed since a position, by outcome (recovered, or the reason they were not: epoch, expired, limit, no_history, unavailable).",
	}, []string{"outcome"})
	s.m.reg.MustRegister(s.recoveries)
	if len(s.cfg.History.Topics) == 0 {
		return nil
	}
	switch b := s.cfg.Broker.(type) {
	case nil:
		m := newMemHistory(s.cfg.History.Size, s.cfg.History.Age, s.histHub.deliver)
		m.inUse = func(topic string) bool { return s.histHub.count(topic) > 0 }
		s.history = m
	case *natsbroker.Broker:
		h, err := s.startJetStream(b)
		if err != nil {
			return err
		}
		s.history = h
	default:
		return errors.New("rally serve: history needs NATS (with JetStream) to span several nodes, or no other nodes")
	}
	// Closers run last first: the history lets go of NATS before the broker.
	s.closers = append(s.closers, s.history.close)
	return nil
}

// publishHistory serves POST /publish on a history topic: the answer
// carries the message's position; received and dropped are not counted
// (deliveries on every node follow from the history).
func (s *Server) publishHistory(w http.ResponseWriter, topic string, data []byte, base64 bool) {
	pos, err := s.history.publish(nil, topic, data, base64)
	s.publishes.Add(1)
	s.m.publishes.WithLabelValues("http").Inc()
	if err != nil {
		s.m.drops.WithLabelValues("history").Inc()
		status := http.StatusServiceUnavailable
		if errors.Is(err, pubsub.ErrTooLarge) {
			status = http.StatusRequestEntityTooLarge
			httpError(w, status, codeTooLarge, "not published: "+err.Error())
			return
		}
		s.log.Warn("publish: history refused it", "err", err)
		httpError(w, status, codeUnavailable, "not published: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, publishAnswer{Topic: topic, Offset: &pos.offset, Epoch: pos.epoch})
}
