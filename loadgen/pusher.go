package loadgen

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/cli"
	"github.com/rallyws/rally/internal/pusherwire"
)

const pusherUsage = `Usage: rally bench pusher URL --app ID:KEY:SECRET [flags]

Fan-out over the Pusher Channels protocol, as users of Pusher-compatible
servers measure it, against rally serve --pusher-app ID:KEY:SECRET at URL
(ws://HOST:PORT; http:// and https:// read as ws:// and wss://).

--conns subscribers connect to /app/KEY, wait for
pusher:connection_established and subscribe to one of --channels public
channels (bench-0, bench-1, ...). Then --events events (or as many as
--duration allows) are triggered through the signed HTTP API
(POST /apps/ID/events), --concurrency at a time, each to one channel in
turn. Every subscriber counts what it gets and the latency from the send
time carried in the event's data. With --compare the same fan-out runs
again over rally's own protocol on the same server: subscribers on /ws,
events published with POST /publish/TOPIC (rally serve on loopback needs
no token). With --server-pid it reports the server's CPU and its memory
per Pusher subscriber (not per /ws subscriber: that run comes second and
finds memory the first left). --ws-only runs the /ws fan-out alone, first,
so that its memory per subscriber is reported: run it against a fresh
server to compare the memory of the two protocols' subscribers, held by the
same client code.

With --client-events the subscribers join private channels instead
(private-bench-0, ...), each subscription signed with the app's secret as
the app's auth endpoint would sign it, and the events are client events
(client-bench) sent over WebSocket by --publishers more sockets, each
subscribed to one of the channels in turn, instead of HTTP triggers. The
server takes client-event-rate events a second from each socket, in
bursts as large (10 unless --app gives ID:KEY:SECRET:client-event-rate=N,
as rally serve --pusher-app takes it): a publisher sends half a burst at
once, then the rest at 9/10 of the rate. By default there are enough
publishers that none has to wait, but at most one for every ten
subscribers (as many on each channel, at least one). A publisher never
gets its own event back (one that does is an error), so an event is
expected once per subscriber of its channel; the publishers get one
another's, counted apart. An event the server refuses (pusher:error, 4301
past the rate) is an error, not counted as sent. The publishers connect
after the memory per subscriber is read. With --compare the /ws run sends
the same events from as many WebSocket clients, paced alike, as publishes
on /ws.

Exit status: 0 when every event reached every subscriber without errors,
1 otherwise, 2 for a usage error.

Flags:
`

// PusherConfig is a run of the pusher scenario.
type PusherConfig struct {
	URL                string // ws:// or wss:// base of the server
	AppID, Key, Secret string
	Conns, Channels    int
	Size               int           // payload bytes of each event
	Events             int           // events to trigger (0: for Duration)
	Duration           time.Duration // how long to trigger when Events is 0
	Concurrency        int           // HTTP triggers at a time
	Compare            bool          // also over rally's own /ws protocol
	WSOnly             bool          // over rally's own /ws protocol only
	ServerPID          int
	// ClientEvents sends the events over WebSocket from publisher
	// sockets, as client events on private channels (Pusher) or as
	// publishes (/ws), instead of over HTTP.
	ClientEvents bool
	// Publishers is how many sockets send with ClientEvents, spread
	// over the channels in turn; 0 picks enough that none waits for the
	// rate limit.
	Publishers int
	// ClientEventRate is the app's client events a second per socket
	// (its client-event-rate); 0 is the server's default, 10.
	ClientEventRate float64
}

// FanoutResult is what one protocol's run measured.
type FanoutResult struct {
	Protocol         string   `json:"protocol"` // "pusher" or "ws"
	Conns            int      `json:"conns"`
	Subscribed       int      `json:"subscribed"`
	SubscribeSeconds float64  `json:"subscribe_seconds"`
	SubscribeRate    float64  `json:"subscribes_per_second"` // handshake + subscribe
	Triggered        int64    `json:"triggered"`             // events the server took
	TriggerErrors    int64    `json:"trigger_errors"`        // events not sent, or refused
	Expected         int64    `json:"expected_deliveries"`
	Deliveries       int64    `json:"deliveries"`
	Seconds          float64  `json:"seconds"` // first trigger to last delivery
	DeliveryRate     float64  `json:"deliveries_per_second"`
	P50Micros        float64  `json:"p50_us"`
	P90Micros        float64  `json:"p90_us"`
	P99Micros        float64  `json:"p99_us"`
	MaxMicros        float64  `json:"max_us"`
	Errors           int64    `json:"errors"`
	ErrorSamples     []string `json:"error_samples,omitempty"`
	RSSPerConn       int64    `json:"server_rss_per_conn,omitempty"` // first run only
	ServerCPUSeconds float64  `json:"server_cpu_seconds,omitempty"`  // during the fan-out

	// ClientEvents says the events were sent over WebSocket by
	// Publishers sockets, not over HTTP. PublisherDeliveries is the
	// events publishers got from the other publishers of their channel,
	// of PublisherExpected (neither in Deliveries nor Expected); Echoed
	// is the events a publisher got back of its own (each also an error).
	ClientEvents        bool  `json:"client_events,omitempty"`
	Publishers          int   `json:"publishers,omitempty"`
	PublisherDeliveries int64 `json:"publisher_deliveries,omitempty"`
	PublisherExpected   int64 `json:"expected_publisher_deliveries,omitempty"`
	Echoed              int64 `json:"echoed,omitempty"`
}

// PusherResult is the pusher scenario's report.
type PusherResult struct {
	Channels int           `json:"channels"`
	Size     int           `json:"size"`
	Pusher   *FanoutResult `json:"pusher,omitempty"` // nil with WSOnly
	WS       *FanoutResult `json:"ws,omitempty"`
	// Ratio is Pusher's deliveries per second over /ws's (with Compare).
	Ratio float64 `json:"ratio_pusher_ws,omitempty"`
}

// ok reports whether every event reached every subscriber without errors.
func (r *FanoutResult) ok() bool {
	return r.Errors == 0 && r.TriggerErrors == 0 && r.Subscribed == r.Conns && r.Deliveries == r.Expected
}

// PusherMain runs `rally bench pusher URL [flags]` (args start with
// "pusher") and returns the exit status.
func PusherMain(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rally bench")
	var cfg PusherConfig
	app := fs.String("app", "", "the app as given to rally serve --pusher-app, `ID:KEY:SECRET` with its limits if any (required)")
	fs.IntVar(&cfg.Conns, "conns", 1000, "subscribers")
	fs.IntVar(&cfg.Channels, "channels", 1, "channels the subscribers are spread over (public; private with --client-events)")
	cli.BytesVar(fs, &cfg.Size, "size", 16, "payload bytes of each event")
	fs.IntVar(&cfg.Events, "events", 0, "events to trigger (default: as many as --duration allows, or 100 without it)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "trigger for this long instead of a number of events")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "HTTP triggers at a time (not with --client-events)")
	fs.BoolVar(&cfg.ClientEvents, "client-events", false, "send the events as client events on private channels from publisher sockets, not over HTTP")
	fs.IntVar(&cfg.Publishers, "publishers", 0, "publisher sockets with --client-events (default: enough that none waits for the rate limit)")
	fs.BoolVar(&cfg.Compare, "compare", false, "also run the same fan-out over rally's own /ws protocol")
	fs.BoolVar(&cfg.WSOnly, "ws-only", false, "run the fan-out over rally's own /ws protocol only (its memory per subscriber is then reported)")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "process id of the server on this machine: report its memory per subscriber and CPU")
	asJSON := fs.Bool("json", false, "print the result as JSON")

	positional, err := cli.Parse(fs, args)
	switch {
	case err != nil:
	case len(positional) != 2 || positional[0] != "pusher":
		err = cli.Usagef("want the scenario pusher and a URL")
	case *app == "":
		err = cli.Usagef("--app ID:KEY:SECRET is required")
	case cfg.Conns <= 0 || cfg.Channels <= 0 || cfg.Size < 0 || cfg.Events < 0 || cfg.Duration < 0 || cfg.Concurrency <= 0 || cfg.ServerPID < 0:
		err = cli.Usagef("--conns, --channels and --concurrency must be more than 0; --size, --events, --duration and --server-pid not negative")
	case cfg.Events > 0 && cfg.Duration > 0:
		err = cli.Usagef("give --events or --duration, not both")
	case cfg.WSOnly && cfg.Compare:
		err = cli.Usagef("give --compare or --ws-only, not both")
	case cfg.Publishers < 0:
		err = cli.Usagef("--publishers must not be negative")
	case cfg.Publishers > 0 && !cfg.ClientEvents:
		err = cli.Usagef("--publishers is for --client-events")
	case cfg.Publishers > 0 && cfg.Publishers < cfg.Channels:
		err = cli.Usagef("--publishers %d is fewer than --channels %d: each channel needs one", cfg.Publishers, cfg.Channels)
	default:
		if err = parseApp(*app, &cfg); err == nil {
			cfg.URL, err = wsURL(positional[1])
		}
	}
	help := func(w io.Writer) {
		fmt.Fprint(w, pusherUsage)
		cli.PrintFlags(w, fs)
	}
	if status := cli.Exit("rally bench", err, stdout, stderr, help); status >= 0 {
		return status
	}
	if cfg.Events == 0 && cfg.Duration == 0 {
		cfg.Events = 100
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := RunPusher(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rally bench: %v\n", err)
		return 1
	}
	printResult(stdout, *asJSON, res)
	if (res.Pusher != nil && !res.Pusher.ok()) || (res.WS != nil && !res.WS.ok()) {
		return 1
	}
	return 0
}

// parseApp reads --app into cfg: ID:KEY:SECRET, then the limits
// rally serve --pusher-app takes, each ":LIMIT=VALUE", so that the same
// value serves both. The limits are checked as rally serve checks them;
// the bench needs client-event-rate, to pace client events.
func parseApp(s string, cfg *PusherConfig) error {
	parts := strings.Split(s, ":")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return cli.Usagef("--app %q is not ID:KEY:SECRET", redactApp(s))
	}
	cfg.AppID, cfg.Key, cfg.Secret = parts[0], parts[1], parts[2]
	for _, kv := range parts[3:] {
		k, v, _ := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case k != "client-event-rate" && k != "max-connections" && k != "max-message-bytes" && k != "max-presence-members" && k != "cache-ttl":
			return cli.Usagef("--app: unknown limit %q (max-connections, client-event-rate, max-message-bytes, max-presence-members, cache-ttl)", k)
		case err != nil || !(f >= 0) || math.IsInf(f, 0):
			return cli.Usagef("--app: %s=%q is not a positive number", k, v)
		case k == "client-event-rate":
			cfg.ClientEventRate = f
		}
	}
	return nil
}

// redactApp hides the secret of an --app value in a message: the third
// field, whatever follows it.
func redactApp(s string) string {
	parts := strings.Split(s, ":")
	if len(parts) >= 3 {
		parts[2] = "..."
	}
	return strings.Join(parts, ":")
}

// RunPusher runs the fan-out over the Pusher protocol and, with Compare,
// over rally's /ws protocol.
func RunPusher(ctx context.Context, cfg PusherConfig) (*PusherResult, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.ClientEventRate == 0 {
		cfg.ClientEventRate = 10
	}
	sockets, what := cfg.Conns, "subscribers"
	if cfg.ClientEvents {
		sockets, what = cfg.Conns+publishers(cfg), "subscribers and publishers"
	}
	if limit := openFileLimit(); limit > 0 && sockets+64 > limit {
		return nil, fmt.Errorf("%d %s need more open files than this process may have (%d); raise ulimit -n or lower --conns", sockets, what, limit)
	}
	httpBase := "http://" + u.Host
	if u.Scheme == "wss" {
		httpBase = "https://" + u.Host
	}
	wsBase := u.Scheme + "://" + u.Host
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency}}
	defer client.CloseIdleConnections()

	res := &PusherResult{Channels: cfg.Channels, Size: cfg.Size}
	if cfg.WSOnly {
		ws := &fanout{cfg: cfg, protocol: "ws", client: client, dialURL: wsBase + "/ws", httpURL: httpBase + "/publish/"}
		if res.WS, err = ws.run(ctx); err != nil {
			return nil, fmt.Errorf("ws: %w", err)
		}
		return res, nil
	}
	pusher := &fanout{cfg: cfg, protocol: "pusher", client: client,
		dialURL: wsBase + "/app/" + url.PathEscape(cfg.Key) + "?protocol=7&client=rally-bench&version=1",
		httpURL: httpBase + "/apps/" + url.PathEscape(cfg.AppID) + "/events"}
	if res.Pusher, err = pusher.run(ctx); err != nil {
		return nil, fmt.Errorf("pusher: %w", err)
	}
	if cfg.Compare {
		ws := &fanout{cfg: cfg, protocol: "ws", client: client, dialURL: wsBase + "/ws", httpURL: httpBase + "/publish/", second: true}
		if res.WS, err = ws.run(ctx); err != nil {
			return nil, fmt.Errorf("ws: %w", err)
		}
		if res.WS.DeliveryRate > 0 {
			res.Ratio = res.Pusher.DeliveryRate / res.WS.DeliveryRate
		}
	}
	return res, nil
}

// fanout is one protocol's run: subscribers, triggers, counts.
type fanout struct {
	cfg      PusherConfig
	protocol string
	client   *http.Client
	dialURL  string
	httpURL  string // events endpoint (pusher) or /publish/ prefix (ws)
	// second: another run came first on the same server, so the memory
	// the runtime kept from it would hide this one's; none is reported.
	second bool

	perChannel   []int64 // subscribers of each channel
	pubsOn       []int64 // publishers of each channel
	triggered    atomic.Int64
	expected     atomic.Int64
	deliveries   atomic.Int64
	toPublishers atomic.Int64 // see FanoutResult.PublisherDeliveries
	forPeers     atomic.Int64 // see FanoutResult.PublisherExpected
	echoed       atomic.Int64
	lastNs       atomic.Int64
	errs         errorLog
	sendErrs     errorLog // events not sent or refused
	hists        [64]struct {
		sync.Mutex
		h histogram
	}
}

// channel is the name of channel i: private with client events, which
// Pusher takes on private and presence channels only.
func (f *fanout) channel(i int) string {
	if f.protocol == "pusher" && f.cfg.ClientEvents {
		return "private-bench-" + strconv.Itoa(i)
	}
	return "bench-" + strconv.Itoa(i)
}

// event is the name of the Pusher events of the run.
func (f *fanout) event() string {
	if f.cfg.ClientEvents {
		return "client-bench"
	}
	return "bench"
}

func (f *fanout) run(ctx context.Context) (*FanoutResult, error) {
	cfg := f.cfg
	r := &FanoutResult{Protocol: f.protocol, Conns: cfg.Conns, ClientEvents: cfg.ClientEvents}
	f.perChannel = make([]int64, cfg.Channels)
	f.pubsOn = make([]int64, cfg.Channels)
	rssBefore := int64(0)
	if cfg.ServerPID > 0 {
		rssBefore, _, _ = ProcessMemory(cfg.ServerPID)
	}

	start := time.Now()
	conns := f.connect(ctx, cfg.Conns)
	r.SubscribeSeconds = time.Since(start).Seconds()
	for _, c := range conns {
		if c != nil {
			r.Subscribed++
		}
	}
	if r.SubscribeSeconds > 0 {
		r.SubscribeRate = float64(r.Subscribed) / r.SubscribeSeconds
	}
	if cfg.ServerPID > 0 && r.Subscribed > 0 && !f.second {
		// Let the server settle, as the idle scenario holds before it
		// reads the memory: the subscribers are idle now.
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		if rss, _, err := ProcessMemory(cfg.ServerPID); err == nil {
			r.RSSPerConn = (rss - rssBefore) / int64(r.Subscribed)
		}
	}
	// The publishers connect after the memory is read: it is the
	// subscribers'.
	var pubs []*publisher
	if cfg.ClientEvents {
		pubs = f.publishers(f.connect(ctx, publishers(cfg)))
		r.Publishers = len(pubs)
	}
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
		for _, p := range pubs {
			if p.c != nil {
				p.c.CloseNow()
			}
		}
	}
	defer closeAll()

	// Read on every subscriber and publisher.
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	var readers sync.WaitGroup
	for i, c := range conns {
		if c == nil {
			continue
		}
		f.perChannel[i%cfg.Channels]++
		readers.Add(1)
		go func() {
			defer readers.Done()
			f.read(rctx, c, &f.hists[i%len(f.hists)])
		}()
	}
	for _, p := range pubs {
		if p.c == nil {
			continue
		}
		f.pubsOn[p.ch]++
		readers.Add(1)
		go func() {
			defer readers.Done()
			f.readPublisher(rctx, p)
		}()
	}

	// Send.
	var cpu0 time.Duration
	if cfg.ServerPID > 0 {
		cpu0, _ = ProcessCPU(cfg.ServerPID)
	}
	first := time.Now()
	deadline := first.Add(cfg.Duration)
	if cfg.ClientEvents {
		f.sendClientEvents(ctx, pubs, deadline)
	} else {
		f.triggerAll(ctx, deadline)
	}
	r.Triggered = f.triggered.Load()
	r.TriggerErrors = f.sendErrs.n.Load()
	r.Expected = f.expected.Load()

	r.PublisherExpected = f.forPeers.Load()

	// Wait for the deliveries, until none came for 5 s.
	got := func() int64 { return f.deliveries.Load() + f.toPublishers.Load() }
	seen, quiet := got(), time.Now()
	for got() < r.Expected+r.PublisherExpected && ctx.Err() == nil && time.Since(quiet) < 5*time.Second {
		time.Sleep(10 * time.Millisecond)
		if d := got(); d != seen {
			seen, quiet = d, time.Now()
		}
	}
	if cfg.ServerPID > 0 {
		if cpu1, err := ProcessCPU(cfg.ServerPID); err == nil {
			r.ServerCPUSeconds = (cpu1 - cpu0).Seconds()
		}
	}
	stopReading()
	closeAll()
	readers.Wait()

	r.Deliveries = f.deliveries.Load()
	r.PublisherDeliveries = f.toPublishers.Load()
	r.Echoed = f.echoed.Load()
	if last := f.lastNs.Load(); last > first.UnixNano() {
		r.Seconds = float64(last-first.UnixNano()) / 1e9
		r.DeliveryRate = float64(r.Deliveries) / r.Seconds
	}
	var h histogram
	for i := range f.hists {
		h.merge(&f.hists[i].h)
	}
	l := h.summary()
	r.P50Micros, r.P90Micros, r.P99Micros, r.MaxMicros = l.P50, l.P90, l.P99, l.Max
	r.Errors = f.errs.n.Load()
	r.ErrorSamples = append(f.errs.samples(), f.sendErrs.samples()...)
	return r, nil
}

// connect opens n sockets, 64 at a time, socket i subscribed to channel
// i % Channels. A socket that could not subscribe is nil, its error
// counted.
func (f *fanout) connect(ctx context.Context, n int) []*rally.Conn {
	conns := make([]*rally.Conn, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			c, err := f.subscribe(sctx, f.channel(i%f.cfg.Channels))
			if err != nil {
				f.errs.add(err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	return conns
}

// triggerAll triggers the run's events over HTTP, Concurrency at a time,
// each to one channel in turn, until there were Events or deadline.
func (f *fanout) triggerAll(ctx context.Context, deadline time.Time) {
	cfg := f.cfg
	var next atomic.Int64
	var tw sync.WaitGroup
	for range cfg.Concurrency {
		tw.Add(1)
		go func() {
			defer tw.Done()
			for ctx.Err() == nil {
				n := next.Add(1) - 1
				if cfg.Events > 0 && n >= int64(cfg.Events) || cfg.Events == 0 && time.Now().After(deadline) {
					return
				}
				ch := int(n % int64(cfg.Channels))
				if err := f.trigger(ctx, f.channel(ch)); err != nil {
					f.sendErrs.add(err)
					continue
				}
				f.triggered.Add(1)
				f.expected.Add(f.perChannel[ch])
			}
		}()
	}
	tw.Wait()
}

// pusherEvent is a message of the Pusher protocol.
type pusherEvent struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// wsMessage is a message of rally's /ws protocol.
type wsMessage struct {
	Type    string          `json:"type"`
	ID      json.RawMessage `json:"id"`
	Topic   string          `json:"topic"`
	Data    json.RawMessage `json:"data"`
	Code    string          `json:"code"`
	Message string          `json:"message"`
}

// subscribe opens one subscriber of ch and returns it once subscribed.
func (f *fanout) subscribe(ctx context.Context, ch string) (*rally.Conn, error) {
	c, _, err := rally.Dial(ctx, f.dialURL, nil)
	if err != nil {
		return nil, err
	}
	if err := f.handshake(ctx, c, ch); err != nil {
		c.CloseNow()
		return nil, err
	}
	return c, nil
}

func (f *fanout) handshake(ctx context.Context, c *rally.Conn, ch string) error {
	if f.protocol == "ws" {
		if err := c.Write(ctx, rally.Text, []byte(`{"type":"subscribe","topic":"`+ch+`","id":1}`)); err != nil {
			return err
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var m wsMessage
		if json.Unmarshal(b, &m) != nil || m.Type != "ack" {
			return fmt.Errorf("subscribe answered with %.80s", b)
		}
		return nil
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	var e pusherEvent
	var established struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal(b, &e) != nil || e.Event != "pusher:connection_established" || pusherwire.DataObject(e.Data, &established) != nil {
		return fmt.Errorf("connection answered with %.80s", b)
	}
	sub := map[string]string{"channel": ch}
	if strings.HasPrefix(ch, "private-") {
		sub["auth"] = f.channelAuth(established.SocketID, ch)
	}
	req, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": sub})
	if err := c.Write(ctx, rally.Text, req); err != nil {
		return err
	}
	_, b, err = c.Read(ctx)
	if err != nil {
		return err
	}
	if json.Unmarshal(b, &e) != nil || e.Event != "pusher_internal:subscription_succeeded" {
		return fmt.Errorf("subscribe answered with %.80s", b)
	}
	return nil
}

// channelAuth is the auth of a subscription to a private channel, as
// the app's auth endpoint signs it with the secret:
// KEY:hex(HMAC-SHA256(SECRET, SOCKET_ID:CHANNEL)).
func (f *fanout) channelAuth(socketID, ch string) string {
	return f.cfg.Key + ":" + pusherwire.Sign(f.cfg.Secret, socketID+":"+ch)
}

// read counts the events c gets and their latency until ctx ends.
func (f *fanout) read(ctx context.Context, c *rally.Conn, hs *struct {
	sync.Mutex
	h histogram
}) {
	for {
		_, b, err := c.Read(ctx)
		now := time.Now().UnixNano()
		if err != nil {
			if ctx.Err() == nil {
				f.errs.add(err)
			}
			return
		}
		var data json.RawMessage
		if f.protocol == "ws" {
			var m wsMessage
			if json.Unmarshal(b, &m) != nil || m.Type != "message" {
				f.errs.add(fmt.Errorf("unexpected message %.80s", b))
				continue
			}
			data = m.Data
		} else {
			var e pusherEvent
			if json.Unmarshal(b, &e) != nil || e.Event != f.event() {
				if e.Event == "pusher:ping" {
					c.Write(ctx, rally.Text, []byte(`{"event":"pusher:pong","data":{}}`))
					continue
				}
				f.errs.add(fmt.Errorf("unexpected message %.80s", b))
				continue
			}
			data = e.Data
		}
		sent, err := sendTime(data)
		if err != nil {
			f.errs.add(err)
			continue
		}
		f.deliveries.Add(1)
		for {
			last := f.lastNs.Load()
			if now <= last || f.lastNs.CompareAndSwap(last, now) {
				break
			}
		}
		hs.Lock()
		hs.h.add(max(now-sent, 0))
		hs.Unlock()
	}
}

// fanoutPayload is the data of an event: "t<send time, ns>-xxx..." of size
// bytes at least, or "t<send time, ns>-<tag>-xxx..." with a tag: the
// publisher's, so that it knows its own.
func fanoutPayload(size int, tag string) string {
	s := "t" + strconv.FormatInt(time.Now().UnixNano(), 10) + "-"
	if tag != "" {
		s += tag + "-"
	}
	if len(s) < size {
		s += strings.Repeat("x", size-len(s))
	}
	return s
}

// sendTime reads the send time out of the data of an event, a JSON string
// made by fanoutPayload.
func sendTime(data json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(data, &s); err == nil && strings.HasPrefix(s, "t") {
		if i := strings.IndexByte(s, '-'); i > 1 {
			if ns, err := strconv.ParseInt(s[1:i], 10, 64); err == nil {
				return ns, nil
			}
		}
	}
	return 0, fmt.Errorf("data %.40s carries no send time", data)
}

// trigger sends one event to ch: signed POST /apps/ID/events for Pusher,
// POST /publish/ch for /ws.
func (f *fanout) trigger(ctx context.Context, ch string) error {
	data := fanoutPayload(f.cfg.Size, "")
	var req *http.Request
	var err error
	if f.protocol == "ws" {
		body, _ := json.Marshal(data)
		req, err = http.NewRequestWithContext(ctx, "POST", f.httpURL+url.PathEscape(ch), bytes.NewReader(body))
	} else {
		body, _ := json.Marshal(map[string]string{"name": "bench", "channel": ch, "data": data})
		req, err = http.NewRequestWithContext(ctx, "POST", f.signedURL(body), bytes.NewReader(body))
	}
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return errors.New("trigger: HTTP " + resp.Status)
	}
	return nil
}

// signedURL is the events URL with the query of Pusher's HTTP API
// signature for body.
func (f *fanout) signedURL(body []byte) string {
	u, _ := url.Parse(f.httpURL)
	sum := md5.Sum(body)
	// Sorted by key, as the signature wants them.
	q := "auth_key=" + f.cfg.Key +
		"&auth_timestamp=" + strconv.FormatInt(time.Now().Unix(), 10) +
		"&auth_version=1.0" +
		"&body_md5=" + hex.EncodeToString(sum[:])
	return f.httpURL + "?" + q + "&auth_signature=" + pusherwire.Sign(f.cfg.Secret, "POST\n"+u.EscapedPath()+"\n"+q)
}

// WriteSummary prints the result for a person.
func (r *PusherResult) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "fan-out: %d channel(s), %d-byte events\n", r.Channels, r.Size)
	for _, f := range []*FanoutResult{r.Pusher, r.WS} {
		if f == nil {
			continue
		}
		fmt.Fprintf(w, "%s:\n", f.Protocol)
		fmt.Fprintf(w, "  subscribers   %d of %d in %.2fs (%s/s connect+subscribe)\n", f.Subscribed, f.Conns, f.SubscribeSeconds, Count(f.SubscribeRate))
		sent, sendErrs := "triggered", "trigger"
		if f.ClientEvents {
			sent, sendErrs = "sent as client events", "sending"
			if f.Protocol == "ws" {
				sent = "published from WebSocket clients"
			}
			fmt.Fprintf(w, "  publishers    %d; they got %d of the %d events from one another\n", f.Publishers, f.PublisherDeliveries, f.PublisherExpected)
		}
		fmt.Fprintf(w, "  events        %d %s, %d deliveries of %d expected in %.2fs\n", f.Triggered, sent, f.Deliveries, f.Expected, f.Seconds)
		fmt.Fprintf(w, "  deliveries/s  %s\n", Count(f.DeliveryRate))
		fmt.Fprintf(w, "  latency       p50 %s  p90 %s  p99 %s  max %s\n", Micros(f.P50Micros), Micros(f.P90Micros), Micros(f.P99Micros), Micros(f.MaxMicros))
		if f.RSSPerConn != 0 {
			fmt.Fprintf(w, "  server RSS    %s per subscriber\n", Bytes(f.RSSPerConn))
		}
		if f.ServerCPUSeconds != 0 {
			fmt.Fprintf(w, "  server CPU    %.2fs during the fan-out\n", f.ServerCPUSeconds)
		}
		fmt.Fprintf(w, "  errors        %d (%s %d)\n", f.Errors, sendErrs, f.TriggerErrors)
		for _, s := range f.ErrorSamples {
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
	if r.Ratio > 0 {
		fmt.Fprintf(w, "pusher/ws deliveries/s: %.2f\n", r.Ratio)
	}
}
