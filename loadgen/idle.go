package loadgen

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally/internal/cli"
)

// IdleOptions are the settings of the idle scenario beyond Conns and
// Duration: where connections come from, pings, a broadcast to all of
// them, and which server processes to weigh.
type IdleOptions struct {
	// SourceAddrs are the local addresses connections are opened from, in
	// turn. Each address has its own ephemeral ports (about 28,000 with
	// Linux's default range), so many connections to one server need
	// several. Empty: 127.0.0.1 to 127.0.0.250 for a loopback server and
	// more than 1,000 connections, the system's choice otherwise.
	SourceAddrs []net.IP
	// PingInterval, when positive, makes every connection send a ping this
	// often (spread over the interval); the pongs are counted.
	PingInterval time.Duration
	// Subscribe, when set, is a topic every connection subscribes to with
	// rally serve's /ws protocol ({"type":"subscribe",...} with an id) as
	// soon as it opens; a connection counts as held once the server
	// acknowledged it. URL must then be a /ws endpoint.
	Subscribe string
	// Broadcast, when set, is the http:// URL of a publish endpoint
	// (rally serve's POST /publish/{topic}, for the topic of Subscribe).
	// Once every connection is held, one message of BroadcastSize bytes
	// (a JSON string) is posted there, and the run measures how long it
	// takes to reach every connection.
	Broadcast string
	// BroadcastSize is the size of the broadcast message in bytes; default
	// 1024.
	BroadcastSize int
	// ServerPIDs are server processes whose resident memory is summed
	// (with ServerPID, if set): several processes sharing a port.
	ServerPIDs []int
	// After, when positive, is how long to wait once the connections are
	// closed before the servers' memory is read a last time (does the
	// memory go back?).
	After time.Duration
}

// BroadcastStats is what the idle scenario's broadcast measured.
type BroadcastStats struct {
	// Bytes is the size of the published message; Subscribers the
	// connections held when it was published.
	Bytes       int `json:"bytes"`
	Subscribers int `json:"subscribers"`
	// Delivered counts the connections that received it (each once).
	Delivered int `json:"delivered"`
	// FirstSeconds and LastSeconds are the times from the start of the
	// POST to the first and to the last delivery.
	FirstSeconds float64 `json:"first_s"`
	LastSeconds  float64 `json:"last_s"`
	// Latency is the distribution of the delivery times (from the POST).
	Latency Latency `json:"latency"`
	// Status is the HTTP status of the POST.
	Status int `json:"status"`
}

// idleRun is the state of one idle run beyond run's.
type idleRun struct {
	*run
	subscribe []byte // the subscribe frame, masked
	ack       []byte // the acknowledgement expected
	delivery  []byte // the broadcast's delivery expected

	lost, pongs, pings atomic.Int64
	subscribed         atomic.Int64

	publishedAt atomic.Int64 // wall clock of the broadcast's POST, ns; 0 before
	delivered   atomic.Int64
	answered    atomic.Int64 // connections that got a message, right or wrong
	dmu         sync.Mutex
	dhist       histogram
	firstNs     int64 // wall clock of the first and last delivery
	lastNs      int64

	cmu   sync.Mutex
	conns []net.Conn // held by a goroutine each, for pings

	holder *pollHolder // the connections held without a goroutine; nil: none
}

// broadcastBody is the message published: a JSON string of size bytes.
func broadcastBody(size int) []byte {
	size = max(size, 2)
	b := bytes.Repeat([]byte("x"), size)
	b[0], b[size-1] = '"', '"'
	return b
}

// serverPIDs is every server process the run weighs.
func (cfg *Config) serverPIDs() []int {
	pids := append([]int(nil), cfg.ServerPIDs...)
	if cfg.ServerPID > 0 {
		pids = append(pids, cfg.ServerPID)
	}
	return pids
}

// serversRSS is the summed resident memory of pids (0 without any).
func serversRSS(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		rss, _, err := ProcessMemory(pid)
		if err == nil {
			sum += rss
		}
	}
	return sum
}

// idle runs the idle scenario: open Conns connections (subscribing each,
// if asked), hold them for the duration while answering pings and sending
// some, broadcast once if asked, and see how many stayed open.
func (r *run) idle(ctx context.Context, res *Result) error {
	ir := &idleRun{run: r}
	return ir.hold(ctx, res, r.cfg.worker)
}

// workerHooks connect an idle run to the process that started it (see
// procs.go): it reports when the connections are held and ends the hold
// when told; the broadcast is posted by that process.
type workerHooks struct {
	held      func(st *IdleStats)
	published <-chan int64 // the wall clock of the POST
	release   <-chan struct{}
	progress  func(delivered int64)
}

func (ir *idleRun) hold(ctx context.Context, res *Result, w *workerHooks) error {
	cfg := &ir.cfg
	pids := cfg.serverPIDs()
	st := &IdleStats{}
	st.RSSBeforeBytes = serversRSS(pids)
	if cfg.Subscribe != "" {
		ir.subscribe = clientFrame(opText, fmt.Appendf(nil, `{"type":"subscribe","topic":%q,"id":1}`, cfg.Subscribe), [4]byte{1, 2, 3, 4})
		ir.ack = []byte(`{"type":"ack","id":1}`)
		ir.delivery = fmt.Appendf(nil, `{"type":"message","topic":%q,"data":%s}`, cfg.Subscribe, broadcastBody(cfg.BroadcastSize))
	}
	ir.base = time.Now()
	ir.endNs.Store(1 << 62)
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	hw := &worker{}
	var hmu sync.Mutex
	// On Linux an epoll loop holds the connections, not a goroutine each
	// (see pollHolder): the client must cost less than the server.
	ir.holder = newPollHolder(ir)
	t0 := time.Now()
	st.OpenStartNs = t0.UnixNano()
	opened, err := ir.openAll(ctx, cfg.Conns, cfg.Conns > 1000, func(_ int, nc net.Conn, rest []byte, took time.Duration) {
		hmu.Lock()
		hw.hist.add(int64(took))
		hmu.Unlock()
		hw.live.Add(1)
		if ir.holder != nil && ir.holder.take(nc, rest) {
			return
		}
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			ir.holdConn(nc, rest, ready.Done)
		}()
	})
	closeAll := func() {
		if ir.holder != nil {
			ir.holder.close()
		}
		ir.closeAll()
		wg.Wait()
	}
	defer closeAll()
	if opened == 0 {
		return fmt.Errorf("loadgen: no connection opened: %w", err)
	}
	st.OpenSeconds = time.Since(t0).Seconds()
	ready.Wait()
	if ir.holder != nil {
		ir.holder.forget(ir.run)
	}
	st.OpenEndNs = time.Now().UnixNano()
	st.Opened = opened
	st.Subscribed = int(ir.subscribed.Load())
	st.RSSHeldBytes = serversRSS(pids)
	st.RSSPeakBytes = st.RSSHeldBytes
	if w != nil {
		st.Held = opened - int(ir.lost.Load())
		w.held(st)
	}

	hctx, stopHold := context.WithCancel(ctx)
	defer stopHold()
	var side sync.WaitGroup
	side.Go(func() { st.RSSPeakBytes = max(st.RSSPeakBytes, ir.samplePeak(hctx, pids)) })
	if cfg.PingInterval > 0 {
		side.Go(func() { ir.pinger(hctx) })
	}
	switch {
	case w != nil:
		side.Go(func() { ir.followBroadcast(hctx, w) })
		go func() {
			select {
			case <-w.release:
				stopHold()
			case <-hctx.Done():
			}
		}()
	case cfg.Broadcast != "":
		// The broadcast comes first; the hold's duration starts once it
		// reached every connection.
		if b, err := ir.broadcast(hctx, st.Subscribed); err != nil {
			ir.errs.add(err)
		} else {
			st.Broadcast = b
		}
	}
	ir.startNs.Store(ir.now())
	ir.endNs.Store(ir.now() + int64(cfg.Duration))
	m := ir.supervise(hctx, res, func() int64 { return int64(opened) - ir.lost.Load() }, "holding")
	stopHold()
	side.Wait()
	res.Timeline = nil
	st.Held = opened - int(ir.lost.Load())
	st.Pongs, st.Pings = ir.pongs.Load(), ir.pings.Load()
	if w != nil && ir.publishedAt.Load() != 0 {
		st.Broadcast = ir.broadcastStats(st.Subscribed, 0)
	}
	res.Messages = int64(st.Held)
	res.WindowSeconds = time.Duration(ir.endNs.Load() - ir.startNs.Load()).Seconds()
	if st.OpenSeconds > 0 {
		res.Rate = float64(opened) / st.OpenSeconds
	}
	res.Latency = hw.hist.summary()
	m.fill(res)
	if len(pids) > 0 {
		st.RSSAfterBytes = serversRSS(pids)
		st.RSSPeakBytes = max(st.RSSPeakBytes, st.RSSAfterBytes)
		if st.Held > 0 {
			st.RSSPerConnBytes = float64(st.RSSAfterBytes-st.RSSBeforeBytes) / float64(st.Held)
		}
	}
	res.Idle = st
	if cfg.After > 0 && len(pids) > 0 {
		closeAll()
		select {
		case <-time.After(cfg.After):
			st.RSSClosedBytes = serversRSS(pids)
			st.ClosedAfterSeconds = cfg.After.Seconds()
		case <-ctx.Done():
		}
	}
	return nil
}

// holdConn reads nc until the run ends: the subscription's
// acknowledgement first, if any (then ready is called; at once
// otherwise), then pings (answered), pongs (counted) and the broadcast.
func (ir *idleRun) holdConn(nc net.Conn, rest []byte, ready func()) {
	rd := newReader(nc, smallBuffer, rest)
	rd.pongs, rd.pings = &ir.pongs, &ir.pings
	if !ir.subscribeOn(nc, rd) {
		ready()
		return
	}
	ir.cmu.Lock()
	ir.conns = append(ir.conns, nc)
	ir.cmu.Unlock()
	ready()
	got := false
	for {
		m, err := rd.next(ir.delivery, true)
		if err != nil {
			ir.connLost(err)
			return
		}
		ir.receivedMessage(m, &got)
	}
}

// subscribeOn subscribes nc, if the run subscribes, and reads the
// acknowledgement through rd; false when the connection was lost.
func (ir *idleRun) subscribeOn(nc net.Conn, rd *reader) bool {
	if ir.subscribe == nil {
		return true
	}
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	_, err := nc.Write(ir.subscribe)
	var m message
	if err == nil {
		m, err = rd.next(ir.ack, true)
	}
	nc.SetDeadline(time.Time{})
	switch {
	case err != nil:
		ir.connLost(err)
		return false
	case !m.same:
		ir.errs.add(fmt.Errorf("subscribe: the first answer is not %s", ir.ack))
	default:
		ir.subscribed.Add(1)
	}
	return true
}

// connLost counts a connection lost unless the run is ending.
func (ir *idleRun) connLost(err error) {
	if !ir.ending.Load() {
		ir.lost.Add(1)
		ir.errs.add(fmt.Errorf("idle connection lost: %w", err))
	}
}

// received handles a data message with payload p on a connection;
// got says whether that connection had one before.
func (ir *idleRun) received(p []byte, got *bool) {
	ir.receivedMessage(message{size: int64(len(p)), same: ir.delivery != nil && bytes.Equal(p, ir.delivery)}, got)
}

// receivedMessage counts message m of a connection: the broadcast's
// delivery (once), or an error.
func (ir *idleRun) receivedMessage(m message, got *bool) {
	at := time.Now().UnixNano()
	if !*got {
		ir.answered.Add(1)
	}
	switch {
	case ir.delivery == nil:
		ir.errs.add(errors.New("idle connection got a data message"))
	case !m.same && !*got:
		*got = true
		ir.errs.add(fmt.Errorf("a message that is not the broadcast (%d bytes)", m.size))
	case !m.same:
		ir.errs.add(fmt.Errorf("a message that is not the broadcast (%d bytes)", m.size))
	case *got:
		ir.errs.add(errors.New("the broadcast arrived twice on one connection"))
	default:
		*got = true
		ir.delivered.Add(1)
		ir.dmu.Lock()
		if ir.firstNs == 0 || at < ir.firstNs {
			ir.firstNs = at
		}
		ir.lastNs = max(ir.lastNs, at)
		if p := ir.publishedAt.Load(); p != 0 {
			ir.dhist.add(at - p)
		}
		ir.dmu.Unlock()
	}
}

// pinger sends a ping on every held connection once per PingInterval,
// spread over the interval in ten slices.
func (ir *idleRun) pinger(ctx context.Context) {
	ping := clientFrame(opPing, []byte("idle"), [4]byte{5, 6, 7, 8})
	const slices = 10
	tick := time.NewTicker(max(ir.cfg.PingInterval/slices, time.Millisecond))
	defer tick.Stop()
	for slice := 0; ; slice = (slice + 1) % slices {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ir.cmu.Lock()
		conns := ir.conns
		ir.cmu.Unlock()
		for i := slice; i < len(conns); i += slices {
			conns[i].SetWriteDeadline(time.Now().Add(time.Second))
			conns[i].Write(ping)
			conns[i].SetWriteDeadline(time.Time{})
		}
		if ir.holder != nil {
			ir.holder.ping(ping, slice, slices)
		}
	}
}

// samplePeak reads the servers' memory every second until ctx ends and
// returns the largest sum seen.
func (ir *idleRun) samplePeak(ctx context.Context, pids []int) int64 {
	var peak int64
	if len(pids) == 0 {
		return 0
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return peak
		case <-tick.C:
			peak = max(peak, serversRSS(pids))
		}
	}
}

// broadcastTimeout bounds the wait for a broadcast's deliveries (a
// million connections on a busy machine may take a minute; the wait ends
// as soon as every connection has its copy).
const broadcastTimeout = 3 * time.Minute

// broadcast posts the message once and waits (up to broadcastTimeout)
// until every one of subscribers connections received it.
func (ir *idleRun) broadcast(ctx context.Context, subscribers int) (*BroadcastStats, error) {
	body := broadcastBody(ir.cfg.BroadcastSize)
	req, err := http.NewRequestWithContext(ctx, "POST", ir.cfg.Broadcast, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("broadcast: %v", redactURLError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	ir.publishedAt.Store(t0.UnixNano())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("broadcast: %v", redactURLError(err))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("broadcast: the publish endpoint answered %s", resp.Status)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(broadcastTimeout)
	for ir.answered.Load() < int64(subscribers) {
		select {
		case <-timeout:
			return ir.broadcastStats(subscribers, resp.StatusCode), nil
		case <-ctx.Done():
			return ir.broadcastStats(subscribers, resp.StatusCode), nil
		case <-tick.C:
		}
	}
	return ir.broadcastStats(subscribers, resp.StatusCode), nil
}

func (ir *idleRun) broadcastStats(subscribers, status int) *BroadcastStats {
	ir.dmu.Lock()
	defer ir.dmu.Unlock()
	b := &BroadcastStats{Bytes: max(ir.cfg.BroadcastSize, 2), Subscribers: subscribers, Delivered: int(ir.delivered.Load()), Status: status}
	if p := ir.publishedAt.Load(); p != 0 && ir.lastNs != 0 {
		b.FirstSeconds = time.Duration(ir.firstNs - p).Seconds()
		b.LastSeconds = time.Duration(ir.lastNs - p).Seconds()
	}
	b.Latency = ir.dhist.summary()
	return b
}

// followBroadcast, in a worker, takes the time of the POST from the
// process that made it and reports the deliveries as they grow.
func (ir *idleRun) followBroadcast(ctx context.Context, w *workerHooks) {
	select {
	case <-ctx.Done():
		return
	case p := <-w.published:
		ir.dmu.Lock()
		ir.publishedAt.Store(p)
		ir.dmu.Unlock()
	}
	var last int64 = -1
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if n := ir.delivered.Load(); n != last {
			w.progress(n)
			last = n
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// parseSourceAddrs reads a list of addresses and ranges,
// "127.0.0.2-127.0.0.11,127.0.1.1".
func parseSourceAddrs(s string) ([]net.IP, error) {
	var out []net.IP
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a := net.ParseIP(strings.TrimSpace(lo)).To4()
		if a == nil {
			return nil, fmt.Errorf("%q is not an IPv4 address", lo)
		}
		b := a
		if isRange {
			if b = net.ParseIP(strings.TrimSpace(hi)).To4(); b == nil {
				return nil, fmt.Errorf("%q is not an IPv4 address", hi)
			}
		}
		from, to := ipv4Number(a), ipv4Number(b)
		if to < from {
			return nil, fmt.Errorf("range %s ends before it starts", part)
		}
		if to-from >= 1<<16 || len(out)+int(to-from) >= 1<<16 {
			return nil, fmt.Errorf("more than 65536 source addresses")
		}
		for n := from; n <= to; n++ {
			out = append(out, net.IPv4(byte(n>>24), byte(n>>16), byte(n>>8), byte(n)).To4())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no address")
	}
	return out, nil
}

func ipv4Number(ip net.IP) uint32 {
	return uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
}

// validateIdle checks the idle options (after Defaults).
func (cfg *Config) validateIdle() error {
	o := &cfg.IdleOptions
	if cfg.Scenario != Idle {
		if o.Subscribe != "" || o.Broadcast != "" || len(o.SourceAddrs) > 0 || o.PingInterval != 0 || len(o.ServerPIDs) > 0 || o.After != 0 {
			return fmt.Errorf("loadgen: subscribe, broadcast, source addresses, pings, server pids and after are options of idle, not %s", cfg.Scenario)
		}
		return nil
	}
	if o.Broadcast != "" {
		if o.Subscribe == "" {
			return errors.New("loadgen: a broadcast needs a topic to subscribe the connections to")
		}
		if !strings.HasPrefix(o.Broadcast, "http://") && !strings.HasPrefix(o.Broadcast, "https://") {
			return errors.New("loadgen: the broadcast URL must be http:// or https:// (a POST /publish/{topic} endpoint)")
		}
	}
	if o.BroadcastSize < 0 || o.BroadcastSize > 1<<20 {
		return fmt.Errorf("loadgen: broadcast size %d is out of range", o.BroadcastSize)
	}
	if o.PingInterval < 0 || o.After < 0 {
		return errors.New("loadgen: the ping interval and the wait after closing must not be negative")
	}
	if n := len(o.SourceAddrs); n > 0 {
		if ports := ephemeralPorts(); ports > 0 && cfg.Conns > n*ports {
			return fmt.Errorf("loadgen: %d connections from %d source address(es) need more than the %d ephemeral ports each has (net.ipv4.ip_local_port_range); give more source addresses", cfg.Conns, n, ports)
		}
	}
	return nil
}

// ephemeralPorts is the size of the system's ephemeral port range, or 0
// where it cannot be read.
func ephemeralPorts() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || hi < lo {
		return 0
	}
	return hi - lo + 1
}

// writeSummary writes the idle lines of a summary.
func (st *IdleStats) writeSummary(w io.Writer) {
	if st.Subscribed > 0 {
		fmt.Fprintf(w, "  subscribed %d\n", st.Subscribed)
	}
	if st.Procs > 1 {
		fmt.Fprintf(w, "  procs     %d client processes\n", st.Procs)
	}
	if st.RSSPerConnBytes > 0 {
		fmt.Fprintf(w, "  memory    %s per connection (server RSS %s before, %s held, %s peak, %s at the end)\n",
			Bytes(int64(st.RSSPerConnBytes)), Bytes(st.RSSBeforeBytes), Bytes(st.RSSHeldBytes), Bytes(st.RSSPeakBytes), Bytes(st.RSSAfterBytes))
	}
	if st.ClosedAfterSeconds > 0 {
		fmt.Fprintf(w, "  closed    server RSS %s, %.0fs after the connections closed\n", Bytes(st.RSSClosedBytes), st.ClosedAfterSeconds)
	}
	if st.Pings > 0 || st.Pongs > 0 {
		fmt.Fprintf(w, "  pings     %d from the server answered; %d pongs to ours\n", st.Pings, st.Pongs)
	}
	if b := st.Broadcast; b != nil {
		fmt.Fprintf(w, "  broadcast %s to %d of %d connections: first after %s, last after %s (p50 %s, p99 %s)\n",
			Bytes(int64(b.Bytes)), b.Delivered, b.Subscribers, Micros(b.FirstSeconds*1e6), Micros(b.LastSeconds*1e6), Micros(b.Latency.P50), Micros(b.Latency.P99))
	}
}

// idleFlags defines the idle scenario's flags on fs; the function it
// returns checks them and fills cfg, after parsing, with a usage error's
// text when they are wrong.
func idleFlags(fs *flag.FlagSet, cfg *Config, procs *int) func() error {
	o := &cfg.IdleOptions
	sources := fs.String("source-addrs", "", "idle: local addresses to connect from, in turn: a list and ranges such as\n127.0.0.2-127.0.0.11 (each has its own ephemeral ports)")
	pids := fs.String("server-pids", "", "idle: several server processes (such as rally serve --reuse-port), comma-separated:\nreport their summed memory")
	fs.DurationVar(&o.PingInterval, "ping-interval", 0, "idle: every connection sends a ping this often (spread over the interval)")
	fs.StringVar(&o.Subscribe, "subscribe", "", "idle: subscribe every connection to this topic (rally serve's /ws protocol)")
	fs.StringVar(&o.Broadcast, "broadcast", "", "idle: once all are held, POST one message to this URL (rally serve's\nhttp://HOST/publish/TOPIC) and time its delivery to every connection")
	cli.BytesVar(fs, &o.BroadcastSize, "broadcast-size", 1024, "idle: bytes of the broadcast message")
	fs.DurationVar(&o.After, "after", 0, "idle: once the connections closed, wait this long and read the servers'\nmemory again")
	fs.IntVar(procs, "procs", 1, "idle: spread the connections over this many processes (a process may hold\nonly so many open files)")
	return func() error {
		if *sources != "" {
			ips, err := parseSourceAddrs(*sources)
			if err != nil {
				return fmt.Errorf("--source-addrs: %v", err)
			}
			o.SourceAddrs = ips
		}
		if *pids != "" {
			for _, f := range strings.Split(*pids, ",") {
				pid, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || pid <= 0 {
					return fmt.Errorf("--server-pids: %q is not a process id", f)
				}
				o.ServerPIDs = append(o.ServerPIDs, pid)
			}
		}
		if *procs < 1 || *procs > 1000 {
			return fmt.Errorf("--procs is %d; it must be 1 to 1000", *procs)
		}
		if *procs > 1 && cfg.Scenario != Idle {
			return fmt.Errorf("--procs is an option of idle, not %s", cfg.Scenario)
		}
		if limit := openFileLimit(); limit > 0 && cfg.Scenario == Idle && cfg.Conns > 0 {
			per := (cfg.Conns + *procs - 1) / *procs
			if per+64 > limit {
				return fmt.Errorf("%d connections in one process need more than the %d open files a process may hold here; spread them with --procs %d or more", per, limit, (cfg.Conns+limit-65)/(limit-64))
			}
		}
		return nil
	}
}
