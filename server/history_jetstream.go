package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// storeDir is where the embedded NATS server listening on addr keeps the
// history: StoreDir, or a directory named after addr under the system's
// temporary one (the same after a restart on the same address).
func (h *HistoryConfig) storeDir(addr string) string {
	if h.StoreDir != "" {
		return h.StoreDir
	}
	name := strings.Map(func(r rune) rune {
		if r == ':' || r == '/' || r == '[' || r == ']' {
			return '_'
		}
		return r
	}, addr)
	return filepath.Join(os.TempDir(), "rally-jetstream-"+name)
}

// jsHistory is the history of nodes joined by NATS: a JetStream stream
// shared by all of them, whose sequences are the offsets and whose
// creation time is the epoch. New messages reach this node's subscribers
// from the stream, in stream order, whichever node published them.
type jsHistory struct {
	h       *natsbroker.History
	timeout time.Duration
	deliver func(from *rally.Conn, topic string, offset, prev uint64, pm *rally.PreparedMessage)
}

// opTimeout bounds one request to JetStream.
const opTimeout = 10 * time.Second

// jetStreamWait bounds how long a node waits at start for JetStream when
// its embedded server routes to others: their JetStream cluster elects a
// leader only once enough of them are up.
const jetStreamWait = 2 * time.Minute

func (s *Server) startJetStream(b *natsbroker.Broker) (historyStore, error) {
	j := &jsHistory{timeout: opTimeout, deliver: s.histHub.deliver}
	opts := natsbroker.HistoryOptions{
		Stream:      s.cfg.History.Stream,
		MaxPerTopic: int64(s.cfg.History.Size),
		MaxAge:      s.cfg.History.Age,
	}
	deadline := time.Now().Add(opTimeout)
	clustered := s.cfg.NATS.Embedded != "" && len(s.cfg.NATS.Routes) > 0
	if clustered {
		deadline = time.Now().Add(jetStreamWait)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(opTimeout, time.Until(deadline)))
		h, err := b.OpenHistory(ctx, opts, j.handle, func(err error) { s.log.Warn("history", "err", err) })
		cancel()
		if err == nil {
			j.h = h
			return j, nil
		}
		if !clustered || time.Until(deadline) < time.Second {
			if errors.Is(err, natsbroker.ErrNoJetStream) {
				return nil, fmt.Errorf("rally serve: --history with NATS needs JetStream on the NATS server (nats-server -js, or a jetstream {} block in its configuration): %w", err)
			}
			return nil, fmt.Errorf("rally serve: history: %w", err)
		}
		s.log.Info("history: waiting for the embedded NATS servers' JetStream cluster (start the other nodes)", "err", err)
		time.Sleep(time.Second)
	}
}

// handle delivers a record of the stream. It may run before
// startJetStream has set j.h (the consumer starts inside OpenHistory): a
// node joining a stream others publish to got records at once, and read
// j.h unset; the epoch comes with the record.
func (j *jsHistory) handle(r natsbroker.Record) {
	pm := framedDelivery(r.Topic, r.Seq, r.Epoch, r.Data, r.Base64)
	j.deliver(nil, r.Topic, r.Seq, r.Prev, pm)
}

func (j *jsHistory) publish(_ *rally.Conn, topic string, data []byte, base64 bool) (position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	seq, err := j.h.Publish(ctx, topic, data, base64)
	if err != nil {
		return position{}, err
	}
	return position{seq, j.h.Epoch()}, nil
}

func (j *jsHistory) top(topic string) (position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	seq, epoch, err := j.h.Top(ctx, topic)
	return position{seq, epoch}, err
}

func (j *jsHistory) since(topic string, pos position, limit int) (recovery, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	recs, top, err := j.h.Since(ctx, topic, pos.offset, pos.epoch, limit)
	r := recovery{top: position{top, j.h.Epoch()}}
	switch {
	case errors.Is(err, natsbroker.ErrEpoch):
		r.reason = reasonEpoch
	case errors.Is(err, natsbroker.ErrExpired):
		r.reason = reasonExpired
	case errors.Is(err, natsbroker.ErrLimit):
		r.reason = reasonLimit
	case err != nil:
		return recovery{}, err
	}
	for _, rec := range recs {
		r.msgs = append(r.msgs, framedDelivery(topic, rec.Seq, r.top.epoch, rec.Data, rec.Base64))
	}
	return r, nil
}

func (j *jsHistory) close() { j.h.Close() }

// histPub is a publish on a history topic waiting to be stored.
type histPub struct {
	topic    string
	data, id []byte
}

// maxQueuedHistoryPublishes bounds the publishes of one connection
// waiting for JetStream; more are refused with "limit".
const maxQueuedHistoryPublishes = 1024

// queueHistoryPublish hands a publish on a history topic to the
// connection's history publisher, which stores it in JetStream (a round
// trip) off the connection's callback, in the order published, and
// answers it.
func (s *Server) queueHistoryPublish(c *rally.Conn, ss *wsSession, req *request) []byte {
	x := ss.more()
	if x.histOut == nil {
		x.histOut = make(chan histPub, maxQueuedHistoryPublishes)
		go s.historyPublisher(c, x.histOut)
	}
	// req's bytes belong to the message being read: copy them.
	p := histPub{topic: req.Topic, data: bytes.Clone(req.Data), id: bytes.Clone(req.ID)}
	select {
	case x.histOut <- p:
		return nil
	default:
		s.m.refusals.WithLabelValues("history_queue").Inc()
		return errorFrame(req.ID, codeLimit, "not published: "+strconv.Itoa(maxQueuedHistoryPublishes)+" publishes of this connection are waiting for the history already")
	}
}

// historyPublisher stores the publishes of c on history topics, one
// after the other, until c ends.
func (s *Server) historyPublisher(c *rally.Conn, in <-chan histPub) {
	for {
		select {
		case <-c.Done():
			return
		case p := <-in:
			pos, err := s.history.publish(nil, p.topic, p.data, false)
			s.publishes.Add(1)
			s.m.publishes.WithLabelValues("ws").Inc()
			if err != nil {
				s.reply(c, s.historyError(p.id, err))
				continue
			}
			s.reply(c, publishAck(p.id, pos))
		}
	}
}
