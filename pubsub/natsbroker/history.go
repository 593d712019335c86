package natsbroker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rallyws/rally/pubsub"
)

// Headers of the messages of a history stream.
const (
	// hdrPrev is the stream sequence of the topic's previous message
	// when this one was written (0: none kept), as JetStream checked it.
	hdrPrev = "Rally-Prev"
	// hdrEncoding is "base64" when the data is base64 of bytes.
	hdrEncoding = "Rally-Encoding"
	// hdrMAC, with a cluster secret, is the record's HMAC-SHA256 under
	// it (recordMAC), base64url without padding.
	hdrMAC = "Rally-Mac"
)

// HistoryOptions configure OpenHistory.
type HistoryOptions struct {
	// Stream is the name of the JetStream stream. Default "RALLY_HISTORY".
	Stream string
	// MaxPerTopic and MaxAge bound what the stream keeps of each topic.
	MaxPerTopic int64
	MaxAge      time.Duration
	// Replicas is the stream's number of replicas in a JetStream
	// cluster. Default 1.
	Replicas int
}

// Record is one message of a topic's history.
type Record struct {
	Topic string
	// Seq is the message's sequence in the stream: it increases across
	// all topics, so a topic's sequences are increasing but not
	// contiguous.
	Seq uint64
	// Prev is the sequence of the topic's message before this one, as
	// the stream held it when this one was written (0: the stream held
	// none of the topic).
	Prev uint64
	// Data is the message as published; Base64 says it is base64 of
	// bytes.
	Data   []byte
	Base64 bool
	// Epoch is the history's epoch (see History.Epoch) as the record was
	// delivered: known to the handler before OpenHistory has returned.
	Epoch string
}

// History keeps the last messages of topics in a JetStream stream shared
// by every node on the NATS server or cluster: each message gets the
// stream's sequence as its position, and a History hands every new
// message of the stream, in stream order, to its deliver function. Its
// methods are safe for concurrent use.
//
// Each message names the sequence of its topic's previous message, which
// JetStream checks as it stores it (Nats-Expected-Last-Subject-Sequence):
// so Since can prove that nothing between two messages of a topic was
// lost. Publishes on one topic are serialised across nodes by that check
// (a node that loses the race re-reads and retries).
//
// With a cluster secret (WithClusterSecret) every record is signed as it
// is stored, and a record of the stream without a valid signature (written
// into the stream by a client of NATS that lacks the secret), or a signed
// one written again, is neither delivered nor replayed by Since: it is
// dropped and counted in the broker's Stats.Forged, and the next genuine
// record is delivered as following the last genuine one.
type History struct {
	b       *Broker
	js      jetstream.JetStream
	stream  jetstream.Stream
	prefix  string
	epoch   atomic.Pointer[string]
	cc      jetstream.ConsumeContext
	deliver func(Record)
	onError func(error)

	mu     sync.Mutex
	topics map[string]*histTopic

	// seen is used by handle alone (the consumer's one goroutine).
	seen map[string]histSeen
}

// histTopic is what a node knows of one topic it publishes on: the last
// sequence it saw, and a lock that orders its publishes.
type histTopic struct {
	mu   sync.Mutex
	last uint64
	ok   bool // last is known
}

// maxHistTopics bounds the topics a History remembers the last sequence
// of; past it, it forgets them all (and reads each again when needed).
const maxHistTopics = 1 << 16

// ErrNoJetStream is returned by OpenHistory when the NATS server has no
// JetStream (nats-server -js, or jetstream {} in its configuration).
var ErrNoJetStream = errors.New("natsbroker: the NATS server has no JetStream")

// OpenHistory opens (creating or updating it) the history stream on b's
// connection, and starts handing its new messages to deliver (from one
// goroutine, in stream order). onError receives what no call returns.
func (b *Broker) OpenHistory(ctx context.Context, o HistoryOptions, deliver func(Record), onError func(error)) (*History, error) {
	if o.Stream == "" {
		o.Stream = "RALLY_HISTORY"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	js, err := jetstream.New(b.nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, fmt.Errorf("%w (%v)", ErrNoJetStream, err)
		}
		return nil, fmt.Errorf("natsbroker: asking NATS for JetStream: %w", err)
	}
	prefix := b.cfg.prefix + ".h"
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              o.Stream,
		Description:       "rally serve: the history of topics (subject " + prefix + ".t<base64url of the topic>)",
		Subjects:          []string{prefix + ".*"},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: o.MaxPerTopic,
		MaxAge:            o.MaxAge,
		Storage:           jetstream.FileStorage,
		Replicas:          o.Replicas,
		AllowDirect:       true,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbroker: history stream %s: %w", o.Stream, err)
	}
	h := &History{b: b, js: js, stream: st, prefix: prefix, deliver: deliver, onError: onError, topics: map[string]*histTopic{}, seen: map[string]histSeen{}}
	h.setEpoch(st.CachedInfo())
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + ".*"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbroker: history consumer: %w", err)
	}
	h.cc, err = cons.Consume(h.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if h.onError != nil {
			h.onError(fmt.Errorf("natsbroker: history consumer: %w", err))
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("natsbroker: history consumer: %w", err)
	}
	return h, nil
}

// setEpoch takes the stream's identity, its creation time, as the epoch
// of positions: a stream deleted and made again starts a new epoch.
func (h *History) setEpoch(info *jetstream.StreamInfo) {
	e := strconv.FormatInt(info.Created.UnixNano(), 36)
	h.epoch.Store(&e)
}

// Epoch returns the epoch of the stream's sequences.
func (h *History) Epoch() string { return *h.epoch.Load() }

func (h *History) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	topic, err := topicOf(h.prefix, m.Subject())
	if err != nil {
		return
	}
	r := record(topic, meta.Sequence.Stream, m.Headers(), m.Data())
	h.saw(topic, r.Seq)
	last, known := h.seen[topic]
	if len(h.seen) >= maxHistTopics && !known {
		clear(h.seen)
	}
	ok := h.authentic(m.Subject(), m.Headers(), m.Data())
	if ok && known && r.Prev != last.last {
		// Signed, but not where it was written: JetStream checked
		// that a record names the topic's last one when it stored it.
		h.b.forged.Add(1)
		ok = false
	}
	if !ok {
		if known {
			h.seen[topic] = histSeen{last: r.Seq, genuine: last.genuine}
		}
		return
	}
	if known {
		// The records after last.genuine, if any, were forged and
		// dropped: r follows last.genuine.
		r.Prev = last.genuine
	}
	h.seen[topic] = histSeen{last: r.Seq, genuine: r.Seq}
	r.Epoch = h.Epoch()
	h.deliver(r)
}

// histSeen is what the stream's consumer last saw of a topic: the
// sequence of its last record, and of its last genuine one.
type histSeen struct{ last, genuine uint64 }

// recordMAC returns the HMAC-SHA256 under secret of a record stored on
// subject: the subject, its predecessor's sequence, its encoding and its
// data, each but the data followed by a zero byte. The sequence JetStream
// gives the record is not known when it is signed; the predecessor it
// names is, and JetStream checks it as it stores the record, so a signed
// record written again into the stream names a predecessor that is not
// the record before it, and is dropped as forged too (live, once the
// consumer has seen the topic's record before it; in Since, after the
// first record of a replay).
func recordMAC(secret []byte, subject, prev, encoding string, data []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	for _, s := range []string{subject, prev, encoding} {
		mac.Write([]byte(s))
		mac.Write([]byte{0})
	}
	mac.Write(data)
	return mac.Sum(nil)
}

// sign sets msg's MAC header for its headers and data as they are.
func (h *History) sign(msg *nats.Msg) {
	if h.b.cfg.secret == nil {
		return
	}
	sum := recordMAC(h.b.cfg.secret, msg.Subject, msg.Header.Get(hdrPrev), msg.Header.Get(hdrEncoding), msg.Data)
	msg.Header.Set(hdrMAC, base64.RawURLEncoding.EncodeToString(sum))
}

// authentic reports whether a record of the stream was signed with the
// cluster secret (always true without one), and counts it in
// Stats.Forged if not.
func (h *History) authentic(subject string, hdr nats.Header, data []byte) bool {
	secret := h.b.cfg.secret
	if secret == nil {
		return true
	}
	got, err := base64.RawURLEncoding.DecodeString(hdr.Get(hdrMAC))
	if err == nil && hmac.Equal(got, recordMAC(secret, subject, hdr.Get(hdrPrev), hdr.Get(hdrEncoding), data)) {
		return true
	}
	h.b.forged.Add(1)
	return false
}

func record(topic string, seq uint64, hdr nats.Header, data []byte) Record {
	prev, _ := strconv.ParseUint(hdr.Get(hdrPrev), 10, 64)
	return Record{Topic: topic, Seq: seq, Prev: prev, Data: data, Base64: hdr.Get(hdrEncoding) == "base64"}
}

func (h *History) topic(name string) *histTopic {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[name]
	if t == nil {
		if len(h.topics) >= maxHistTopics {
			clear(h.topics)
		}
		t = &histTopic{}
		h.topics[name] = t
	}
	return t
}

// saw notes a message of topic at seq from the stream, so that this
// node's next publish on topic expects it.
func (h *History) saw(topic string, seq uint64) {
	h.mu.Lock()
	t := h.topics[topic]
	h.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.ok && seq > t.last {
		t.last = seq
	}
	t.mu.Unlock()
}

// lastOf reads the sequence of topic's last message in the stream (0:
// none).
func (h *History) lastOf(ctx context.Context, topic string) (uint64, error) {
	m, err := h.stream.GetLastMsgForSubject(ctx, subjectOf(h.prefix, topic))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return m.Sequence, nil
}

// maxPublishTries bounds the retries of a publish that other nodes'
// publishes on the same topic keep overtaking; between tries a node backs
// off a random while, growing up to maxPublishBackoff.
const (
	maxPublishTries   = 64
	maxPublishBackoff = 5 * time.Millisecond
)

// Publish stores data as the next message of topic and returns its
// sequence, once the stream has it. A message larger than NATS carries
// gets an error wrapping pubsub.ErrTooLarge.
func (h *History) Publish(ctx context.Context, topic string, data []byte, base64 bool) (uint64, error) {
	if max := h.js.Conn().MaxPayload(); int64(len(data)+128) > max {
		return 0, fmt.Errorf("%w: %d bytes on topic %q, NATS carries at most %d", pubsub.ErrTooLarge, len(data), topic, max)
	}
	t := h.topic(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	msg := &nats.Msg{Subject: subjectOf(h.prefix, topic), Data: data, Header: nats.Header{}}
	if base64 {
		msg.Header.Set(hdrEncoding, "base64")
	}
	backoff := 50 * time.Microsecond
	for range maxPublishTries {
		if !t.ok {
			last, err := h.lastOf(ctx, topic)
			if err != nil {
				return 0, err
			}
			t.last, t.ok = last, true
		}
		msg.Header.Set(hdrPrev, strconv.FormatUint(t.last, 10))
		h.sign(msg)
		ack, err := h.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(t.last))
		if err != nil {
			if wrongLast(err) {
				t.ok = false
				select {
				case <-time.After(rand.N(backoff)):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				backoff = min(2*backoff, maxPublishBackoff)
				continue
			}
			return 0, err
		}
		t.last = ack.Sequence
		return ack.Sequence, nil
	}
	return 0, fmt.Errorf("natsbroker: publish on topic %q overtaken %d times by other nodes", topic, maxPublishTries)
}

func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Why Since could not recover.
var (
	// ErrEpoch: the position is not of this stream (another epoch, or
	// beyond its last message).
	ErrEpoch = errors.New("natsbroker: position of another epoch")
	// ErrExpired: messages after the position are no longer kept.
	ErrExpired = errors.New("natsbroker: history expired")
	// ErrLimit: more messages than the limit came after the position.
	ErrLimit = errors.New("natsbroker: too many messages to replay")
)

// Top returns the position a subscriber of topic starts from: the
// sequence of its last message kept, or, if none is, the stream's last
// sequence, and the epoch.
func (h *History) Top(ctx context.Context, topic string) (uint64, string, error) {
	info, err := h.stream.Info(ctx)
	if err != nil {
		return 0, "", err
	}
	h.setEpoch(info)
	last, err := h.lastOf(ctx, topic)
	if err != nil {
		return 0, "", err
	}
	if last == 0 {
		last = info.State.LastSeq
	}
	return last, h.Epoch(), nil
}

// Since returns the messages of topic after the position (seq, epoch),
// in order, at most limit of them, and the position they end at; or
// ErrEpoch, ErrExpired or ErrLimit with the topic's position now (where a
// subscriber that cannot recover starts).
//
// A position is recoverable when nothing of the topic after it can have
// been removed: the first message after it names it (or an older one)
// as its predecessor, and the stream still holds every message after it.
// With a cluster secret, records not signed with it are left out (and
// counted in Stats.Forged), and a first message that is not signed vouches
// for nothing: the position is then recoverable only if the stream still
// holds every message after it.
func (h *History) Since(ctx context.Context, topic string, seq uint64, epoch string, limit int) ([]Record, uint64, error) {
	info, err := h.stream.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	h.setEpoch(info)
	top := info.State.LastSeq
	if epoch != h.Epoch() || seq > top {
		return nil, top, ErrEpoch
	}
	subject := subjectOf(h.prefix, topic)
	// Nothing removed after seq, stream-wide (age, size).
	keptAll := info.State.FirstSeq <= seq+1
	first, err := h.stream.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// No message of the topic after seq: recovered if none can
		// have been removed.
		if keptAll {
			return nil, seq, nil
		}
		last, err := h.lastOf(ctx, topic)
		if err != nil {
			return nil, 0, err
		}
		if last != 0 {
			// One at or before seq is kept: limits remove oldest first.
			return nil, seq, nil
		}
		return nil, top, ErrExpired
	}
	if err != nil {
		return nil, 0, err
	}
	prev, _ := strconv.ParseUint(first.Header.Get(hdrPrev), 10, 64)
	firstOK := h.authentic(subject, first.Header, first.Data)
	switch {
	case !firstOK:
		if !keptAll {
			return nil, top, ErrExpired
		}
	case prev != seq && !(prev < seq && keptAll):
		return nil, top, ErrExpired
	}
	// Read from first on, through a consumer of this topic only.
	cons, err := h.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     subject,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       first.Sequence,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, 0, err
	}
	defer h.stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name)
	pending := cons.CachedInfo().NumPending
	switch {
	case pending > uint64(limit):
		return nil, top, ErrLimit
	case pending == 0:
		// first was removed meanwhile.
		return nil, top, ErrExpired
	}
	n := int(pending)
	recs := make([]Record, 0, n)
	read, end := 0, seq
	for read < n {
		batch, err := cons.Fetch(min(n-read, 1024), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, 0, err
		}
		got := read
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, 0, err
			}
			read++
			r := record(topic, meta.Sequence.Stream, m.Headers(), m.Data())
			switch {
			case r.Seq == first.Sequence:
				// Checked (and counted if forged) above.
				if firstOK {
					recs = append(recs, r)
				}
			case !h.authentic(subject, m.Headers(), m.Data()):
			case r.Prev != end:
				// Signed, but written again where it does not belong.
				h.b.forged.Add(1)
			default:
				recs = append(recs, r)
			}
			end = r.Seq
		}
		if err := batch.Error(); err != nil {
			return nil, 0, err
		}
		if read == got {
			// Removed while being read.
			return nil, top, ErrExpired
		}
	}
	return recs, end, nil
}

// Close stops the delivery of new messages.
func (h *History) Close() {
	h.cc.Stop()
}
