package server

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/rallyws/rally"
)

// memHistory is the history of a server alone (no NATS): each topic keeps
// its last messages in memory, with offsets 1, 2, 3… in an epoch drawn
// when the topic's history began in this process. A restart begins new
// epochs.
type memHistory struct {
	size    int
	age     time.Duration
	metaTTL time.Duration
	now     func() time.Time
	deliver func(from *rally.Conn, topic string, offset, prev uint64, pm *rally.PreparedMessage)
	inUse   func(topic string) bool // has subscribers here

	mu     sync.Mutex
	topics map[string]*memTopic
}

// memTopic is one topic's history: top is the offset of its last
// message, recs the messages still kept, oldest first.
type memTopic struct {
	mu    sync.Mutex
	epoch string
	top   uint64
	last  time.Time // of the last publish, or of the topic's creation
	recs  []memRecord
}

type memRecord struct {
	offset uint64
	at     time.Time
	pm     *rally.PreparedMessage // the delivery, position included, framed
}

func newMemHistory(size int, age time.Duration, deliver func(*rally.Conn, string, uint64, uint64, *rally.PreparedMessage)) *memHistory {
	return &memHistory{
		size: size, age: age, metaTTL: max(24*time.Hour, 2*age),
		now: time.Now, deliver: deliver, topics: map[string]*memTopic{},
	}
}

func newEpoch() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// topic returns topic's history, begun now if it had none.
func (h *memHistory) topic(name string) *memTopic {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[name]
	if t == nil {
		t = &memTopic{epoch: newEpoch(), last: h.now()}
		h.topics[name] = t
		if len(h.topics)%1024 == 0 {
			h.sweepLocked()
		}
	}
	return t
}

// sweepLocked forgets the topics that have kept no message, seen no
// publish for metaTTL and have no subscriber: a client returning to one
// finds a new epoch.
func (h *memHistory) sweepLocked() {
	now := h.now()
	for name, t := range h.topics {
		t.mu.Lock()
		t.trimLocked(now, h.age)
		idle := len(t.recs) == 0 && now.Sub(t.last) > h.metaTTL
		t.mu.Unlock()
		if idle && (h.inUse == nil || !h.inUse(name)) {
			delete(h.topics, name)
		}
	}
}

// trimLocked drops the messages older than age.
func (t *memTopic) trimLocked(now time.Time, age time.Duration) {
	i := 0
	for i < len(t.recs) && now.Sub(t.recs[i].at) > age {
		i++
	}
	if i > 0 {
		clear(t.recs[:i])
		t.recs = t.recs[i:]
	}
}

// publish gives data the next offset of topic, keeps it and delivers it
// to the topic's subscribers, all under the topic's lock: deliveries
// leave in offset order.
func (h *memHistory) publish(from *rally.Conn, topic string, data []byte, base64 bool) (position, error) {
	t := h.topic(topic)
	now := h.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.top++
	t.last = now
	pm := framedDelivery(topic, t.top, t.epoch, data, base64)
	t.trimLocked(now, h.age)
	if len(t.recs) >= h.size {
		n := len(t.recs) - h.size + 1
		clear(t.recs[:n])
		t.recs = t.recs[n:]
	}
	t.recs = append(t.recs, memRecord{offset: t.top, at: now, pm: pm})
	h.deliver(from, topic, t.top, t.top-1, pm)
	return position{t.top, t.epoch}, nil
}

// since returns what topic holds after pos, at most limit messages, or
// why it cannot (a reason of the protocol), with the topic's position.
func (h *memHistory) since(topic string, pos position, limit int) (recovery, error) {
	t := h.topic(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	r := recovery{top: position{t.top, t.epoch}}
	t.trimLocked(h.now(), h.age)
	switch {
	case pos.epoch != t.epoch || pos.offset > t.top:
		r.reason = reasonEpoch
		return r, nil
	case pos.offset == t.top:
		return r, nil
	case len(t.recs) == 0 || t.recs[0].offset > pos.offset+1:
		r.reason = reasonExpired
		return r, nil
	case t.top-pos.offset > uint64(limit):
		r.reason = reasonLimit
		return r, nil
	}
	i := int(pos.offset + 1 - t.recs[0].offset)
	for _, rec := range t.recs[i:] {
		r.msgs = append(r.msgs, rec.pm)
	}
	return r, nil
}

// top returns topic's position.
func (h *memHistory) top(topic string) (position, error) {
	t := h.topic(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	return position{t.top, t.epoch}, nil
}

func (h *memHistory) close() {}
