package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/rallyws/rally/internal/cli"
	"github.com/rallyws/rally/server"
)

// serveFlag is one flag of `rally serve`: its name, the environment
// variable that sets it when the command line does not, how to show its
// value in the help, and which numbers it refuses.
type serveFlag struct {
	name, env, value string
	check            numberCheck
}

// numberCheck says which values a numeric flag refuses.
type numberCheck int

const (
	anyNumber numberCheck = iota
	positive              // > 0
	nonZero               // 0 has no meaning; negative means none or never
)

// serveGroups orders the flags of `rally serve --help`. A new flag of
// `rally serve` is defined in newServeFlags and listed here; the help,
// the environment and the config file then know it.
var serveGroups = []struct {
	title string
	flags []serveFlag
}{
	{"Listening", []serveFlag{
		{name: "addr", env: "RALLY_ADDR", value: "HOST:PORT"},
		{name: "tls-cert", env: "RALLY_TLS_CERT", value: "FILE"},
		{name: "tls-key", env: "RALLY_TLS_KEY", value: "FILE"},
		{name: "h2c", env: "RALLY_H2C"},
		{name: "reuse-port", env: "RALLY_REUSE_PORT"},
	}},
	{"Auth (secure by default: without a token secret, only loopback addresses are served)", []serveFlag{
		{name: "token-secret", env: "RALLY_TOKEN_SECRET", value: "SECRET"},
		{name: "api-key", env: "RALLY_API_KEY", value: "KEY"},
		{name: "origins", env: "RALLY_ORIGINS", value: "PATTERNS"},
		{name: "insecure-no-auth", env: "RALLY_INSECURE_NO_AUTH"},
	}},
	{"Limits", []serveFlag{
		{name: "max-connections", env: "RALLY_MAX_CONNECTIONS", value: "N", check: nonZero},
		{name: "handshake-rate", env: "RALLY_HANDSHAKE_RATE", value: "PER_SECOND", check: nonZero},
		{name: "rate-limit-loopback", env: "RALLY_RATE_LIMIT_LOOPBACK"},
		{name: "trusted-proxies", env: "RALLY_TRUSTED_PROXIES", value: "LIST"},
		{name: "max-subscriptions", env: "RALLY_MAX_SUBSCRIPTIONS", value: "N", check: nonZero},
		{name: "max-message-bytes", env: "RALLY_MAX_MESSAGE_BYTES", value: "BYTES", check: positive},
		{name: "buffer-limit", env: "RALLY_BUFFER_LIMIT", value: "BYTES", check: nonZero},
		{name: "subscriber-send-buffer", env: "RALLY_SUBSCRIBER_SEND_BUFFER", value: "BYTES", check: nonZero},
		{name: "header-timeout", env: "RALLY_HEADER_TIMEOUT", value: "DURATION", check: positive},
	}},
	{"Connections", []serveFlag{
		{name: "ping-interval", env: "RALLY_PING_INTERVAL", value: "DURATION", check: nonZero},
		{name: "idle-timeout", env: "RALLY_IDLE_TIMEOUT", value: "DURATION", check: nonZero},
		{name: "write-stall-timeout", env: "RALLY_WRITE_STALL_TIMEOUT", value: "DURATION", check: nonZero},
		{name: "slow-subscriber-timeout", env: "RALLY_SLOW_SUBSCRIBER_TIMEOUT", value: "DURATION", check: nonZero},
		{name: "shutdown-timeout", env: "RALLY_SHUTDOWN_TIMEOUT", value: "DURATION", check: positive},
		{name: "event-loop", env: "RALLY_EVENT_LOOP"},
		{name: "event-loops", env: "RALLY_EVENT_LOOPS", value: "N"},
	}},
	{"Several nodes (NATS)", append([]serveFlag{
		{name: "node", env: "RALLY_NODE", value: "NAME"},
		{name: "nats", env: "RALLY_NATS", value: "URL"},
		{name: "embedded-nats", env: "RALLY_EMBEDDED_NATS", value: "HOST:PORT"},
		{name: "nats-cluster", env: "RALLY_NATS_CLUSTER", value: "HOST:PORT"},
		{name: "nats-routes", env: "RALLY_NATS_ROUTES", value: "URL,URL"},
	}, natsAuthServeFlags...)},
	{"History, recovery and presence (see docs/SERVE.md)", historyServeFlags},
	{"Pusher Channels protocol (see docs/PUSHER.md)", []serveFlag{
		{name: "pusher-app", env: "RALLY_PUSHER_APPS", value: "ID:KEY:SECRET"},
		{name: "pusher-webhook", env: "RALLY_PUSHER_WEBHOOKS", value: "ID=URL"},
	}},
	{"Under attack (memory, request heads; see docs/SERVE.md)", protectServeFlags},
	{"Logs", []serveFlag{
		{name: "log-format", env: "RALLY_LOG_FORMAT", value: "text|json"},
		{name: "log-level", env: "RALLY_LOG_LEVEL", value: "LEVEL"},
	}},
	{"Configuration file", []serveFlag{
		{name: "config", env: "RALLY_CONFIG", value: "FILE"},
	}},
}

const serveIntro = `Usage: rally serve [flags]

Serves topic pub/sub over WebSocket, and more, on one address:

  /                      a demo page: join a topic, send, see messages
  /ws                    pub/sub for clients (JSON; see docs/PROTOCOL.md)
  POST /publish/{topic}  publish from a backend with one HTTP call
  /echo                  WebSocket echo
  /chat                  one chat room: every message to every client
  /metrics               Prometheus metrics
  /healthz, /readyz      liveness; readiness (503 once shutdown began)

With no flags it serves http://127.0.0.1:8080/ to this machine only,
without auth. On SIGINT or SIGTERM it closes every WebSocket with 1001
(going away) and exits.

Every flag can also be set by the environment variable shown with it, or
in a TOML file given with --config, under the flag's name:

  addr = "127.0.0.1:9000"
  origins = ["*.example.com"]
  idle-timeout = "2m"

The command line wins over the environment, which wins over the file.
Prefer the environment or the file for secrets: command lines are visible
to other users of the machine.
`

// list is a flag holding a comma-separated list.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

// repeated is a list flag that may be given several times: each adds to
// it.
type repeated list

func (l *repeated) String() string { return strings.Join(*l, ",") }

func (l *repeated) Set(v string) error {
	var more list
	more.Set(v)
	*l = append(*l, more...)
	return nil
}

func (l *list) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// serveSetup is what the command line, the environment and the config
// file of `rally serve` ask for.
type serveSetup struct {
	cfg       server.Config
	pusher    struct{ apps, webhooks repeated }
	logFormat string
	logLevel  slog.Level
}

// newServeFlags defines the flags of rally serve, filling s.
func newServeFlags(s *serveSetup, origins, routes *list, config *string) *flag.FlagSet {
	fs := cli.NewFlagSet("rally serve")
	cfg := &s.cfg
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "certificate (PEM) to serve HTTPS and wss:// with; needs --tls-key")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.BoolVar(&cfg.H2C, "h2c", false, "serve HTTP/2 without TLS too (WebSockets over HTTP/2, RFC 8441, by prior\nknowledge); over TLS, HTTP/2 is always offered")
	fs.BoolVar(&cfg.ReusePort, "reuse-port", false, "share --addr's port with other rally serve processes (SO_REUSEPORT, Linux):\nthe kernel spreads new connections over them; join them with --nats for\ntopics to span them, and know that stopping one drops the connections\nqueued on it (docs/SERVE.md)")
	fs.StringVar(&cfg.TokenSecret, "token-secret", "", "HMAC key (32 bytes or more) of the JWTs /ws, /chat and /echo clients must\npresent in ?token= or an Authorization: Bearer header (claims: subscribe,\npublish, exp)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "the Bearer credential POST /publish needs (with a token secret and no key,\nthe publish API is closed)")
	fs.Var(origins, "origins", "other hosts whose pages may open /ws, comma-separated (\"*.example.com,localhost:*\");\nthe server's own host always may")
	fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "serve a non-loopback address without a token secret: anyone who reaches it\nmay subscribe and publish")
	fs.IntVar(&cfg.MaxConnections, "max-connections", 10000, "open WebSocket connections at most; more get 503 (negative: no limit)")
	fs.Float64Var(&cfg.HandshakeRate, "handshake-rate", 20, "WebSocket handshakes per second per client IP, with as many in a burst;\nmore get 429 (negative: no limit)")
	fs.BoolVar(&cfg.RateLimitLoopback, "rate-limit-loopback", false, "apply --handshake-rate to loopback clients too")
	fs.StringVar(&cfg.TrustedProxies, "trusted-proxies", "loopback", "reverse proxies whose X-Forwarded-For names the client that --handshake-rate\ncounts: addresses, networks (CIDR), loopback, private or none, comma-separated")
	fs.IntVar(&cfg.MaxSubscriptions, "max-subscriptions", 100, "topics one /ws connection may subscribe to (negative: no limit)")
	cli.BytesVar(fs, &cfg.MaxMessageBytes, "max-message-bytes", 64<<10, "largest /ws message (larger: closed with 1009) and /publish body (413)")
	cli.BytesVar(fs, &cfg.BufferLimit, "buffer-limit", 1<<20, "bytes waiting for one slow client at most, with ~100 bytes of bookkeeping\nper run of messages waiting together; messages past it are dropped for that\nclient and counted (negative: no limit)")
	cli.BytesVar(fs, &cfg.SubscriberSendBuffer, "subscriber-send-buffer", 64<<10, "kernel send buffer of a /ws, /chat or Pusher connection over HTTP/1.1: what a\nclient that does not read makes the kernel hold beyond --buffer-limit (negative: the\nkernel's own, growing to megabytes)")
	fs.DurationVar(&cfg.HeaderReadTimeout, "header-timeout", 10*time.Second, "time a client has to send its request head")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", 30*time.Second, "ping a quiet client this often (negative: never)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 90*time.Second, "close a client silent this long with 1001 (negative: never)")
	fs.DurationVar(&cfg.WriteStallTimeout, "write-stall-timeout", 30*time.Second, "let a client go when bytes for it have waited this long without it taking one\n(negative: never)")
	fs.DurationVar(&cfg.SlowSubscriberTimeout, "slow-subscriber-timeout", time.Second, "cut a /ws, /chat or Pusher client whose messages stayed at --buffer-limit this long,\nwhether it took no byte or too few (1008, Pusher 4100, or 1006 when it took\nnone), or that took no byte for four times this long while messages waited\n(1006); negative: never")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "time close handshakes may take on shutdown")
	// The event loop is the default where it exists (Linux): less memory
	// per idle connection, and fewer system calls per message.
	fs.BoolVar(&cfg.EventLoop, "event-loop", runtime.GOOS == "linux", "run WebSocket connections on event loops (epoll, Linux; the default there) instead\nof a goroutine each: less memory per idle connection (--event-loop=false: a goroutine each)")
	fs.IntVar(&cfg.EventLoops, "event-loops", 0, "how many event loops share each endpoint's connections (0: one a CPU)")
	fs.StringVar(&cfg.Node, "node", "", "this node's name among the nodes sharing topics (default: random)")
	fs.StringVar(&cfg.NATS.URL, "nats", "", "share topics with other nodes through the NATS server or cluster at URL\n(nats://host:4222, comma-separated for several)")
	fs.StringVar(&cfg.NATS.Embedded, "embedded-nats", "", "start a NATS server in this process, for other nodes' --nats\n(beyond loopback it needs --nats-user or --nats-token)")
	fs.StringVar(&cfg.NATS.Cluster, "nats-cluster", "", "where the embedded NATS server listens for routes from other embedded servers")
	fs.Var(routes, "nats-routes", "cluster addresses of other embedded NATS servers to route to")
	protectFlags(fs, &cfg.Protection, &cfg.NATS)
	historyFlags(fs, &cfg.History, &cfg.Presence)
	fs.Var(&s.pusher.apps, "pusher-app", "serve an app over the Pusher Channels protocol (/app/KEY for pusher-js,\n/apps/ID/... for server SDKs); repeat for more apps, optionally with limits\n(ID:KEY:SECRET:max-connections=N:client-event-rate=N:max-message-bytes=N:\nmax-presence-members=N:cache-ttl=SECONDS)")
	fs.Var(&s.pusher.webhooks, "pusher-webhook", "send the webhooks of Pusher app ID to URL (repeatable)")
	fs.StringVar(&s.logFormat, "log-format", "text", "log lines as text or json")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "least level logged: debug, info, warn or error")
	fs.StringVar(config, "config", "", "read settings from this TOML file (keys are flag names)")
	return fs
}

// parseServe reads the command line, the environment and the config file.
// It returns the status to exit with when the server must not run (help:
// 0, usage or configuration error: 2), or -1.
func parseServe(args []string, stdout, stderr io.Writer) (*serveSetup, int) {
	s := &serveSetup{}
	var origins, routes list
	var config string
	fs := newServeFlags(s, &origins, &routes, &config)
	pos, err := cli.Parse(fs, args)
	if err == nil && len(pos) > 0 {
		err = cli.Usagef("unexpected argument %q", pos[0])
	}
	if err == nil {
		err = serveSources(fs)
	}
	if err == nil {
		err = checkServeNumbers(fs)
	}
	if err == nil && s.cfg.ReusePort {
		if _, port, perr := net.SplitHostPort(s.cfg.Addr); perr == nil && (port == "" || port == "0") {
			err = cli.Usagef("--reuse-port needs a fixed port in --addr (%s would pick a new port in each process)", s.cfg.Addr)
		}
	}
	if err == nil && s.logFormat != "text" && s.logFormat != "json" {
		err = cli.Usagef("--log-format is %q, want text or json", s.logFormat)
	}
	if err == nil {
		err = s.pusherApps()
	}
	if status := cli.Exit("rally serve", err, stdout, stderr, func(w io.Writer) { serveUsage(fs, w) }); status >= 0 {
		return nil, status
	}
	s.cfg.Origins, s.cfg.NATS.Routes = origins, routes
	return s, -1
}

func serve(args []string, stdout, stderr io.Writer) int {
	s, status := parseServe(args, stdout, stderr)
	if status >= 0 {
		return status
	}
	opts := &slog.HandlerOptions{Level: s.logLevel}
	if s.logFormat == "json" {
		s.cfg.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		s.cfg.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(s.cfg)
	if err != nil {
		var ce *server.ConfigError
		if errors.As(err, &ce) {
			// A setting with no meaning: a wrong command line.
			fmt.Fprintf(stderr, "%s (see rally serve --help)\n", prefixed("rally serve", err))
			return 2
		}
		fmt.Fprintln(stderr, prefixed("rally serve", err))
		return 1
	}
	setRuntimeMemoryLimit(srv.MemoryBudget().Limit())
	setGCPercent()
	if err := srv.ListenAndServe(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, prefixed("rally serve", err))
		return 1
	}
	return 0
}

// prefixed is err's text starting with cmd, once.
func prefixed(cmd string, err error) string {
	if msg := err.Error(); !strings.HasPrefix(msg, cmd+":") {
		return cmd + ": " + msg
	}
	return err.Error()
}

// serveSources sets each flag the command line left alone from its
// environment variable, then from the config file (--config or
// RALLY_CONFIG), if either has it.
func serveSources(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, g := range serveGroups {
		for _, f := range g.flags {
			v, ok := os.LookupEnv(f.env)
			if !ok || v == "" || given[f.name] {
				continue
			}
			if err := fs.Set(f.name, v); err != nil {
				// The value may be a secret: do not repeat it.
				return cli.Usagef("%s is not a valid --%s: %v", f.env, f.name, errorWithout(err, v))
			}
			given[f.name] = true
		}
	}
	path := fs.Lookup("config").Value.String()
	if path == "" {
		return nil
	}
	return serveConfigFile(fs, path, given)
}

// serveConfigFile sets, from the TOML file at path, each flag that is
// not in given. Its keys are flag names; any other key is an error.
func serveConfigFile(fs *flag.FlagSet, path string, given map[string]bool) error {
	var file map[string]any
	if _, err := toml.DecodeFile(path, &file); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The parser's message may quote the line, which may hold a
			// secret: say where, not what.
			where := fmt.Sprintf("line %d", pe.Position.Line)
			if pe.LastKey != "" {
				where += fmt.Sprintf(" (at key %q)", pe.LastKey)
			}
			return cli.Usagef("%s: %s is not valid TOML", path, where)
		}
		return cli.Usagef("%v", err)
	}
	known := map[string]bool{}
	for _, g := range serveGroups {
		for _, f := range g.flags {
			known[f.name] = f.name != "config"
		}
	}
	for _, key := range sortedKeys(file) {
		if !known[key] {
			return cli.Usagef("%s: unknown key %q (the keys are the flag names, without dashes)", path, key)
		}
		if given[key] {
			continue
		}
		v, err := configValue(fs.Lookup(key), file[key])
		if err == nil {
			err = fs.Set(key, v)
			if err != nil {
				err = errors.New(errorWithout(err, v))
			}
		}
		if err != nil {
			// The value may be a secret: do not repeat it.
			return cli.Usagef("%s: %s: %v", path, key, err)
		}
	}
	return nil
}

// configValue is the flag value that v, as decoded from TOML, stands for.
func configValue(f *flag.Flag, v any) (string, error) {
	_, isList := f.Value.(*list)
	if _, ok := f.Value.(*repeated); ok {
		isList = true
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		if g, ok := f.Value.(flag.Getter); ok && isDuration(g.Get()) {
			return "", errors.New(`a duration is a string such as "30s" or "2m"`)
		}
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []any:
		if !isList {
			return "", errors.New("a list is only for origins, nats-routes, history, presence, pusher-app and pusher-webhook")
		}
		items := make([]string, len(v))
		for i, item := range v {
			s, ok := item.(string)
			if !ok {
				return "", errors.New("the list must hold strings")
			}
			items[i] = s
		}
		return strings.Join(items, ","), nil
	}
	return "", fmt.Errorf("a %T is not a value for --%s", v, f.Name)
}

func isDuration(v any) bool {
	_, ok := v.(time.Duration)
	return ok
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkServeNumbers refuses numbers that mean nothing, whichever source
// they came from.
func checkServeNumbers(fs *flag.FlagSet) error {
	for _, g := range serveGroups {
		for _, sf := range g.flags {
			if sf.check == anyNumber {
				continue
			}
			var v float64
			switch x := fs.Lookup(sf.name).Value.(flag.Getter).Get().(type) {
			case int:
				v = float64(x)
			case int64:
				v = float64(x)
			case float64:
				v = x
			case time.Duration:
				v = float64(x)
			}
			switch {
			case sf.check == positive && v <= 0:
				return cli.Usagef("--%s is %s; it must be more than 0", sf.name, fs.Lookup(sf.name).Value)
			case sf.check == nonZero && v == 0:
				return cli.Usagef("--%s is 0; give more than 0, or a negative value for none", sf.name)
			}
		}
	}
	return nil
}

// errorWithout is err's text with v taken out.
func errorWithout(err error, v string) string {
	if v == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), v, "…")
}

// serveUsage prints the flags in groups, each with its environment
// variable and default.
func serveUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, serveIntro)
	for _, g := range serveGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, sf := range g.flags {
			cli.PrintFlag(w, fs.Lookup(sf.name), sf.value, "env "+sf.env)
		}
	}
}

// pusherApps fills the config's Pusher apps from --pusher-app and
// --pusher-webhook.
func (s *serveSetup) pusherApps() error {
	for _, spec := range s.pusher.apps {
		app, err := server.ParsePusherApp(spec)
		if err != nil {
			return cli.Usagef("%s", strings.TrimPrefix(err.Error(), "rally serve: "))
		}
		s.cfg.PusherApps = append(s.cfg.PusherApps, app)
	}
	for _, hook := range s.pusher.webhooks {
		id, url, ok := strings.Cut(hook, "=")
		i := slices.IndexFunc(s.cfg.PusherApps, func(a server.PusherApp) bool { return a.ID == id })
		if !ok || i < 0 || !strings.HasPrefix(url, "http") {
			return cli.Usagef("--pusher-webhook %q is not ID=URL of a --pusher-app ID and an http(s) URL", hook)
		}
		s.cfg.PusherApps[i].Webhooks = append(s.cfg.PusherApps[i].Webhooks, url)
	}
	return nil
}
