package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/pusherwire"
)

// The events of rally bench pusher --client-events: sent over WebSocket
// by publisher sockets instead of triggered over HTTP.

// publisher is a socket that sends events: client events on a private
// channel (Pusher), or publishes (/ws). It subscribes to its channel, as
// Pusher takes client events from subscribers only, so it gets the
// events of the channel's other publishers and never its own.
type publisher struct {
	c    *rally.Conn // nil when it could not subscribe
	ch   int         // its channel
	slot int         // its place among the channel's publishers
	tag  string      // in the data of its events, after the send time
	// flushed is closed by the answer to the request it sends after its
	// last event: the server has handled every event before it, and
	// refused ones have been told.
	flushed chan struct{}
}

// clientPace is how fast a publisher sends. The server keeps a bucket of
// the app's client-event-rate events for each socket, refilled at as
// many a second, and refuses an event that finds less than one
// (pusher:error 4301). A publisher keeps its own bucket of half as many,
// refilled at 9/10 of the rate: its events then find room even when the
// way to the server bunches them by up to half a second (at rates of 2
// and more; below, an event finds room if it came a second after the
// one before).
type clientPace struct {
	burst int     // events sent at once
	rate  float64 // events a second after the burst
}

func paceFor(rate float64) clientPace {
	return clientPace{burst: max(1, int(rate/2)), rate: 0.9 * rate}
}

// publishers is how many publishers a run has: cfg.Publishers, or enough
// that none sends more than its burst, at most one for every ten
// subscribers (they get one another's events, work for the server
// that the deliveries do not count), as many on each channel, at least
// one.
func publishers(cfg PusherConfig) int {
	if cfg.Publishers > 0 {
		return cfg.Publishers
	}
	n := cfg.Conns / 10 / cfg.Channels * cfg.Channels
	if cfg.Events > 0 {
		perChannel := (cfg.Events + cfg.Channels - 1) / cfg.Channels
		burst := paceFor(cfg.ClientEventRate).burst
		n = min(n, cfg.Channels*((perChannel+burst-1)/burst))
	}
	return max(n, cfg.Channels)
}

// publishers makes the publishers of conns, which connect made: conn j
// on channel j % Channels.
func (f *fanout) publishers(conns []*rally.Conn) []*publisher {
	pubs := make([]*publisher, len(conns))
	for j, c := range conns {
		pubs[j] = &publisher{c: c, ch: j % f.cfg.Channels, slot: j / f.cfg.Channels,
			tag: "p" + strconv.Itoa(j), flushed: make(chan struct{})}
	}
	return pubs
}

// share is how many of the run's Events p sends: event n goes to
// channel n % Channels, and the channel's events to its publishers in
// turn.
func (f *fanout) share(p *publisher, all int) int {
	c := f.cfg.Channels
	onChannel := (f.cfg.Events - p.ch + c - 1) / c
	senders := (all - p.ch + c - 1) / c
	return (onChannel - p.slot + senders - 1) / senders
}

// sendClientEvents sends the run's events from pubs, each its share (or
// until deadline without Events), and returns once the server answered
// what each sent after its last event.
func (f *fanout) sendClientEvents(ctx context.Context, pubs []*publisher, deadline time.Time) {
	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := -1
			if f.cfg.Events > 0 {
				n = f.share(p, len(pubs))
			}
			f.sendFrom(ctx, p, n, deadline)
		}()
	}
	wg.Wait()
}

var errNoPublisher = errors.New("not sent: its publisher could not subscribe")

// sendFrom sends n events from p (n < 0: until deadline), paced, then a
// request whose answer says the server has handled them.
func (f *fanout) sendFrom(ctx context.Context, p *publisher, n int, deadline time.Time) {
	if p.c == nil {
		for range n {
			f.sendErrs.add(errNoPublisher)
		}
		return
	}
	ch := f.channel(p.ch)
	pace := paceFor(f.cfg.ClientEventRate)
	b := bucket{pace: pace, tokens: float64(pace.burst), last: time.Now()}
	for i := 0; n < 0 || i < n; i++ {
		if b.take(ctx) != nil || n < 0 && time.Now().After(deadline) {
			break
		}
		if err := p.c.Write(ctx, rally.Text, f.eventMessage(ch, fanoutPayload(f.cfg.Size, p.tag))); err != nil {
			f.sendErrs.add(err)
			continue
		}
		f.triggered.Add(1)
		f.expected.Add(f.perChannel[p.ch])
		f.forPeers.Add(f.pubsOn[p.ch] - 1)
	}
	// Pusher answers a ping, /ws a subscribe with an id (again: a no-op),
	// each after the requests before it.
	flush := []byte(`{"event":"pusher:ping","data":{}}`)
	if f.protocol == "ws" {
		flush = []byte(`{"type":"subscribe","topic":"` + ch + `","id":"flush"}`)
	}
	if err := p.c.Write(ctx, rally.Text, flush); err != nil {
		f.errs.add(err)
		return
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-p.flushed:
	case <-ctx.Done():
	case <-t.C:
		f.errs.add(errors.New("a publisher had no answer 30s after its last event"))
	}
}

// eventMessage is the message that sends data to ch: a client event, or
// a publish on /ws.
func (f *fanout) eventMessage(ch, data string) []byte {
	var b []byte
	if f.protocol == "ws" {
		b, _ = json.Marshal(map[string]string{"type": "publish", "topic": ch, "data": data})
	} else {
		b, _ = json.Marshal(map[string]string{"event": f.event(), "channel": ch, "data": data})
	}
	return b
}

// bucket paces a publisher.
type bucket struct {
	pace   clientPace
	tokens float64
	last   time.Time
}

// take waits until the bucket holds an event and takes it.
func (b *bucket) take(ctx context.Context) error {
	for {
		now := time.Now()
		b.tokens = min(float64(b.pace.burst), b.tokens+now.Sub(b.last).Seconds()*b.pace.rate)
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
			return nil
		}
		t := time.NewTimer(time.Duration((1 - b.tokens) / b.pace.rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// readPublisher reads what p gets until ctx ends: the other publishers'
// events, refusals of its own, the answer after its last.
func (f *fanout) readPublisher(ctx context.Context, p *publisher) {
	for {
		_, b, err := p.c.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.errs.add(err)
			}
			return
		}
		if f.protocol == "ws" {
			var m wsMessage
			switch {
			case json.Unmarshal(b, &m) != nil:
				f.errs.add(fmt.Errorf("unexpected message %.80s", b))
			case m.Type == "message":
				f.fromPeer(p, m.Data)
			case string(m.ID) == `"flush"`:
				p.flush()
			case m.Type == "error":
				f.refused(p, fmt.Errorf("publish refused: %s: %s", m.Code, m.Message))
			default:
				f.errs.add(fmt.Errorf("unexpected message %.80s", b))
			}
			continue
		}
		var e pusherEvent
		switch {
		case json.Unmarshal(b, &e) != nil:
			f.errs.add(fmt.Errorf("unexpected message %.80s", b))
		case e.Event == f.event():
			f.fromPeer(p, e.Data)
		case e.Event == "pusher:pong":
			p.flush()
		case e.Event == "pusher:ping":
			p.c.Write(ctx, rally.Text, []byte(`{"event":"pusher:pong","data":{}}`))
		case e.Event == "pusher:error":
			var d struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			pusherwire.DataObject(e.Data, &d)
			err := fmt.Errorf("client event refused: pusher:error %d: %s", d.Code, d.Message)
			if d.Code == 4301 {
				err = fmt.Errorf("%w (is the app's client-event-rate lower than --app says?)", err)
			}
			f.refused(p, err)
		default:
			f.errs.add(fmt.Errorf("unexpected message %.80s", b))
		}
	}
}

// flush tells sendFrom that the server has answered the request after
// p's last event. Only p's reader calls it.
func (p *publisher) flush() {
	select {
	case <-p.flushed:
	default:
		close(p.flushed)
	}
}

// fromPeer counts an event p got: another publisher's, or its own, which
// the protocols never send back.
func (f *fanout) fromPeer(p *publisher, data json.RawMessage) {
	if eventTag(data) == p.tag {
		f.echoed.Add(1)
		f.errs.add(errors.New("a publisher got its own event back"))
		return
	}
	f.toPublishers.Add(1)
}

// refused counts an event of p that the server refused: not sent after all.
func (f *fanout) refused(p *publisher, err error) {
	f.triggered.Add(-1)
	f.expected.Add(-f.perChannel[p.ch])
	f.forPeers.Add(-(f.pubsOn[p.ch] - 1))
	f.sendErrs.add(err)
}

// eventTag reads the publisher's tag out of the data of an event, a JSON
// string made by fanoutPayload.
func eventTag(data json.RawMessage) string {
	var s string
	json.Unmarshal(data, &s)
	_, rest, _ := strings.Cut(s, "-")
	tag, _, _ := strings.Cut(rest, "-")
	return tag
}
