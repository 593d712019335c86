package loadgen

import (
	"context"
	"fmt"
	"sync"
)

// H2NonReaders is what OpenH2NonReaders opened.
type H2NonReaders struct {
	h     *hostileRun
	conns []*h2NonReaders
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// OpenH2NonReaders opens conns HTTP/2 connections to the /ws endpoint
// wsURL, each with streams WebSockets that never read; each subscribes to
// topic once accepted, unless topic is empty.
func OpenH2NonReaders(wsURL string, conns, streams int, topic string) (*H2NonReaders, error) {
	t, err := newTarget(wsURL, true, false)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	o := &H2NonReaders{h: &hostileRun{t: t, res: &HostileResult{Answers: map[string]int64{}}}, stop: stop}
	for range conns {
		if s := o.h.h2NonReader(ctx, pathOf(wsURL), streams, topic, ""); s != nil {
			o.conns = append(o.conns, s)
		}
	}
	return o, nil
}

// Counts returns how many streams the server accepted, refused, and
// reset after accepting them.
func (o *H2NonReaders) Counts() (accepted, refused, cut int64) {
	for _, s := range o.conns {
		accepted += s.accepted.Load()
		refused += s.refused.Load()
		cut += s.cut.Load()
	}
	return
}

// Answers returns the answers counted so far.
func (o *H2NonReaders) Answers() map[string]int64 { return o.h.answers() }

// Close ends every connection.
func (o *H2NonReaders) Close() {
	o.stop()
	o.h.closeAll()
}

// answers returns a copy of the answers counted so far.
func (h *hostileRun) answers() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for k, v := range h.res.Answers {
		out[k] = v
	}
	return out
}

// FastSubscriber is the adversary's fast subscriber, without the
// publisher that floods its topic.
type FastSubscriber struct{ f *fastSub }

// StartFastSubscriber connects the fast subscriber to the /ws endpoint
// wsURL; it reads the adversary's flooded topic until Close.
func StartFastSubscriber(wsURL string) (*FastSubscriber, error) {
	t, err := newTarget(wsURL, true, false)
	if err != nil {
		return nil, err
	}
	h := &hostileRun{t: t, res: &HostileResult{Answers: map[string]int64{}}}
	ctx, stop := context.WithCancel(context.Background())
	f := &fastSub{h: h, stop: stop}
	if !f.subscribe(ctx) {
		return nil, fmt.Errorf("no fast subscriber: %v", h.answers())
	}
	return &FastSubscriber{f}, nil
}

// Delivered returns the messages of the topic counted so far.
func (s *FastSubscriber) Delivered() int64 { return s.f.delivered.Load() }

// Answers returns the answers counted so far.
func (s *FastSubscriber) Answers() map[string]int64 { return s.f.h.answers() }

// Close ends the subscriber and waits for its goroutines.
func (s *FastSubscriber) Close() { s.f.close() }

// ScanDelivery is what the fast subscriber reads of a frame without
// decoding it: its type and position, type and epoch as raw JSON.
func ScanDelivery(p []byte) (typ []byte, offset uint64, epoch []byte, positioned bool) {
	return scanDelivery(p)
}
