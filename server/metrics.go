package server

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, on a registry of its own
// (so that several servers in one process, as in tests, do not collide).
type metrics struct {
	reg *prometheus.Registry

	// notMessage counts deliveries from other nodes dropped for not
	// being message frames (framedBroker).
	notMessage atomic.Uint64

	connections      *prometheus.GaugeVec   // endpoint
	connectionsTotal *prometheus.CounterVec // endpoint
	subscriptions    prometheus.Gauge
	messagesIn       *prometheus.CounterVec // type
	bytesIn          *prometheus.CounterVec // type
	messagesOut      *prometheus.CounterVec // type
	bytesOut         *prometheus.CounterVec // type
	publishes        *prometheus.CounterVec // source
	deliveries       prometheus.Counter
	drops            *prometheus.CounterVec // reason
	backpressure     prometheus.Counter
	handshakeFails   *prometheus.CounterVec // reason
	refusals         *prometheus.CounterVec // limit
	closeCodes       *prometheus.CounterVec // code
	slowCut          prometheus.Counter
	memoryReturns    *prometheus.CounterVec // after
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.connections = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rally_connections", Help: "Open WebSocket connections, by endpoint (ws, echo).",
	}, []string{"endpoint"})
	m.connectionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_connections_total", Help: "WebSocket connections opened, by endpoint.",
	}, []string{"endpoint"})
	m.subscriptions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rally_subscriptions", Help: "Subscriptions held by /ws connections.",
	})
	m.messagesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_messages_received_total", Help: "Messages received from /ws clients, by type (subscribe, unsubscribe, publish, unknown, invalid).",
	}, []string{"type"})
	m.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_bytes_received_total", Help: "Payload bytes received from /ws clients, by message type.",
	}, []string{"type"})
	m.messagesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_messages_sent_total", Help: "Messages sent to /ws clients, by type (message, ack, error); a delivery to N subscribers counts N.",
	}, []string{"type"})
	m.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_bytes_sent_total", Help: "Payload bytes sent to /ws clients, by message type.",
	}, []string{"type"})
	m.publishes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_publishes_total", Help: "Publishes accepted, by source (ws, http).",
	}, []string{"source"})
	m.deliveries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rally_deliveries_total", Help: "Deliveries to local subscribers that were sent or queued.",
	})
	m.drops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_drops_total", Help: "Messages dropped, by reason (buffer_limit: a slow subscriber's send buffer was full; broker: other nodes did not get a publish; reply: an ack or error frame could not be sent).",
	}, []string{"reason"})
	m.backpressure = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rally_backpressure_total", Help: "Deliveries queued because the subscriber's connection would not take more bytes at once.",
	})
	m.handshakeFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_handshake_failures_total", Help: "Refused or failed WebSocket handshakes, by reason.",
	}, []string{"reason"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_limit_refusals_total", Help: "Requests refused by a limit, by limit (connections, handshake_rate, subscriptions, header_timeout, message_size).",
	}, []string{"limit"})
	m.closeCodes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_close_codes_total", Help: "WebSocket connections ended, by close code (1006: no close frame).",
	}, []string{"code"})
	m.slowCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rally_slow_subscribers_cut_total", Help: "/ws, /chat and Pusher connections cut because their send queue stayed at the buffer limit for --slow-subscriber-timeout, or their peer took no byte for four times it while messages waited.",
	})
	m.memoryReturns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rally_memory_returns_total", Help: "Collections forced to give free memory back to the system (--return-memory), by what came before (connect_wave, disconnect, release, idle; again: the second return after a disconnect or a release).",
	}, []string{"after"})
	m.reg.MustRegister(
		m.slowCut, m.memoryReturns, m.connections, m.connectionsTotal, m.subscriptions, m.messagesIn, m.bytesIn,
		m.messagesOut, m.bytesOut, m.publishes, m.deliveries, m.drops, m.backpressure,
		m.handshakeFails, m.refusals, m.closeCodes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Every refusal and drop series exists from the start at 0, so that a
	// dashboard or an alert sees it before the first one happens.
	for _, after := range []string{"connect_wave", "disconnect", "release", "idle", "again"} {
		m.memoryReturns.WithLabelValues(after)
	}
	for _, limit := range []string{"connections", "handshake_rate", "subscriptions", "message_size", "api_key", "header_timeout"} {
		m.refusals.WithLabelValues(limit)
	}
	for _, reason := range []string{"unauthorized", "origin", "handshake_rate", "connections", "shutting_down", "bad_request", "version", "io"} {
		m.handshakeFails.WithLabelValues(reason)
	}
	for _, reason := range []string{"buffer_limit", "broker", "reply"} {
		m.drops.WithLabelValues(reason)
	}
	return m
}

func (m *metrics) closed(endpoint string, code uint16) {
	m.connections.WithLabelValues(endpoint).Dec()
	m.closeCodes.WithLabelValues(strconv.Itoa(int(code))).Inc()
}

// refused counts a handshake refused by a limit: as a handshake failure
// and as a limit refusal.
func (m *metrics) refused(limit string) {
	m.handshakeFails.WithLabelValues(limit).Inc()
	m.refusals.WithLabelValues(limit).Inc()
}
