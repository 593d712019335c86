package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
	"github.com/rallyws/rally/pubsub/natsbroker"
)

// NATSConfig joins the server to other rally nodes through NATS: a
// publish on any node reaches the subscribers of every node.
type NATSConfig struct {
	// URL is the NATS server or cluster to connect to (nats://host:port,
	// comma-separated for several). With Embedded set and URL empty, the
	// node connects to its own embedded server.
	URL string
	// Embedded, HOST:PORT, starts a NATS server inside this process that
	// other nodes can point their URL at.
	Embedded string
	// Cluster, HOST:PORT, is where the embedded server listens for routes
	// from other embedded servers; Routes are their cluster addresses.
	// Together they join several embedded servers into one NATS cluster.
	Cluster string
	Routes  []string

	// Credentials for NATS, at most one kind: User and Password, Token,
	// NKeySeed (a file holding an NKey seed) or Creds (a .creds file: JWT
	// and NKey seed, as nsc writes it). With Embedded set, User and
	// Password or Token are also what the embedded server demands of its
	// clients (this node and the others).
	User, Password string
	Token          string
	NKeySeed       string
	Creds          string
	// TLSCA is a PEM file of the CA that signed the NATS server's
	// certificate (the system's roots otherwise, when the URL is tls://
	// or the server asks for TLS). TLSCert and TLSKey are a client
	// certificate for servers that verify clients. With Embedded set,
	// TLSCert and TLSKey are the embedded server's certificate instead,
	// and TLSCA the CA its clients' certificates are verified with.
	TLSCA, TLSCert, TLSKey string
	// ClusterUser and ClusterPassword, with Cluster, are what the embedded
	// server demands of routes from other embedded servers, and what it
	// presents on its own routes.
	ClusterUser, ClusterPassword string

	// ClusterSecret signs every message between nodes (HMAC-SHA256 over
	// subject and message): a node drops, and counts, what was not
	// signed with it, so that a client of NATS cannot speak for a node.
	// Every node needs the same one, at least 16 bytes; NATS refuses to
	// start without it.
	ClusterSecret string
}

// minClusterSecret is the shortest cluster secret accepted, in bytes.
const minClusterSecret = 16

func (n *NATSConfig) enabled() bool { return n.URL != "" || n.Embedded != "" }

// startNATS starts what cfg.NATS asks for and sets cfg.Broker. It returns
// what to run at shutdown, after the hub has let go of the broker, and the
// embedded server if it started one.
func startNATS(cfg *Config, m *metrics) (stop func(), embedded *natsbroker.Embedded, err error) {
	n := cfg.NATS
	if n.Embedded == "" && (n.Cluster != "" || len(n.Routes) > 0) {
		return nil, nil, errors.New("rally serve: --nats-cluster and --nats-routes need --embedded-nats")
	}
	if !n.enabled() {
		return func() {}, nil, nil
	}
	if cfg.Broker != nil {
		return nil, nil, errors.New("rally serve: both a broker and NATS are configured")
	}
	opts, err := n.clientOptions()
	if err != nil {
		return nil, nil, err
	}
	if err := n.checkTrust(); err != nil {
		return nil, nil, err
	}
	stop = func() {}
	addr := n.URL
	if n.Embedded != "" {
		if err := portFree(n.Embedded, n.Cluster); err != nil {
			return nil, nil, fmt.Errorf("rally serve: embedded NATS: %w", err)
		}
		eopts := []natsbroker.EmbeddedOption{
			natsbroker.WithClientAuth(n.User, n.Password, n.Token),
			natsbroker.WithClusterAuth(n.ClusterUser, n.ClusterPassword),
		}
		if len(cfg.History.Topics) > 0 {
			eopts = append(eopts, natsbroker.WithJetStream(cfg.History.storeDir(n.Embedded), "rally-"+cfg.Node))
		}
		e, err := natsbroker.StartEmbedded(n.Embedded, n.Routes, n.Cluster, eopts...)
		if err != nil {
			return nil, nil, fmt.Errorf("rally serve: embedded NATS: %w", err)
		}
		stop = e.Shutdown
		embedded = e
		if addr == "" {
			addr = e.ClientURL()
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts = append(opts,
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Warn("NATS: reconnected", "server", redactURL(c.ConnectedUrl()))
		}))
	b, err := natsbroker.New(addr, natsbroker.WithName("rally "+cfg.Node), natsbroker.WithNATSOptions(opts...),
		natsbroker.WithClusterSecret([]byte(n.ClusterSecret)))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("rally serve: %w", err)
	}
	cfg.Broker = b
	var w *routeWatch
	if embedded != nil && len(n.Routes) > 0 {
		w = &routeWatch{e: embedded, log: log, done: make(chan struct{}), stopped: make(chan struct{})}
		go w.run(time.Second)
		shutdown := stop
		stop = func() {
			close(w.done)
			<-w.stopped
			shutdown()
		}
	}
	m.reg.MustRegister(natsCollector{b: b, w: w, notMessage: &m.notMessage})
	return stop, embedded, nil
}

// clientOptions are the NATS client's options for n's credentials and
// TLS, or an error naming what does not go together.
func (n *NATSConfig) clientOptions() ([]nats.Option, error) {
	kinds := 0
	for _, set := range []bool{n.User != "" || n.Password != "", n.Token != "", n.NKeySeed != "", n.Creds != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, errors.New("rally serve: give NATS one kind of credentials: --nats-user and --nats-password, --nats-token, --nats-nkey or --nats-creds")
	case (n.User == "") != (n.Password == ""):
		return nil, errors.New("rally serve: --nats-user and --nats-password go together")
	case (n.TLSCert == "") != (n.TLSKey == ""):
		return nil, errors.New("rally serve: --nats-cert and --nats-key go together")
	case (n.ClusterUser == "") != (n.ClusterPassword == ""):
		return nil, errors.New("rally serve: --nats-cluster-user and --nats-cluster-password go together")
	case n.ClusterUser != "" && n.Cluster == "":
		return nil, errors.New("rally serve: --nats-cluster-user needs --nats-cluster")
	case n.Embedded != "" && (n.NKeySeed != "" || n.Creds != "" || n.TLSCA != "" || n.TLSCert != ""):
		return nil, errors.New("rally serve: the embedded NATS server takes --nats-user and --nats-password or --nats-token; NKeys, creds files and TLS need a NATS server of your own (--nats)")
	}
	var opts []nats.Option
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.Creds != "":
		opts = append(opts, nats.UserCredentials(n.Creds))
	case n.NKeySeed != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeySeed)
		if err != nil {
			return nil, fmt.Errorf("rally serve: --nats-nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if n.TLSCA != "" {
		opts = append(opts, nats.RootCAs(n.TLSCA))
	}
	if n.TLSCert != "" {
		opts = append(opts, nats.ClientCert(n.TLSCert, n.TLSKey))
	}
	return opts, nil
}

// checkTrust refuses a NATS setup in which a stranger could speak for a
// node: no cluster secret, or an embedded server that listens beyond
// loopback without demanding credentials (of clients, or of routes).
func (n *NATSConfig) checkTrust() error {
	switch {
	case n.ClusterSecret == "":
		return errors.New("rally serve: NATS needs a cluster secret, the same on every node, to sign the messages between nodes: give --cluster-secret or RALLY_CLUSTER_SECRET (at least 16 bytes; for instance the output of `openssl rand -hex 32`)")
	case len(n.ClusterSecret) < minClusterSecret:
		return fmt.Errorf("rally serve: the cluster secret is %d bytes long, give at least %d (for instance the output of `openssl rand -hex 32`)", len(n.ClusterSecret), minClusterSecret)
	case n.Embedded != "" && !loopback(n.Embedded) && n.User == "" && n.Token == "":
		return fmt.Errorf("rally serve: --embedded-nats %s serves beyond loopback without authentication: give --nats-token (or --nats-user and --nats-password), and the same to every node that connects to it", n.Embedded)
	case n.Cluster != "" && !loopback(n.Cluster) && n.ClusterUser == "":
		return fmt.Errorf("rally serve: --nats-cluster %s takes routes from beyond loopback without authentication: give --nats-cluster-user and --nats-cluster-password, the same on every embedded server", n.Cluster)
	}
	return nil
}

// loopback reports whether addr, HOST:PORT, listens on loopback only: an
// empty host or a wildcard address listens everywhere, a name other than
// localhost may resolve anywhere.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// routeWatch polls the embedded server's routes and logs each loss and
// recovery (NATS offers no event for them).
type routeWatch struct {
	e             *natsbroker.Embedded
	log           *slog.Logger
	up            atomic.Int64
	lost, regains atomic.Uint64
	done, stopped chan struct{}
}

func (w *routeWatch) run(every time.Duration) {
	defer close(w.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		now, before := int64(w.e.Routes()), w.up.Load()
		if now == before {
			continue
		}
		w.up.Store(now)
		switch {
		case now < before:
			w.lost.Add(uint64(before - now))
			w.log.Warn("NATS: lost a route to another server of the cluster; it will be retried", "routes", now)
		default:
			w.regains.Add(uint64(now - before))
			w.log.Info("NATS: route up", "routes", now)
		}
	}
}

// natsCollector exports the broker's counters and the embedded server's
// routes.
type natsCollector struct {
	b *natsbroker.Broker
	w *routeWatch // nil without routes to watch
	// notMessage counts what framedReceiver dropped.
	notMessage *atomic.Uint64
}

var (
	natsMessages  = prometheus.NewDesc("rally_nats_messages_total", "Messages between this node and NATS, by direction (out, in).", []string{"direction"}, nil)
	natsDrops     = prometheus.NewDesc("rally_nats_drops_total", "Messages lost between nodes, by reason (lost: never arrived from another node; publish_failed: NATS refused or was unreachable; too_large: over max_payload; malformed: a header not sane; invalid_text: text not valid UTF-8; forged: not signed with the cluster secret, or a replay; not_message: not a message frame of its topic).", []string{"reason"}, nil)
	natsConnected = prometheus.NewDesc("rally_nats_connected", "1 while the connection to NATS is up.", nil, nil)
	natsEvents    = prometheus.NewDesc("rally_nats_connection_events_total", "Losses and recoveries of the connection to NATS, by event (disconnect, reconnect), and of the embedded server's routes to the others (route_lost, route_up).", []string{"event"}, nil)
	natsRoutes    = prometheus.NewDesc("rally_nats_routes", "Other servers of the NATS cluster the embedded server has a route to now.", nil, nil)
	natsTopics    = prometheus.NewDesc("rally_nats_topics", "Topics this node subscribes to on NATS (those with local subscribers).", nil, nil)
)

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{natsMessages, natsDrops, natsConnected, natsEvents, natsTopics, natsRoutes} {
		ch <- d
	}
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.Stats()
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	counter(natsMessages, s.Published, "out")
	counter(natsMessages, s.Received, "in")
	counter(natsDrops, s.Lost, "lost")
	counter(natsDrops, s.PublishFailed, "publish_failed")
	counter(natsDrops, s.TooLarge, "too_large")
	counter(natsDrops, s.Malformed, "malformed")
	counter(natsDrops, s.InvalidText, "invalid_text")
	counter(natsDrops, s.Forged, "forged")
	counter(natsDrops, c.notMessage.Load(), "not_message")
	counter(natsEvents, s.Disconnects, "disconnect")
	counter(natsEvents, s.Reconnects, "reconnect")
	up := 0.0
	if s.Connected {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(natsConnected, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(natsTopics, prometheus.GaugeValue, float64(s.Topics))
	if w := c.w; w != nil {
		ch <- prometheus.MustNewConstMetric(natsRoutes, prometheus.GaugeValue, float64(w.e.Routes()))
		counter(natsEvents, w.lost.Load(), "route_lost")
		counter(natsEvents, w.regains.Load(), "route_up")
	}
}

// redactURL hides the credentials of NATS URLs (nats://user:pass@host).
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// natsReady returns why the node is not ready as far as NATS goes: with
// ReadyNeedsNATS set, while its connection to NATS is down, or its
// embedded server has routes configured and none up.
func (s *Server) natsReady() error {
	if !s.cfg.ReadyNeedsNATS {
		return nil
	}
	if b, ok := s.cfg.Broker.(*natsbroker.Broker); ok && !b.Stats().Connected {
		return errors.New("not connected to NATS")
	}
	if e := s.embeddedNATS; e != nil && len(s.cfg.NATS.Routes) > 0 && e.Routes() == 0 {
		return errors.New("no route to the other NATS servers")
	}
	return nil
}

// portFree says at once when an address the embedded NATS server is to
// listen on is taken, which the server itself would only show by never
// becoming ready.
func portFree(addrs ...string) error {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		ln.Close()
	}
	return nil
}

// framedBroker is a broker whose deliveries from other nodes reach the
// hub only if they are what a node publishes: a message frame of their
// own topic (or, on /chat's topic, anything /chat relays). Whatever else
// is dropped and counted in dropped: no message from NATS reaches a
// client as a frame of its own making.
type framedBroker struct {
	pubsub.Broker
	dropped *atomic.Uint64
}

func (f framedBroker) Attach(node string, r pubsub.Receiver) error {
	return f.Broker.Attach(node, framedReceiver{Receiver: r, dropped: f.dropped})
}

type framedReceiver struct {
	pubsub.Receiver
	dropped *atomic.Uint64
}

func (r framedReceiver) Deliver(m pubsub.Message) {
	if m.Topic != chatTopic && !(m.Type == rally.Text && (isMessageFrame(m.Topic, m.Payload) || isPusherFrame(m.Topic, m.Payload))) {
		r.dropped.Add(1)
		r.Error(fmt.Errorf("dropped a delivery from node %q on topic %q: not a message frame of its topic", m.Node, m.Topic))
		return
	}
	r.Receiver.Deliver(m)
}

// isMessageFrame reports whether p is the protocol's message frame for
// topic, as appendEnvelopeStart and appendEnvelopeEnd make it: the head,
// one JSON value as data (a string when base64), the end.
func isMessageFrame(topic string, p []byte) bool {
	rest, ok := bytes.CutPrefix(p, []byte(envelopeHead))
	if !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(topic)); !ok {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(envelopeData)); !ok {
		return false
	}
	data, ok := bytes.CutSuffix(rest, []byte("}"))
	if !ok {
		return false
	}
	if d, b64 := bytes.CutSuffix(data, []byte(envelopeBase64)); b64 && len(d) > 0 && d[0] == '"' && json.Valid(d) {
		return true
	}
	return json.Valid(data)
}

// afterInterest calls f, which tells a client it is subscribed, once the
// NATS server knows of every subscription this node made for its clients
// until now (natsbroker.Broker.AfterInterest): at once unless one is new
// and unconfirmed, else after one round trip to NATS, on another
// goroutine. Without it a client on this node told it was subscribed
// could miss what another node publishes right after. Without NATS f runs
// at once.
func (s *Server) afterInterest(f func()) {
	if b, ok := s.cfg.Broker.(*natsbroker.Broker); ok {
		b.AfterInterest(f)
		return
	}
	f()
}
