// Package server is the runnable WebSocket server behind `rally serve`:
// topic pub/sub for browsers and other clients on /ws (a small JSON
// protocol, docs/PROTOCOL.md), an HTTP publish API for backends, an echo
// endpoint and a chat room for tools, token auth, limits, Prometheus
// metrics and a demo page, on one machine or on several joined by NATS.
//
// It is for running rally as a program (or embedding that program in
// another); to build a server of your own design, use the rally and
// pubsub packages directly.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/cli"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// Config is what `rally serve` is told on its command line. The zero
// Config is a loopback server without auth and with every default.
type Config struct {
	// Addr is the address to listen on, HOST:PORT. Default 127.0.0.1:8080.
	// A non-loopback host needs TokenSecret, or InsecureNoAuth.
	Addr string
	// ShutdownTimeout bounds the close handshakes on shutdown; connections
	// still open after it are cut. Default 5 s.
	ShutdownTimeout time.Duration
	// PingInterval and IdleTimeout keep connections alive or let them go.
	// Defaults 30 s and 90 s; negative turns either off.
	PingInterval time.Duration
	IdleTimeout  time.Duration
	// WriteStallTimeout lets a client go (1006) once bytes have waited to
	// be sent to it this long without it taking one: a client that stopped
	// reading does not hold its queue forever. Default 30 s; negative turns
	// it off.
	WriteStallTimeout time.Duration
	// SlowSubscriberTimeout cuts a /ws, /chat or Pusher connection whose
	// send queue stays at its BufferLimit this long, whether its peer
	// takes no byte or too few to make room (1008, Pusher 4100, when it
	// still takes bytes, else 1006; see slow.go): a subscriber that does
	// not keep up is let go instead of costing every publish on its
	// topics. Such a connection whose peer takes no byte at all for four
	// times this long while messages wait is let go too (1006), however
	// little waits (its WriteStallTimeout, when that is longer). Default
	// 1 s; negative turns both off (messages past the limit are then only
	// dropped, and WriteStallTimeout alone applies).
	SlowSubscriberTimeout time.Duration
	// SubscriberSendBuffer is the kernel's send buffer (SO_SNDBUF) of a
	// /ws, /chat or Pusher connection over HTTP/1.1: what a subscriber
	// that does not read makes the kernel hold and every publisher copy, beyond its queue
	// (whose shared frames are held once for all). Default 64 KiB (the
	// kernel doubles it); negative leaves the kernel's own, which grows
	// to megabytes.
	SubscriberSendBuffer int
	// Logger receives the server's log lines. nil means slog.Default().
	// Tokens and API keys never appear in them.
	Logger *slog.Logger

	// TLSCert and TLSKey, both or neither, are PEM files: with them the
	// server speaks HTTPS and wss://.
	TLSCert, TLSKey string

	// TokenSecret, when set, is the HMAC key (at least 32 bytes) of the
	// JWTs that /ws, /chat and /echo clients must present (see Claims).
	// Without it anyone may connect, subscribe and publish.
	TokenSecret string
	// APIKey, when set, is the Bearer credential POST /publish needs.
	// With TokenSecret set and no APIKey, the publish API is closed.
	APIKey string
	// InsecureNoAuth allows a non-loopback Addr without TokenSecret.
	InsecureNoAuth bool
	// H2C serves HTTP/2 without TLS (prior knowledge) besides HTTP/1.1,
	// so that WebSockets over HTTP/2 (RFC 8441) work without TLS too.
	// Over TLS, HTTP/2 is always offered.
	H2C bool
	// Origins lists the other hosts (path.Match patterns, e.g.
	// "*.example.com", "localhost:*") whose pages may open /ws; pages of
	// the server's own host always may, and non-browser clients send no
	// Origin.
	Origins []string

	// MaxConnections bounds open WebSocket connections (/ws and /echo
	// together); past it handshakes get 503. Default 10000, negative
	// means no limit.
	MaxConnections int
	// HandshakeRate is how many WebSocket handshakes per second one client
	// IP address may make (with a burst of as many); past it they get 429.
	// Default 20, negative means no limit. An IPv6 client counts by its
	// /64. Loopback clients (a test tool; a local proxy's clients are
	// counted by the address it forwards, see TrustedProxies) are not
	// limited unless RateLimitLoopback is set.
	HandshakeRate     float64
	RateLimitLoopback bool
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (whose address the handshake rate limit counts, and
	// refusals are logged with): a comma-separated list of addresses,
	// networks (CIDR) and the words loopback, private (10/8, 172.16/12,
	// 192.168/16, fc00::/7) and none. The client is the rightmost address
	// of the header that is not a trusted proxy. Default "loopback".
	TrustedProxies string
	// MaxSubscriptions bounds the topics one /ws connection subscribes to.
	// Default 100, negative means no limit.
	MaxSubscriptions int
	// HeaderReadTimeout bounds how long a client may take to send its
	// request head. Default 10 s.
	HeaderReadTimeout time.Duration
	// MaxMessageBytes bounds a /ws message (larger: closed with 1009) and
	// a /publish body (larger: 413). Default 64 KiB.
	MaxMessageBytes int
	// BufferLimit bounds what waits to be sent to one slow client;
	// messages past it are dropped for that client and counted. Default
	// rally.DefaultBufferLimit.
	BufferLimit int

	// Node names this server to the other nodes of a cluster. "" means a
	// random name.
	Node string
	// Broker, when set, carries publishes to and from other nodes; the
	// server closes it on shutdown. Leave it nil when NATS is set.
	Broker pubsub.Broker
	// NATS, when its URL or Embedded is set, joins this node to others
	// through NATS.
	NATS NATSConfig

	// History keeps the last messages of some topics for clients that
	// reconnect; Presence tells who subscribes to some topics.
	History  HistoryConfig
	Presence PresenceConfig

	// Protection bounds what clients can make the server hold: memory,
	// request heads, /echo messages (see protect.go).
	Protection

	// PusherApps are the apps served over the Pusher Channels protocol
	// (/app/{key} for clients, /apps/{app_id}/... for backends; see
	// docs/PUSHER.md). None: those endpoints are not served.
	PusherApps []PusherApp

	// EventLoop runs the WebSocket connections of /ws, /echo and /chat on
	// rally's event loops instead of a goroutine each (rally.Server's
	// EventLoop; see engine.go).
	EventLoop bool
	// EventLoops is how many event loops share each endpoint's
	// connections with EventLoop (rally.Server's EventLoops), at most
	// maxEventLoops; 0: one per CPU the process may use (GOMAXPROCS; see
	// eventLoops).
	EventLoops int
	// ReusePort lets several processes listen on the same Addr
	// (SO_REUSEPORT, Linux only): the kernel spreads new connections over
	// them. Addr needs a fixed port. See reuseport.go for what it costs.
	ReusePort bool
}

// Server serves the endpoints of `rally serve`. Create it with New and
// call Serve (or ListenAndServe) once; Handler and Hub are safe to use
// from many goroutines.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	echo    *rally.Server
	ws      *rally.Server
	chat    *rally.Server
	hub     *pubsub.Hub
	m       *metrics
	h2m     h2Metrics
	secret  []byte
	rate    *rateLimiter
	proxies proxyRanges // whose X-Forwarded-For names the client
	heads   headWatch
	slow    *slowWatch // /ws connections whose queue stays full
	guard

	conns    atomic.Int64 // open WebSocket connections and handshakes under way
	draining atomic.Bool

	// For the demo page's live counters.
	wsConns, subs, publishes, deliveries atomic.Int64

	closers []func() // run at the end of shutdown (brokers, embedded servers)

	embeddedNATS *natsbroker.Embedded // nil without --embedded-nats
	tls          *tls.Config          // nil without TLSCert

	closedHook func() // tests: called when a connection has ended

	history    historyStore // nil without history topics
	histHub    *histHub
	replays    *admission // recoveries under way, at most cfg.History.Replays
	recoveries *prometheus.CounterVec
	presence   *presence // nil without presence topics

	pusherWS   *rally.Server         // nil without Pusher apps
	pusherKeys map[string]*pusherApp // by key
	pusherIDs  map[string]*pusherApp // by app id
	// pusherCluster shares the apps' channels with other nodes (nil
	// alone).
	pusherCluster *pusherCluster
}

// ConfigError is a setting New refuses before doing anything: a value
// with no meaning, whatever the machine. `rally serve` reports it as a
// wrong command line (exit status 2).
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// configErrorf returns a *ConfigError; format starts with the flag.
func configErrorf(format string, a ...any) error {
	return &ConfigError{"rally serve: " + fmt.Sprintf(format, a...)}
}

// New returns a server for cfg with defaults filled in, or an error that
// says which setting is wrong (a *ConfigError when the setting itself has
// no meaning).
func New(cfg Config) (*Server, error) {
	if err := cfg.checkNumbers(); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	cfg.PingInterval = orDefault(cfg.PingInterval, 30*time.Second)
	cfg.IdleTimeout = orDefault(cfg.IdleTimeout, 90*time.Second)
	cfg.WriteStallTimeout = orDefault(cfg.WriteStallTimeout, 30*time.Second)
	cfg.SlowSubscriberTimeout = orDefault(cfg.SlowSubscriberTimeout, time.Second)
	cfg.SubscriberSendBuffer = orDefault(cfg.SubscriberSendBuffer, 64<<10)
	cfg.MaxConnections = orDefault(cfg.MaxConnections, 10000)
	cfg.HandshakeRate = orDefault(cfg.HandshakeRate, 20)
	cfg.MaxSubscriptions = orDefault(cfg.MaxSubscriptions, 100)
	if cfg.HeaderReadTimeout <= 0 {
		cfg.HeaderReadTimeout = 10 * time.Second
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 64 << 10
	}
	if err := cfg.Protection.fill(); err != nil {
		return nil, err
	}
	if err := cfg.History.fill(); err != nil {
		return nil, err
	}
	if err := cfg.Presence.fill(); err != nil {
		return nil, err
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, configErrorf("--tls-cert and --tls-key go together")
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		// Loaded now, so that a missing or wrong file is said before
		// anything is announced.
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("rally serve: --tls-cert and --tls-key: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	if cfg.TokenSecret != "" && len(cfg.TokenSecret) < 32 {
		return nil, configErrorf("--token-secret is %d bytes; HS256 needs at least 32 (e.g. `openssl rand -hex 32`)", len(cfg.TokenSecret))
	}
	for _, p := range cfg.Origins {
		if _, err := path.Match(p, ""); err != nil {
			return nil, configErrorf("--origins pattern %q: %v", p, err)
		}
	}
	if err := checkAddr(cfg.Addr); err != nil {
		return nil, err
	}
	if err := cfg.checkBind(cfg.Addr); err != nil {
		return nil, err
	}
	if err := cfg.checkReusePort(); err != nil {
		return nil, err
	}
	if cfg.Node == "" {
		var b [6]byte
		rand.Read(b[:])
		cfg.Node = hex.EncodeToString(b[:])
	}
	m := newMetrics()
	stopNATS, embedded, err := startNATS(&cfg, m)
	if err != nil {
		return nil, err
	}
	if cfg.Protection.MemoryBudget == nil {
		// Made now, so that the hub charges subscriptions to it too.
		cfg.Protection.MemoryBudget = rally.NewMemoryBudget(max(cfg.Protection.MemoryLimit, 0))
	}
	s := &Server{cfg: cfg, log: cfg.Logger, m: m, h2m: newH2Metrics(m.reg), embeddedNATS: embedded, tls: tlsConfig}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.TokenSecret != "" {
		s.secret = []byte(cfg.TokenSecret)
	}
	s.rate = newRateLimiter(cfg.HandshakeRate, cfg.RateLimitLoopback)
	if s.proxies, err = parseProxyRanges(cfg.TrustedProxies); err != nil {
		return nil, configErrorf("--trusted-proxies: %v", err)
	}
	var broker pubsub.Broker
	if cfg.Broker != nil {
		broker = framedBroker{Broker: cfg.Broker, dropped: &m.notMessage}
	}
	hub, err := pubsub.NewHub(&pubsub.Options{
		Broker:       broker,
		Node:         cfg.Node,
		MemoryBudget: cfg.Protection.MemoryBudget,
		OnError: func(err error) {
			s.log.Warn("pub/sub across nodes", "err", err)
		},
		// Messages from other nodes reach this node's subscribers without
		// passing through a handler here: count them as they are fanned out.
		OnDeliver: func(m pubsub.Message, res pubsub.Result) {
			s.delivered(res, len(m.Payload))
			s.pusherDelivered(m)
		},
	})
	if err != nil {
		if cfg.Broker != nil {
			cfg.Broker.Close()
		}
		stopNATS()
		return nil, fmt.Errorf("rally serve: %w", err)
	}
	s.hub = hub
	s.closers = append(s.closers, stopNATS)
	if cfg.Broker != nil {
		s.closers = append(s.closers, func() { hub.Close() })
	}
	if err := s.startHistory(); err != nil {
		s.shutdownNodes()
		return nil, err
	}
	if err := s.startPresence(); err != nil {
		s.shutdownNodes()
		return nil, err
	}

	conn := rally.ConnOptions{
		PingInterval:      max(cfg.PingInterval, 0),
		IdleTimeout:       max(cfg.IdleTimeout, 0),
		WriteStallTimeout: max(cfg.WriteStallTimeout, 0),
		CloseTimeout:      cfg.ShutdownTimeout,
		Logger:            s.log,
		BufferLimit:       cfg.BufferLimit,
	}
	// Compression without server context: an idle connection keeps no
	// compressor, and a message for many is compressed once.
	compression := &rally.CompressionOptions{ServerNoContextTakeover: true}

	echoOpts := &rally.AcceptOptions{
		ConnOptions: conn,
		// The echo endpoint holds no user data and trusts no cookie, so any
		// page may use it.
		InsecureSkipOriginCheck: true,
		Compression:             compression,
		Authorize:               s.authorize("echo"),
		OnHandshakeError:        s.handshakeError,
	}
	s.echo = &rally.Server{Options: echoOpts, Open: s.opened("echo"), Message: echo, Close: s.closed("echo")}

	wsConn := conn
	wsConn.WriteStallTimeout = subscriberStall(cfg)
	wsConn.ReadLimit = int64(cfg.MaxMessageBytes)
	wsConn.ReadLimitReason = tooBigReason("/ws and /chat", cfg.MaxMessageBytes, "max-message-bytes")
	wsOpts := &rally.AcceptOptions{
		ConnOptions:      wsConn,
		OriginPatterns:   cfg.Origins,
		Compression:      compression,
		Authorize:        s.authorize("ws"),
		OnHandshakeError: s.handshakeError,
	}
	s.ws = &rally.Server{Options: wsOpts, Open: s.wsOpen, Message: s.wsMessage, Close: s.wsClose}
	if s.cfg.History.Topics != nil {
		s.ws.Drain = s.wsDrain
	}
	s.slow = newSlowWatch(cfg.SlowSubscriberTimeout, slowFullBytes(cfg.BufferLimit), s.cutSlow)

	// /chat is one room: what a client sends, every client gets. Its
	// messages, pages and tokens are checked as /ws's are.
	chatOpts := *wsOpts
	chatOpts.Authorize = s.authorize("chat")
	s.chat = &rally.Server{Options: &chatOpts, Open: s.chatOpen, Message: s.chatMessage, Close: s.chatClose}
	s.useEngine(s.echo, s.ws, s.chat)
	if err := s.startPusher(wsConn, compression); err != nil {
		s.shutdownNodes()
		return nil, err
	}
	if err := s.startPusherCluster(); err != nil {
		s.shutdownNodes()
		return nil, err
	}

	s.mux = http.NewServeMux()
	s.mux.Handle("GET /echo", s.limit(s.echo))
	s.mux.Handle("GET /ws", s.limit(s.subscribers(s.ws)))
	s.mux.Handle("GET /chat", s.limit(s.subscribers(s.chat)))
	// WebSockets over HTTP/2 arrive as CONNECT (RFC 8441).
	s.mux.Handle("CONNECT /echo", s.limit(s.echo))
	s.mux.Handle("CONNECT /ws", s.limit(s.ws))
	s.mux.Handle("CONNECT /chat", s.limit(s.chat))
	// A prefix, not a {topic...} wildcard: publish takes the topic from
	// the path itself (the wildcard's match costs allocations per request).
	s.mux.HandleFunc("POST /publish/", s.publish)
	s.mux.HandleFunc("/publish/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		httpError(w, http.StatusMethodNotAllowed, "method_not_allowed", "publish with POST /publish/{topic}")
	})
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.mux.HandleFunc("GET /stats", s.stats)
	s.mux.Handle("GET /client.js", clientModule())
	s.mux.Handle("GET /{$}", demoPage())
	s.pusherRoutes()
	if err := s.protect(); err != nil {
		s.shutdownNodes()
		return nil, err
	}
	return s, nil
}

// orDefault maps 0 to def and any negative value to -1 (off).
func orDefault[T int | float64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return -1
	}
	return v
}

// checkBind refuses to serve a non-loopback address without auth unless
// told to.
// checkAddr refuses an --addr net.Listen would refuse, in words that
// name the flag.
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return configErrorf("--addr %q is not HOST:PORT (such as 127.0.0.1:8080, or :8080 for every interface)", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil && port != "" {
		_, err = net.LookupPort("tcp", port) // a service name, such as "http"
	}
	if err != nil || n < 0 || n > 65535 {
		return configErrorf("--addr %q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

func (cfg *Config) checkBind(addr string) error {
	if cfg.TokenSecret != "" || cfg.InsecureNoAuth {
		return nil
	}
	lo, err := isLoopback(addr)
	if err != nil {
		return fmt.Errorf("rally serve: %w", err)
	}
	if !lo {
		return fmt.Errorf("rally serve: %s is not a loopback address and no --token-secret is set: anyone who can reach it could subscribe and publish; set a token secret, or pass --insecure-no-auth if that is what you want", addr)
	}
	return nil
}

// tooBigReason is the reason of the 1009 close on endpoints past their
// limit: the limit and the flag that raises it (under the 123 bytes of a
// close reason).
func tooBigReason(endpoints string, limit int, flag string) string {
	size := cli.ShowBytes(int64(limit))
	if _, err := strconv.Atoi(size); err == nil {
		size += " bytes"
	}
	return fmt.Sprintf("message larger than %s, the limit of %s (rally serve --%s)", size, endpoints, flag)
}

// echo sends every message back with its own frame type.
func echo(c *rally.Conn, typ rally.MessageType, p []byte) {
	c.Write(context.Background(), typ, p)
}

// Handler returns the server's HTTP handler (all endpoints).
func (s *Server) Handler() http.Handler { return s.mux }

// Hub returns the server's pub/sub hub, through which a program that
// embeds the server can publish or subscribe connections of its own.
func (s *Server) Hub() *pubsub.Hub { return s.hub }

// ready answers /readyz: 200 while serving, 503 once shutdown has begun.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if err := s.natsReady(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ready\n")
}

// Serve serves on ln until ctx ends, then shuts down: /readyz turns 503,
// it stops accepting, sends 1001 (going away) to every open WebSocket,
// waits for their close handshakes up to the shutdown timeout, cuts what
// is left, detaches from other nodes and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.cfg.checkBind(ln.Addr().String()); err != nil {
		s.shutdownNodes()
		return err
	}
	hs := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: s.cfg.HeaderReadTimeout,
		// No IdleTimeout: harden's gate closes idle connections
		// (headGate.idleAfter), so that net/http's HTTP/2 server keeps
		// no idle timer.
		ConnState: s.heads.track(s.cfg.HeaderReadTimeout, s.m),
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.configureHTTP2(hs)
	ln = s.harden(ctx, hs, ln)
	errc := make(chan error, 1)
	go func() {
		if s.tls != nil {
			// TLS over rally's own socket, so that sends keep their
			// contract over wss (Sent when the kernel took the bytes).
			cfg := s.tls.Clone()
			cfg.NextProtos = []string{"h2", "http/1.1"}
			hs.TLSConfig = cfg
			errc <- hs.Serve(rally.NewTLSListener(ln, cfg))
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		s.shutdownNodes()
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout.String()) // "5s", not nanoseconds in JSON
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Stop accepting; hijacked WebSockets are not net/http's any more, so
	// they get their 1001 from the WebSocket servers.
	hs.Shutdown(sctx)
	var wg sync.WaitGroup
	for _, ws := range []*rally.Server{s.echo, s.ws, s.chat, s.pusherWS} {
		if ws == nil {
			continue
		}
		wg.Go(func() { ws.Shutdown(sctx) })
	}
	wg.Wait()
	s.shutdownNodes()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) shutdownNodes() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// ListenAndServe listens on the configured address, prints the URLs it
// serves and its auth mode to out, and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, out io.Writer) error {
	ln, err := s.listen()
	if err != nil {
		s.shutdownNodes()
		return fmt.Errorf("rally serve: %w", err)
	}
	http, ws := "http", "ws"
	if s.cfg.TLSCert != "" {
		http, ws = "https", "wss"
	}
	a, where := browserAddr(s.cfg.Addr, ln.Addr())
	fmt.Fprintf(out, "rally serve: listening on %s (node %s)\n", where, s.hub.Node())
	fmt.Fprintf(out, "  demo:     %s://%s/\n", http, a)
	fmt.Fprintf(out, "  pub/sub:  %s://%s/ws\n", ws, a)
	fmt.Fprintf(out, "  publish:  POST %s://%s/publish/{topic}\n", http, a)
	fmt.Fprintf(out, "  echo:     %s://%s/echo\n", ws, a)
	fmt.Fprintf(out, "  chat:     %s://%s/chat (one room, for rally bench chat)\n", ws, a)
	fmt.Fprintf(out, "  metrics:  %s://%s/metrics\n", http, a)
	for _, app := range s.cfg.PusherApps {
		fmt.Fprintf(out, "  pusher:   app %s: %s://%s/app/%s, HTTP API %s://%s/apps/%s\n", app.ID, ws, a, app.Key, http, a, app.ID)
	}
	if e := s.embeddedNATS; e != nil {
		fmt.Fprintf(out, "  NATS:     embedded server for other nodes' --nats at %s\n", e.ClientURL())
		if u := e.ClusterURL(); u != "" {
			fmt.Fprintf(out, "  NATS:     routes from other embedded servers at %s\n", u)
		}
	}
	if s.cfg.NATS.URL != "" {
		fmt.Fprintf(out, "  NATS:     sharing topics with other nodes through %s\n", redactURL(s.cfg.NATS.URL))
	}
	if s.cfg.ReusePort {
		fmt.Fprintf(out, "  port:     shared with other processes (--reuse-port); topics span them only through NATS\n")
	}
	if s.cfg.EventLoop {
		fmt.Fprintf(out, "  engine:   %d event loops an endpoint (--event-loop=false: a goroutine per connection)\n", s.eventLoops())
	} else {
		fmt.Fprintf(out, "  engine:   a goroutine per connection\n")
	}
	switch {
	case s.secret != nil:
		fmt.Fprintf(out, "  auth:     /ws, /chat and /echo need a token signed with the token secret\n")
	case s.cfg.InsecureNoAuth:
		fmt.Fprintf(out, "  auth:     NONE (--insecure-no-auth): anyone who reaches this address may subscribe and publish\n")
	default:
		fmt.Fprintf(out, "  auth:     none; loopback only (set --token-secret to serve other addresses)\n")
	}
	switch {
	case s.cfg.APIKey != "":
		fmt.Fprintf(out, "  publish API: needs the API key as a Bearer token\n")
	case s.secret != nil:
		fmt.Fprintf(out, "  publish API: closed (set --api-key to open it)\n")
	}
	return s.Serve(ctx, ln)
}

// browserAddr returns the HOST:PORT to put in the URLs announced for a
// server told to listen on given and listening on actual, and how to
// describe where it listens. The host is the one given (a name stays a
// name); a wildcard host (":8080", "0.0.0.0", "[::]") becomes localhost,
// which a browser on this machine can open. The port is the one bound
// (given ":0", the one chosen).
func browserAddr(given string, actual net.Addr) (addr, where string) {
	host, _, err := net.SplitHostPort(given)
	_, port, err2 := net.SplitHostPort(actual.String())
	if err != nil || err2 != nil {
		return actual.String(), actual.String()
	}
	where = net.JoinHostPort(host, port)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
		where += " (every interface)"
	}
	return net.JoinHostPort(host, port), where
}

// maxEventLoops bounds Config.EventLoops: each loop is a goroutine that
// keeps a processor while it turns, so more loops than a large machine
// has cores buy nothing.
const maxEventLoops = 256

// checkNumbers refuses settings that have no meaning (negative sizes and
// timeouts); 0 means the default and negative limits mean none, as each
// field says.
func (cfg *Config) checkNumbers() error {
	bad := func(flag string, v any, want string) error {
		return configErrorf("--%s is %v; %s", flag, v, want)
	}
	switch {
	case cfg.MaxMessageBytes < 0:
		return bad("max-message-bytes", cfg.MaxMessageBytes, "it must be a positive number of bytes")
	case cfg.EventLoops < 0 || cfg.EventLoops > maxEventLoops:
		return bad("event-loops", cfg.EventLoops, fmt.Sprintf("it must be 1 to %d loops, or 0 for one a CPU", maxEventLoops))
	case cfg.HeaderReadTimeout < 0:
		return bad("header-timeout", cfg.HeaderReadTimeout, "it must be a positive duration")
	case cfg.ShutdownTimeout < 0:
		return bad("shutdown-timeout", cfg.ShutdownTimeout, "it must be a positive duration")
	case math.IsNaN(cfg.HandshakeRate) || math.IsInf(cfg.HandshakeRate, 0):
		return bad("handshake-rate", cfg.HandshakeRate, "it must be a number of handshakes per second (negative: no limit)")
	}
	return nil
}
