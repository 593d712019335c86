// Command rally is the WebSocket toolbox built on the rally library:
//
//	rally serve    run the pub/sub server (WebSocket, HTTP publish, demo page)
//	rally cat      talk to a WebSocket server from the terminal
//	rally bench    load-test any WebSocket server
//	rally conform  test any WebSocket server or client against RFC 6455 / 7692
//
// Run `rally COMMAND --help` for the flags of each.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/loadgen"
	"github.com/rallyws/rally/server"
)

const usage = `rally: the WebSocket toolbox

Usage:
  rally serve [flags]          run the pub/sub server: /ws, POST /publish, demo page at /
  rally cat URL [flags]        an interactive client: type lines to send, see what arrives
  rally bench SCENARIO URL     load-test a WebSocket server (echo, chat, throughput, connect, idle),
                               or attack it (slowloris, head-hold, partial, slow-read, garbage)
  rally conform server URL     run the conformance suite against a server's echo endpoint
  rally conform client --addr HOST:PORT
                               serve the suite to a client (the classic fuzzing-server paths)

Run 'rally COMMAND --help' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "bench":
		if len(args) > 1 && loadgen.IsHostile(args[1]) {
			return loadgen.HostileMain(args[1:], stdout, stderr)
		}
		return loadgen.Main(args[1:], stdout, stderr)
	case "conform":
		return conform.Main(args[1:], stdout, stderr)
	case "cat":
		return cat(args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rally: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// serveFlag is one flag of `rally serve`: its name, the environment
// variable that sets it when the command line does not, and how to show
// its value in the help.
type serveFlag struct {
	name, env, value string
}

// serveGroups orders the flags of `rally serve --help`.
var serveGroups = []struct {
	title string
	flags []serveFlag
}{
	{"Listening", []serveFlag{
		{"addr", "RALLY_ADDR", "HOST:PORT"},
		{"tls-cert", "RALLY_TLS_CERT", "FILE"},
		{"tls-key", "RALLY_TLS_KEY", "FILE"},
	}},
	{"Auth (secure by default: without a token secret, only loopback addresses are served)", []serveFlag{
		{"token-secret", "RALLY_TOKEN_SECRET", "SECRET"},
		{"api-key", "RALLY_API_KEY", "KEY"},
		{"origins", "RALLY_ORIGINS", "PATTERNS"},
		{"insecure-no-auth", "RALLY_INSECURE_NO_AUTH", ""},
	}},
	{"Limits", []serveFlag{
		{"max-connections", "RALLY_MAX_CONNECTIONS", "N"},
		{"handshake-rate", "RALLY_HANDSHAKE_RATE", "PER_SECOND"},
		{"rate-limit-loopback", "RALLY_RATE_LIMIT_LOOPBACK", ""},
		{"max-subscriptions", "RALLY_MAX_SUBSCRIPTIONS", "N"},
		{"max-message-bytes", "RALLY_MAX_MESSAGE_BYTES", "BYTES"},
		{"buffer-limit", "RALLY_BUFFER_LIMIT", "BYTES"},
		{"header-timeout", "RALLY_HEADER_TIMEOUT", "DURATION"},
	}},
	{"Connections", []serveFlag{
		{"ping-interval", "RALLY_PING_INTERVAL", "DURATION"},
		{"idle-timeout", "RALLY_IDLE_TIMEOUT", "DURATION"},
		{"shutdown-timeout", "RALLY_SHUTDOWN_TIMEOUT", "DURATION"},
	}},
	{"Several nodes (NATS)", append([]serveFlag{
		{"node", "RALLY_NODE", "NAME"},
		{"nats", "RALLY_NATS", "URL"},
		{"embedded-nats", "RALLY_EMBEDDED_NATS", "HOST:PORT"},
		{"nats-cluster", "RALLY_NATS_CLUSTER", "HOST:PORT"},
		{"nats-routes", "RALLY_NATS_ROUTES", "URL,URL"},
	}, natsAuthServeFlags...)},
	{"Under attack (memory, request heads; see docs/SERVE.md)", protectServeFlags},
	{"Logs", []serveFlag{
		{"log-format", "RALLY_LOG_FORMAT", "text|json"},
		{"log-level", "RALLY_LOG_LEVEL", "LEVEL"},
	}},
}

const serveIntro = `Usage: rally serve [flags]

Serves topic pub/sub over WebSocket, and more, on one address:

  /                      a demo page: join a topic, send, see messages
  /ws                    pub/sub for clients (JSON; see docs/PROTOCOL.md)
  POST /publish/{topic}  publish from a backend with one HTTP call
  /echo                  WebSocket echo
  /metrics               Prometheus metrics
  /healthz, /readyz      liveness; readiness (503 once shutdown began)

With no flags it serves http://127.0.0.1:8080/ to this machine only,
without auth. On SIGINT or SIGTERM it closes every WebSocket with 1001
(going away) and exits. Every flag can also be set by the environment
variable shown with it; the command line wins. Prefer the environment for
secrets: command lines are visible to other users of the machine.
`

// list is a flag holding a comma-separated list.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rally serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       server.Config
		origins   list
		routes    list
		logFormat string
		logLevel  slog.Level
	)
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "certificate (PEM) to serve HTTPS and wss:// with; needs --tls-key")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.StringVar(&cfg.TokenSecret, "token-secret", "", "HMAC key (32 bytes or more) of the JWTs /ws and /echo clients must present\nin ?token= or an Authorization: Bearer header (claims: subscribe, publish, exp)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "the Bearer credential POST /publish needs (with a token secret and no key,\nthe publish API is closed)")
	fs.Var(&origins, "origins", "other hosts whose pages may open /ws, comma-separated (\"*.example.com,localhost:*\");\nthe server's own host always may")
	fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "serve a non-loopback address without a token secret: anyone who reaches it\nmay subscribe and publish")
	fs.IntVar(&cfg.MaxConnections, "max-connections", 10000, "open WebSocket connections at most; more get 503 (negative: no limit)")
	fs.Float64Var(&cfg.HandshakeRate, "handshake-rate", 20, "WebSocket handshakes per second per client IP, with as many in a burst;\nmore get 429 (negative: no limit)")
	fs.BoolVar(&cfg.RateLimitLoopback, "rate-limit-loopback", false, "apply --handshake-rate to loopback clients too")
	fs.IntVar(&cfg.MaxSubscriptions, "max-subscriptions", 100, "topics one /ws connection may subscribe to (negative: no limit)")
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", 64<<10, "largest /ws message (larger: closed with 1009) and /publish body (413)")
	fs.IntVar(&cfg.BufferLimit, "buffer-limit", 1<<20, "bytes waiting for one slow client at most; messages past it are dropped\nfor that client and counted")
	fs.DurationVar(&cfg.HeaderReadTimeout, "header-timeout", 10*time.Second, "time a client has to send its request head")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", 30*time.Second, "ping a quiet client this often (negative: never)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 90*time.Second, "close a client silent this long with 1001 (negative: never)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "time close handshakes may take on shutdown")
	fs.StringVar(&cfg.Node, "node", "", "this node's name among the nodes sharing topics (default: random)")
	fs.StringVar(&cfg.NATS.URL, "nats", "", "share topics with other nodes through the NATS server or cluster at URL\n(nats://host:4222, comma-separated for several)")
	fs.StringVar(&cfg.NATS.Embedded, "embedded-nats", "", "start a NATS server in this process, for other nodes' --nats\n(without --nats-user or --nats-token it has no auth: bind it where only\nyour nodes reach it)")
	fs.StringVar(&cfg.NATS.Cluster, "nats-cluster", "", "where the embedded NATS server listens for routes from other embedded servers")
	fs.Var(&routes, "nats-routes", "cluster addresses of other embedded NATS servers to route to")
	protectFlags(fs, &cfg.Protection, &cfg.NATS)
	fs.StringVar(&logFormat, "log-format", "text", "log lines as text or json")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "least level logged: debug, info, warn or error")
	fs.Usage = func() { serveUsage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rally serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := serveEnv(fs); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	cfg.Origins, cfg.NATS.Routes = origins, routes
	opts := &slog.HandlerOptions{Level: logLevel}
	switch logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		fmt.Fprintf(stderr, "rally serve: --log-format is %q, want text or json\n", logFormat)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	setRuntimeMemoryLimit(srv.MemoryBudget().Limit())
	if err := srv.ListenAndServe(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// serveEnv sets each flag the command line left alone from its
// environment variable, if set.
func serveEnv(fs *flag.FlagSet) error {
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
				return fmt.Errorf("rally serve: %s is not a valid --%s: %v", f.env, f.name, errorWithout(err, v))
			}
		}
	}
	return nil
}

// errorWithout is err's text with v taken out.
func errorWithout(err error, v string) string {
	return strings.ReplaceAll(err.Error(), v, "…")
}

// serveUsage prints the flags in groups, each with its environment
// variable and default.
func serveUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, serveIntro)
	for _, g := range serveGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, sf := range g.flags {
			f := fs.Lookup(sf.name)
			head := "  --" + f.Name
			if sf.value != "" {
				head += " " + sf.value
			}
			fmt.Fprintf(w, "%s\n", head)
			for _, line := range strings.Split(f.Usage, "\n") {
				fmt.Fprintf(w, "        %s\n", line)
			}
			tail := "env " + sf.env
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				tail += "; default " + f.DefValue
			}
			fmt.Fprintf(w, "        (%s)\n", tail)
		}
	}
}
