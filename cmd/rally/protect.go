package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rallyws/rally/internal/cli"
	"github.com/rallyws/rally/server"
)

// The flags of `rally serve` that bound what clients can make it hold,
// and those of NATS auth; registered by protectFlags, listed in the help
// by serveGroups.
var (
	protectServeFlags = []serveFlag{
		{name: "memory-limit", env: "RALLY_MEMORY_LIMIT", value: "BYTES|off"},
		{name: "max-header-bytes", env: "RALLY_MAX_HEADER_BYTES", value: "BYTES"},
		{name: "max-pending-handshakes", env: "RALLY_MAX_PENDING_HANDSHAKES", value: "N"},
		{name: "echo-max-message-bytes", env: "RALLY_ECHO_MAX_MESSAGE_BYTES", value: "BYTES"},
		{name: "ops-addr", env: "RALLY_OPS_ADDR", value: "HOST:PORT"},
	}
	natsAuthServeFlags = []serveFlag{
		{name: "nats-user", env: "RALLY_NATS_USER", value: "USER"},
		{name: "nats-password", env: "RALLY_NATS_PASSWORD", value: "PASSWORD"},
		{name: "nats-token", env: "RALLY_NATS_TOKEN", value: "TOKEN"},
		{name: "nats-nkey", env: "RALLY_NATS_NKEY", value: "FILE"},
		{name: "nats-creds", env: "RALLY_NATS_CREDS", value: "FILE"},
		{name: "nats-ca", env: "RALLY_NATS_CA", value: "FILE"},
		{name: "nats-cert", env: "RALLY_NATS_CERT", value: "FILE"},
		{name: "nats-key", env: "RALLY_NATS_KEY", value: "FILE"},
		{name: "nats-cluster-user", env: "RALLY_NATS_CLUSTER_USER", value: "USER"},
		{name: "nats-cluster-password", env: "RALLY_NATS_CLUSTER_PASSWORD", value: "PASSWORD"},
		{name: "nats-ready", env: "RALLY_NATS_READY"},
		{name: "cluster-secret", env: "RALLY_CLUSTER_SECRET", value: "SECRET"},
	}
)

// protectFlags registers the flags of Protection and of NATS auth on fs.
func protectFlags(fs *flag.FlagSet, p *server.Protection, n *server.NATSConfig) {
	def := server.DefaultMemoryLimit()
	p.MemoryLimit = def
	fs.Var(&byteSize{v: &p.MemoryLimit, min: 32 << 20, max: max(server.MemoryAvailable(), 4*def), off: true, def: fmt.Sprintf("%.1fGiB (%s)", float64(def)/(1<<30), server.DefaultMemoryLimitRule)}, "memory-limit",
		"memory budget: from 80% of it the clients holding the most are cut (1013);\npast 90% of it new WebSocket handshakes get 503; less a sixteenth (at least\n16 MiB), also the Go runtime's soft limit (unless GOMEMLIMIT is set); at most this machine's memory; \"off\": no\nlimit")
	p.MaxHeaderBytes = server.DefaultMaxHeaderBytes
	fs.Var(&cli.Bytes[int]{P: &p.MaxHeaderBytes, Min: 1 << 10, Max: 1 << 20}, "max-header-bytes", "largest request head; larger get 431")
	p.MaxPendingHandshakes = server.DefaultMaxPendingHandshakes
	fs.Var(&count{v: &p.MaxPendingHandshakes, min: 1, max: 1 << 20}, "max-pending-handshakes", "connections whose request head is still arriving, at most; past it the\noldest of them gets 503")
	p.EchoMaxMessageBytes = server.DefaultEchoMaxMessageBytes
	fs.Var(&cli.Bytes[int]{P: &p.EchoMaxMessageBytes, Min: 1, Max: 1 << 30}, "echo-max-message-bytes", "largest /echo message (larger: closed with 1009); the full conformance\nsuite needs 16MiB")
	fs.BoolVar(&p.ReturnMemory, "return-memory", true, "force garbage collections to give memory back to the system after waves of\nconnections and under memory pressure (each stalls busy goroutines while it\nmarks)")
	fs.StringVar(&p.OpsAddr, "ops-addr", "", "also serve /healthz, /readyz and /metrics here, with file descriptors\nkept in reserve: it answers even when clients took every other one")

	fs.StringVar(&n.User, "nats-user", "", "user name for NATS (and, with --embedded-nats, demanded of its clients)")
	fs.StringVar(&n.Password, "nats-password", "", "password of --nats-user")
	fs.StringVar(&n.Token, "nats-token", "", "token for NATS (and, with --embedded-nats, demanded of its clients)")
	fs.StringVar(&n.NKeySeed, "nats-nkey", "", "file holding the NKey seed to authenticate to NATS with")
	fs.StringVar(&n.Creds, "nats-creds", "", "credentials file (JWT and NKey seed) to authenticate to NATS with")
	fs.StringVar(&n.TLSCA, "nats-ca", "", "CA (PEM) of the NATS server's certificate; with --embedded-nats, of its\nclients' certificates")
	fs.StringVar(&n.TLSCert, "nats-cert", "", "client certificate (PEM) for NATS; with --embedded-nats, the server's own")
	fs.StringVar(&n.TLSKey, "nats-key", "", "private key (PEM) of --nats-cert")
	fs.StringVar(&n.ClusterUser, "nats-cluster-user", "", "user name routes between embedded NATS servers present and demand")
	fs.StringVar(&n.ClusterPassword, "nats-cluster-password", "", "password of --nats-cluster-user")
	fs.BoolVar(&p.ReadyNeedsNATS, "nats-ready", false, "/readyz answers 503 while the connection to NATS is down")
	fs.StringVar(&n.ClusterSecret, "cluster-secret", "", "secret that signs every message between nodes, the same on every node (at\nleast 16 bytes; needed with NATS): a message not signed with it is dropped")
}

// setRuntimeMemoryLimit makes the memory budget, less its headroom
// (runtimeMemoryLimit), the Go runtime's soft limit too, unless GOMEMLIMIT
// says otherwise: the garbage collector then works harder as the process
// nears it, instead of letting garbage grow.
func setRuntimeMemoryLimit(limit int64) {
	if limit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(runtimeMemoryLimit(limit))
}

// runtimeMemoryLimit is the Go runtime's soft limit for a memory budget of
// limit bytes: limit less a sixteenth of it, and at least 16 MiB (at most
// half of it). The runtime's limit counts what the runtime maps, not the
// executable's pages (about 16 MiB of RSS at start) nor its overshoot while
// the collector catches up with garbage (buffers that grew, given back but
// not yet collected): that headroom keeps RSS under limit.
func runtimeMemoryLimit(limit int64) int64 {
	return limit - min(max(limit/16, 16<<20), limit/2)
}

// serveGCPercent is the garbage collector's target (GOGC) of rally serve
// unless the GOGC environment variable sets one: the heap may grow by
// half of what is live before a collection, instead of Go's default of
// all of it. A server holding idle connections has a heap that is mostly
// their state, and every handshake leaves garbage behind (net/http's
// buffers and request, about ten times what the connection keeps): with
// the default the pages of that growth stay resident, and the process
// holds up to twice its connections' memory. Messages allocate nothing
// once connections are open, so collections come with handshakes; each
// marks what is live, and halving the headroom doubles their number.
const serveGCPercent = 50

// setGCPercent sets serveGCPercent, unless GOGC says otherwise.
func setGCPercent() {
	if os.Getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(serveGCPercent)
}

// byteSize is a flag holding a size in bytes between min and max
// (cli.ParseBytes), shown as def until it is set. With off, "off" sets
// -1 (no limit).
type byteSize struct {
	v        *int64
	min, max int64
	off      bool
	def      string
}

func (b *byteSize) String() string {
	if b == nil || b.v == nil {
		return ""
	}
	if b.def != "" {
		return b.def
	}
	return cli.ShowBytes(*b.v)
}

func (b *byteSize) Set(s string) error {
	if b.off && strings.EqualFold(s, "off") {
		*b.v = -1
		return nil
	}
	n, err := cli.ParseBytes(s)
	if err != nil {
		return err
	}
	if n < b.min || n > b.max {
		return fmt.Errorf("%s is out of range: want %s to %s", s, cli.ShowBytes(b.min), cli.ShowBytes(b.max))
	}
	*b.v, b.def = n, ""
	return nil
}

// count is a flag holding a whole number between min and max.
type count struct {
	v        *int
	min, max int
}

func (c *count) String() string {
	if c == nil || c.v == nil {
		return ""
	}
	return strconv.Itoa(*c.v)
}

func (c *count) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	if n < c.min || n > c.max {
		return fmt.Errorf("%d is out of range: want %d to %d", n, c.min, c.max)
	}
	*c.v = n
	return nil
}
