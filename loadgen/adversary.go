package loadgen

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The adversary: --conns clients, each of which picks one behaviour from a
// random stream seeded by --seed (the same seed picks the same clients,
// behaviours, sizes and start times), against the /ws and /echo endpoints
// of `rally serve` (over HTTP/1.1, and HTTP/2 for h2-non-reader and
// h2-partial: serve with --h2c for ws://; reconnect-old, and the fast
// subscriber once the server closed it with 4010, recover history when
// the flooded topic, "adversary", has some: --history adversary), while a
// publisher floods a topic and a fast subscriber reads it. The run checks
// what no client may take from the others: the server's memory, a fresh
// client's echo, the fast subscriber's rate, and, once every client has
// left, that the server holds no connection and no budget charge.

// behaviours are what an adversary client can do, by name, with their
// weight in the draw.
var behaviours = []struct {
	name   string
	weight int
}{
	{"slowloris", 2},  // a request head one byte per second
	{"head-hold", 1},  // 256 KiB of request head, never finished
	{"partial", 1},    // 1 MiB of a message to /echo, all but its last byte
	{"non-reader", 3}, // a subscriber of the flooded topic that never reads
	{"bomb", 1},       // a compressed message to /echo inflating to 64 MiB
	{"ping-flood", 1}, // pings to /echo as fast as the socket takes them
	{"reconnect", 1},  // subscribes and drops, again and again
	// reconnects again and again asking the flooded topic's history for
	// what it missed since an old position, and drops after the ack
	{"reconnect-old", 1},
	// HTTP/2 (h2c, or h2 for wss://): one connection with 4 to 16
	// WebSocket streams subscribed to the flooded topic, window 0
	{"h2-non-reader", 2},
	// HTTP/2 (h2c, or h2 for wss://): one connection with 4 to 16
	// WebSocket streams to /echo, each sending 1 MiB of a message but
	// its last byte within the windows the server grants
	{"h2-partial", 1},
	{"garbage", 1},    // random bytes, before or after a handshake
	{"many-subs", 1},  // 100 subscriptions with 128-byte topic names, reading
	{"publisher", 1},  // publishes to its own topic at 100 messages/s, reading
	{"subscriber", 2}, // subscribes to the flooded topic and reads everything
}

// adversaryClient is one client of the draw.
type adversaryClient struct {
	behaviour string
	start     time.Duration // after the attackers' phase began
	n         int           // a size or count drawn for the behaviour
}

// drawAdversary returns the clients seed picks, in order.
func drawAdversary(seed uint64, conns int, spread time.Duration) []adversaryClient {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, b := range behaviours {
		total += b.weight
	}
	out := make([]adversaryClient, conns)
	for i := range out {
		w := rng.IntN(total)
		for _, b := range behaviours {
			if w < b.weight {
				out[i].behaviour = b.name
				break
			}
			w -= b.weight
		}
		if spread > 0 {
			out[i].start = time.Duration(rng.Int64N(int64(spread)))
		}
		out[i].n = rng.IntN(1 << 16)
	}
	return out
}

// wellBehaved reports whether a behaviour is one of a client the server
// must serve, not an attacker's: the adversary starts these first, and
// measures the fast subscriber beside them before any attacker comes.
func wellBehaved(behaviour string) bool {
	return behaviour == "publisher" || behaviour == "subscriber"
}

// adversary runs the draw: the fast subscriber alone for a sixth of the
// window, then beside the draw's well-behaved clients for the next sixth,
// then the attackers each at its drawn start (within the next sixth), the
// fast subscriber measured over the last third.
func (h *hostileRun) adversary(ctx context.Context) {
	wsURL := h.cfg.URL
	echo, err := newTarget(h.cfg.ProbeURL, true, false)
	if err != nil {
		h.answer("bad probe URL")
		return
	}
	bombTarget, _ := newTarget(h.cfg.ProbeURL, true, true)
	clients := drawAdversary(h.cfg.Seed, h.cfg.Conns, h.cfg.Duration/6)
	for _, c := range clients {
		h.res.Behaviours[c.behaviour]++
	}
	a := &adversaryRun{h: h, wsPath: pathOf(wsURL), echoPath: pathOf(h.cfg.ProbeURL)}
	a.local = adversaryTargets{ws: h.t, echo: echo, bomb: bombTarget}
	for i := range h.cfg.AttackerAddresses {
		addr := attackerAddress(i)
		a.remote = append(a.remote, adversaryTargets{ws: h.t.forwarded(addr), echo: echo.forwarded(addr), bomb: bombTarget.forwarded(addr), from: addr})
	}
	a.bombFrame = bombPayload(64 << 20)

	f := h.fastSubscriber(ctx)
	if f == nil {
		return
	}
	defer f.close()
	h.yieldCPU()
	h.res.FastSoloRate = f.rate(ctx, h.cfg.Duration/6)
	var wg sync.WaitGroup
	for i, c := range clients {
		if wellBehaved(c.behaviour) {
			wg.Go(func() { a.run(ctx, c, i) })
		}
	}
	h.res.FastPeersRate = f.rate(ctx, h.cfg.Duration/6)
	began := time.Now()
	for i, c := range clients {
		if wellBehaved(c.behaviour) {
			continue
		}
		wg.Go(func() {
			if wait := c.start - time.Since(began); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			a.run(ctx, c, i)
		})
	}
	h.measureUnderAttack(ctx, f)
	wg.Wait()
}

// measureUnderAttack waits for the last third of the run and measures the
// fast subscriber's rate in it, and what was published.
func (h *hostileRun) measureUnderAttack(ctx context.Context, f *fastSub) {
	if wait := time.Until(deadlineOf(ctx).Add(-h.cfg.Duration / 3)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	h.res.FastAttackRate = f.rate(ctx, h.cfg.Duration/3)
	h.res.Published = f.published.Load()
}

func pathOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.EscapedPath() != "" {
		return u.EscapedPath()
	}
	return "/"
}

// adversaryRun holds what the clients of one run share.
type adversaryRun struct {
	h         *hostileRun
	local     adversaryTargets   // of the well-behaved clients, and of attackers with no address
	remote    []adversaryTargets // of the attackers, one per address (HostileConfig.AttackerAddresses)
	wsPath    string
	echoPath  string
	bombFrame []byte
}

// adversaryTargets are the endpoints as one client address reaches them.
type adversaryTargets struct {
	ws, echo, bomb *target
	from           string // the address named in X-Forwarded-For ("": none)
}

// attackerAddress returns the address of attacker i of the addresses:
// 198.18.0.1 and on, in RFC 2544's benchmarking range.
func attackerAddress(i int) string {
	return netip.AddrFrom4([4]byte{198, 18, byte((i + 1) >> 8), byte(i + 1)}).String()
}

// targets returns the endpoints as client c, the i-th of the draw,
// reaches them: from its address if it is an attacker and the run names
// addresses.
func (a *adversaryRun) targets(c adversaryClient, i int) adversaryTargets {
	if wellBehaved(c.behaviour) || len(a.remote) == 0 {
		return a.local
	}
	return a.remote[i%len(a.remote)]
}

// floodTopic is the topic the publisher floods, the fast subscriber and
// the subscribers read and the non-readers do not.
const floodTopic = "adversary"

func subscribeFrame(topic string) []byte {
	return clientFrame(opText, []byte(`{"type":"subscribe","topic":"`+topic+`"}`), [4]byte{})
}

// subscribeFrameAt is subscribeFrame asking for what was published after
// the position offset, epoch (docs/PROTOCOL.md, "History and recovery").
func subscribeFrameAt(topic string, offset uint64, epoch string) []byte {
	req, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Topic  string `json:"topic"`
		Offset uint64 `json:"offset"`
		Epoch  string `json:"epoch"`
	}{"subscribe", topic, offset, epoch})
	return clientFrame(opText, req, [4]byte{})
}

// run is one client doing its behaviour until ctx ends or the server
// ends the connection; what the server answered is counted.
func (a *adversaryRun) run(ctx context.Context, c adversaryClient, i int) {
	h := a.h
	t := a.targets(c, i)
	switch c.behaviour {
	case "slowloris":
		conn := a.dialRaw(ctx)
		if conn == nil {
			return
		}
		go h.await(ctx, conn)
		dripHead(ctx, conn, a.requestLine(t))
	case "head-hold":
		conn := a.dialRaw(ctx)
		if conn == nil {
			return
		}
		go h.await(ctx, conn)
		holdHead(ctx, conn, a.requestLine(t), 256<<10)
	case "partial":
		conn := a.dial(ctx, t.echo)
		if conn == nil {
			return
		}
		go h.await(ctx, conn)
		sendPartial(ctx, conn, 1<<20, make([]byte, 64<<10))
	case "non-reader":
		conn := a.dial(ctx, t.ws)
		if conn == nil {
			return
		}
		if tc, ok := underlying(conn).(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10)
		}
		conn.Write(subscribeFrame(floodTopic))
	case "bomb":
		conn := a.dial(ctx, t.bomb)
		if conn == nil {
			return
		}
		if _, ok := underlying(conn).(*compressedConn); !ok {
			h.answer("bomb: no permessage-deflate")
			return
		}
		conn.Write(a.bombFrame)
		h.await(ctx, conn)
	case "ping-flood":
		conn := a.dial(ctx, t.echo)
		if conn == nil {
			return
		}
		go h.await(ctx, conn)
		var batch []byte
		for i := range 100 {
			batch = append(batch, clientFrame(opPing, []byte("flood-"+strconv.Itoa(i)), [4]byte{})...)
		}
		for ctx.Err() == nil {
			if _, err := conn.Write(batch); err != nil {
				return
			}
		}
	case "reconnect":
		for ctx.Err() == nil {
			conn, _, err := t.ws.dial(ctx, true)
			if err != nil {
				if ctx.Err() == nil {
					h.answer(handshakeAnswer(err))
				}
				if refused(err) {
					continue // an attacker does not wait to be let in
				}
				return
			}
			conn.Write(subscribeFrame(floodTopic))
			conn.Close()
			h.answer("reconnected")
		}
	case "reconnect-old":
		a.reconnectOld(ctx, t.ws, c.n%64)
	case "h2-non-reader":
		a.h.h2NonReader(ctx, a.wsPath, 4+c.n%13, floodTopic, t.from)
	case "h2-partial":
		a.h.h2Streams(ctx, a.echoPath, 4+c.n%13, t.from, nil, newH2Senders(a.h, 1<<20))
	case "garbage":
		junk := make([]byte, 512+c.n%4096)
		rand.Read(junk)
		var conn net.Conn
		if c.n%2 == 0 {
			if conn = a.dialRaw(ctx); conn == nil {
				return
			}
		} else if conn = a.dial(ctx, t.echo); conn == nil {
			return
		}
		conn.Write(junk)
		h.await(ctx, conn)
	case "many-subs":
		conn := a.dial(ctx, t.ws)
		if conn == nil {
			return
		}
		go io.Copy(io.Discard, conn)
		var batch []byte
		for k := range 100 {
			topic := fmt.Sprintf("adv-%d-%d-", c.n, k)
			topic += strings.Repeat("t", 128-len(topic))
			batch = append(batch, subscribeFrame(topic)...)
		}
		conn.Write(batch)
	case "publisher":
		conn := a.dial(ctx, t.ws)
		if conn == nil {
			return
		}
		go io.Copy(io.Discard, conn)
		msg := clientFrame(opText, []byte(`{"type":"publish","topic":"adv-own-`+strconv.Itoa(c.n)+`","data":"hello"}`), [4]byte{})
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := conn.Write(msg); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	case "subscriber":
		conn := a.dial(ctx, t.ws)
		if conn == nil {
			return
		}
		conn.Write(subscribeFrame(floodTopic))
		go io.Copy(io.Discard, conn)
	}
}

// dial opens a WebSocket connection to t and keeps it until the end of
// the attack, or counts the server's refusal.
func (a *adversaryRun) dial(ctx context.Context, t *target) net.Conn {
	conn, rest, err := t.dial(ctx, true)
	if err != nil {
		if ctx.Err() == nil {
			a.h.answer(handshakeAnswer(err))
		}
		return nil
	}
	p := &prefixed{Conn: conn, rest: rest}
	a.keep(ctx, p)
	return p
}

// dialRaw opens a TCP connection to the server and keeps it until the end
// of the attack.
func (a *adversaryRun) dialRaw(ctx context.Context) net.Conn {
	conn, err := a.h.dialRaw(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.h.answer("dial error")
		}
		return nil
	}
	a.keep(ctx, conn)
	return conn
}

// keep keeps conn for the end of the attack, when a write still blocked
// (the server stopped reading, as it may from an attacker) returns.
func (a *adversaryRun) keep(ctx context.Context, conn net.Conn) {
	a.h.keep(conn)
	context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Now()) })
}

func (a *adversaryRun) requestLine(t adversaryTargets) string {
	line := "GET " + a.wsPath + " HTTP/1.1\r\nHost: " + t.ws.addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	if t.from != "" {
		line += "X-Forwarded-For: " + t.from + "\r\n"
	}
	return line
}

// refused reports whether err is the server's answer to a handshake
// (a status other than 101), not a failure to reach it.
func refused(err error) bool {
	var he *handshakeError
	return errors.As(err, &he)
}

// underlying returns the connection under a prefixed one.
func underlying(c net.Conn) net.Conn {
	if p, ok := c.(*prefixed); ok {
		return p.Conn
	}
	return c
}

// bombPayload returns one masked, compressed binary frame that inflates
// to n zero bytes (n a multiple of 1 MiB; RFC 7692 7.2.1: the trailing
// 00 00 ff ff removed): one compressed MiB, flushed to a byte boundary,
// repeated, so that it costs one MiB of compression to build.
func bombPayload(n int) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(make([]byte, 1<<20))
	w.Flush()
	body := bytes.Repeat(b.Bytes(), n>>20)
	return clientFrameRsv(opBinary, 0x40, bytes.TrimSuffix(body, []byte{0, 0, 0xff, 0xff}), [4]byte{})
}

// fastSub is the well-behaved pair whose rate is measured: a publisher
// flooding floodTopic and a subscriber reading it. The subscriber does
// what the protocol asks of a client (docs/PROTOCOL.md, "History and
// recovery"): on a topic with history it keeps the position of the last
// message it saw and, when its connection ends (the server closes a
// subscriber that fell behind with 4010), connects again and subscribes
// from that position, so that the missed messages are replayed and
// counted. What happened to it is counted as answers, "fast subscriber:
// " and: how each connection ended ("close 4010"), "reconnected" (or
// "reconnect failed (503)"), what each ack said ("first position",
// "recovered", "not recovered (REASON)"), and anything a well-behaved
// client should not see ("duplicate", "error CODE"). delivered and
// published may be read at any time; the rest belongs to the goroutine
// reading the subscriber.
type fastSub struct {
	h                    *hostileRun
	delivered, published atomic.Int64
	stop                 context.CancelFunc // ends the context of its connections
	wg                   sync.WaitGroup

	// The position of the last message seen (epoch "": none yet), and
	// whether the current connection subscribed from it.
	offset uint64
	epoch  string
	asked  bool
}

// close ends the pair's connections and waits for its goroutines.
func (f *fastSub) close() {
	f.stop()
	f.wg.Wait()
}

// rate returns the fast subscriber's deliveries per second over d.
func (f *fastSub) rate(ctx context.Context, d time.Duration) float64 {
	n0, t0 := f.delivered.Load(), time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return float64(f.delivered.Load()-n0) / time.Since(t0).Seconds()
}

// fastSubscriber connects the measured pair and starts the flood, in a
// process of its own if cfg.ProbeProcess and one can be started (see
// pairProcess), else here.
func (h *hostileRun) fastSubscriber(ctx context.Context) *fastSub {
	if h.cfg.ProbeProcess && h.relay == nil {
		f, err := h.pairProcess(ctx)
		switch {
		case err == nil:
			return f
		case errors.Is(err, errPairNotConnected):
			return nil // the server could not be reached: the answers say why
		}
		h.answer("pair process: " + err.Error())
	}
	h.pairHere = true
	return h.fastPair(ctx)
}

// fastPair connects the measured pair here and starts the flood.
func (h *hostileRun) fastPair(ctx context.Context) *fastSub {
	ctx, stop := context.WithCancel(ctx)
	f := &fastSub{h: h, stop: stop}
	if !f.subscribe(ctx) {
		return nil
	}
	pub, prest, err := h.t.dial(ctx, false)
	if err != nil {
		f.close()
		h.answer(handshakeAnswer(err))
		return nil
	}
	unhook := context.AfterFunc(ctx, func() { pub.Close() })
	f.wg.Go(func() { io.Copy(io.Discard, &prefixed{Conn: pub, rest: prest}) })
	f.wg.Go(func() {
		defer unhook()
		defer pub.Close()
		msg := clientFrame(opText, []byte(`{"type":"publish","topic":"`+floodTopic+`","data":"`+strings.Repeat("x", 1000)+`"}`), [4]byte{})
		for ctx.Err() == nil {
			if _, err := pub.Write(msg); err != nil {
				return
			}
			f.published.Add(1)
		}
	})
	return f
}

// subscribe connects the fast subscriber, which then reads floodTopic
// until ctx ends (f.stop ends it). It reports false, having called
// f.stop, if the server could not be reached.
func (f *fastSub) subscribe(ctx context.Context) bool {
	conn, rest, err := f.h.t.dial(ctx, false)
	if err != nil {
		f.stop()
		f.h.answer("fast subscriber: " + err.Error())
		return false
	}
	f.wg.Go(func() { f.read(ctx, conn, rest) })
	return true
}

// read reads the fast subscriber's connections, conn first, one after
// the other while ctx lasts. A connection that ends is followed by
// another, subscribed from the last position seen, unless there is none
// to recover from (the topic has no history): the subscriber then stops,
// as a client that cannot recover anything would.
func (f *fastSub) read(ctx context.Context, conn net.Conn, rest []byte) {
	for {
		err := f.session(ctx, conn, rest)
		if ctx.Err() != nil {
			return
		}
		// Counted as an answer: a rate that falls says why.
		f.h.answer("fast subscriber: " + endAnswer(err))
		if f.epoch == "" {
			return
		}
		if conn, rest = f.redial(ctx); conn == nil {
			return
		}
		f.h.answer("fast subscriber: reconnected")
	}
}

// session subscribes to floodTopic on conn, from the last position seen
// if there is one, and takes what the server sends until the connection
// ends, which it returns.
func (f *fastSub) session(ctx context.Context, conn net.Conn, rest []byte) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	f.asked = f.epoch != ""
	req := subscribeFrame(floodTopic)
	if f.asked {
		req = subscribeFrameAt(floodTopic, f.offset, f.epoch)
	}
	if _, err := conn.Write(req); err != nil {
		return err
	}
	r := newReader(conn, 64<<10, rest)
	r.keep = true
	for {
		m, err := r.next(nil, false)
		if err != nil {
			return err
		}
		f.take(m.payload)
	}
}

// redial connects the subscriber again: at once (the history a topic
// keeps may be a few milliseconds of the flood), then, while the server
// refuses, after 50 ms, 100 ms, and so on up to 2 s. It returns nil once
// ctx ended.
func (f *fastSub) redial(ctx context.Context) (net.Conn, []byte) {
	wait := 50 * time.Millisecond
	for {
		conn, rest, err := f.h.t.dial(ctx, false)
		if err == nil {
			return conn, rest
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		f.h.answer("fast subscriber: reconnect failed (" + handshakeAnswer(err) + ")")
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// take deals with one text message of the server's: a delivery is
// counted and its position kept, the ack of the subscribe and an error
// are counted as answers. A delivery's fields are found by scanning the
// frame, not decoding it: the scan stops at the position, before the
// data.
func (f *fastSub) take(p []byte) {
	typ, offset, epoch, positioned := scanDelivery(p)
	switch string(typ) {
	case `"message"`:
		if positioned && !f.advance(offset, epoch) {
			f.h.answer("fast subscriber: duplicate")
			return
		}
		f.delivered.Add(1)
	case `"ack"`:
		f.acked(p)
	case `"error"`:
		var e struct {
			Code string `json:"code"`
		}
		json.Unmarshal(p, &e)
		f.h.answer("fast subscriber: error " + e.Code)
	}
}

// scanDelivery returns the type of a /ws frame of the server's and, for
// a message of a topic with history, its position: offset, and epoch as
// a raw JSON string (quotes and escapes as sent). typ is raw JSON as
// well (`"message"`).
func scanDelivery(p []byte) (typ []byte, offset uint64, epoch []byte, positioned bool) {
	hasOffset := false
	eachMember(p, func(key, value []byte) bool {
		switch string(key) {
		case "type":
			typ = value
		case "offset":
			offset, hasOffset = jsonUint(value)
		case "epoch":
			if len(value) >= 2 && value[0] == '"' {
				epoch = value
			}
		}
		return typ == nil || !hasOffset || epoch == nil
	})
	return typ, offset, epoch, hasOffset && epoch != nil
}

// advance makes offset and epoch (a raw JSON string) the last position
// seen. It reports false, keeping the position, for a message of the
// same epoch at or before it: a duplicate, which a client drops.
func (f *fastSub) advance(offset uint64, epoch []byte) bool {
	e := epoch[1 : len(epoch)-1]
	if bytes.IndexByte(e, '\\') >= 0 {
		var s string
		if json.Unmarshal(epoch, &s) != nil {
			return true
		}
		e = []byte(s)
	}
	if string(e) != f.epoch {
		// Another epoch: the history began again; offsets of two
		// epochs are not comparable.
		f.epoch = string(e)
	} else if offset <= f.offset {
		return false
	}
	f.offset = offset
	return true
}

// acked takes the ack of the subscribe. On a topic with history the
// first one gives a position to a subscriber that has seen nothing yet;
// one that asked to recover from its position is told whether the
// missed messages follow (kept as they come), or why not (the ack's
// position is then its new one).
func (f *fastSub) acked(p []byte) {
	var ack subscribeAck
	if json.Unmarshal(p, &ack) != nil {
		return
	}
	switch {
	case f.asked && ack.Recovered:
		f.h.answer("fast subscriber: recovered")
	case f.asked && ack.Reason != "":
		f.h.answer("fast subscriber: not recovered (" + ack.Reason + ")")
		f.offset, f.epoch = ack.Offset, ack.Epoch
	case !f.asked && ack.Epoch != "":
		f.h.answer("fast subscriber: first position")
		if f.epoch == "" {
			f.offset, f.epoch = ack.Offset, ack.Epoch
		}
	}
}

// endAnswer says how a connection ended, in words that are the same from
// one connection to the next: "close 4010", "read: connection reset by
// peer", "unexpected EOF".
func endAnswer(err error) string {
	var ce *closedError
	var oe *net.OpError
	switch {
	case errors.As(err, &ce):
		return "close " + strconv.Itoa(ce.code)
	case errors.As(err, &oe):
		return oe.Err.Error()
	}
	return err.Error()
}

// serverHolds reads the server's metrics: its open WebSocket connections
// (rally_connections, every endpoint) and the bytes charged to its memory
// budget (rally_memory_budget_used_bytes, every category). ok is false if
// the metrics could not be read (an answer other than 200 included).
func serverHolds(client *http.Client, metricsURL string) (conns, charged int64, ok bool) {
	resp, err := client.Get(metricsURL)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Not a metrics page: a 101 in particular hands over a connection
		// whose reads the client's timeout no longer bounds.
		return 0, 0, false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if name != "rally_connections" && name != "rally_memory_budget_used_bytes" {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		if name == "rally_connections" {
			conns += int64(f)
		} else {
			charged += int64(f)
		}
		ok = true
	}
	return conns, charged, ok
}

// awaitServerEmpty polls the server's metrics until it holds no
// connection and no budget charge, or until settle has passed, and
// records what it held last and how long it took.
func (h *hostileRun) awaitServerEmpty(ctx context.Context, settle time.Duration) {
	if h.cfg.MetricsURL == "" {
		return
	}
	client := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	for {
		conns, charged, ok := serverHolds(client, h.cfg.MetricsURL)
		if ok {
			h.res.ConnsAfter, h.res.ChargedAfter = conns, charged
			h.res.EmptyAfter = time.Since(start).Round(time.Millisecond).String()
		}
		if ok && conns == 0 && charged == 0 || time.Since(start) >= settle {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reconnectOld reconnects to /ws again and again, each time subscribing
// to the flooded topic with a position lag messages before the one the
// previous ack gave (the first connection subscribes without one), and
// drops the connection as soon as the ack came, before the replay it
// asked for is read. Each ack is counted: "recovered", "not recovered
// (REASON)", or "no history" (the topic has none: the client then goes
// on reconnecting without a position).
func (a *adversaryRun) reconnectOld(ctx context.Context, ws *target, lag int) {
	h := a.h
	var offset uint64
	epoch := ""
	for ctx.Err() == nil {
		conn, rest, err := ws.dial(ctx, true)
		if err != nil {
			if ctx.Err() == nil {
				h.answer(handshakeAnswer(err))
			}
			if refused(err) {
				continue // an attacker does not wait to be let in
			}
			return
		}
		req := subscribeFrame(floodTopic)
		if epoch != "" {
			req = subscribeFrameAt(floodTopic, offset-min(offset, uint64(lag)), epoch)
		}
		conn.Write(req)
		ack, err := readAck(ctx, conn, rest)
		conn.Close()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				h.answer("reconnect-old: no ack")
			}
			return
		case ack.Epoch == "":
			h.answer("reconnect-old: no history")
		case epoch == "":
			h.answer("reconnect-old: first position")
		case ack.Recovered:
			h.answer("reconnect-old: recovered")
		default:
			h.answer("reconnect-old: not recovered (" + ack.Reason + ")")
		}
		offset, epoch = ack.Offset, ack.Epoch
	}
}

// subscribeAck is the part of /ws's ack to a subscribe that reconnectOld
// and the fast subscriber read (docs/PROTOCOL.md, "History and
// recovery").
type subscribeAck struct {
	Type      string `json:"type"`
	Offset    uint64 `json:"offset"`
	Epoch     string `json:"epoch"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason"`
}

// readAck reads the server's text frames on conn (rest: what came with
// the handshake) until the ack of a subscribe, for 10 s at most.
func readAck(ctx context.Context, conn net.Conn, rest []byte) (subscribeAck, error) {
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(rest), conn))
	var head [10]byte
	for {
		if _, err := io.ReadFull(br, head[:2]); err != nil {
			return subscribeAck{}, err
		}
		n := uint64(head[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(br, head[2:4]); err != nil {
				return subscribeAck{}, err
			}
			n = uint64(binary.BigEndian.Uint16(head[2:4]))
		case 127:
			if _, err := io.ReadFull(br, head[2:10]); err != nil {
				return subscribeAck{}, err
			}
			n = binary.BigEndian.Uint64(head[2:10])
		}
		if head[0]&0x0f != opText || n > 64<<10 {
			if _, err := io.CopyN(io.Discard, br, int64(min(n, 1<<40))); err != nil {
				return subscribeAck{}, err
			}
			continue
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return subscribeAck{}, err
		}
		var ack subscribeAck
		if json.Unmarshal(p, &ack) == nil && ack.Type == "ack" {
			return ack, nil
		}
	}
}
