package server

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

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
}

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
	stop = func() {}
	addr := n.URL
	if n.Embedded != "" {
		e, err := natsbroker.StartEmbedded(n.Embedded, n.Routes, n.Cluster)
		if err != nil {
			return nil, nil, fmt.Errorf("rally serve: embedded NATS: %w", err)
		}
		stop = e.Shutdown
		embedded = e
		if addr == "" {
			addr = e.ClientURL()
		}
	}
	b, err := natsbroker.New(addr, natsbroker.WithName("rally "+cfg.Node))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("rally serve: %w", err)
	}
	m.reg.MustRegister(natsCollector{b})
	cfg.Broker = b
	return stop, embedded, nil
}

// natsCollector exports the broker's counters.
type natsCollector struct{ b *natsbroker.Broker }

var (
	natsMessages  = prometheus.NewDesc("rally_nats_messages_total", "Messages between this node and NATS, by direction (out, in).", []string{"direction"}, nil)
	natsDrops     = prometheus.NewDesc("rally_nats_drops_total", "Messages lost between nodes, by reason (lost: never arrived from another node; publish_failed: NATS refused or was unreachable; too_large: over max_payload; malformed).", []string{"reason"}, nil)
	natsConnected = prometheus.NewDesc("rally_nats_connected", "1 while the connection to NATS is up.", nil, nil)
	natsEvents    = prometheus.NewDesc("rally_nats_connection_events_total", "Losses and recoveries of the connection to NATS, by event (disconnect, reconnect).", []string{"event"}, nil)
	natsTopics    = prometheus.NewDesc("rally_nats_topics", "Topics this node subscribes to on NATS (those with local subscribers).", nil, nil)
)

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{natsMessages, natsDrops, natsConnected, natsEvents, natsTopics} {
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
	counter(natsEvents, s.Disconnects, "disconnect")
	counter(natsEvents, s.Reconnects, "reconnect")
	up := 0.0
	if s.Connected {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(natsConnected, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(natsTopics, prometheus.GaugeValue, float64(s.Topics))
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
// ReadyNeedsNATS set, while its connection to NATS is down.
func (s *Server) natsReady() error {
	if !s.cfg.ReadyNeedsNATS {
		return nil
	}
	if b, ok := s.cfg.Broker.(*natsbroker.Broker); ok && !b.Stats().Connected {
		return errors.New("not connected to NATS")
	}
	return nil
}
