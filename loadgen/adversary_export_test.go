package loadgen

import (
	"context"
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
		if s := o.h.h2NonReader(ctx, pathOf(wsURL), streams, topic); s != nil {
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
func (o *H2NonReaders) Answers() map[string]int64 {
	o.h.mu.Lock()
	defer o.h.mu.Unlock()
	out := map[string]int64{}
	for k, v := range o.h.res.Answers {
		out[k] = v
	}
	return out
}

// Close ends every connection.
func (o *H2NonReaders) Close() {
	o.stop()
	o.h.closeAll()
}
