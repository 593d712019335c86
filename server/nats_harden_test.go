package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// logLines is a slog.Handler that hands each message to a channel.
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default:
	}
	return nil
}
func (l logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logLines) WithGroup(string) slog.Handler      { return l }

// await reads log lines until one contains s.
func (l logLines) await(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-l:
			if strings.Contains(m, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %q", s)
		}
	}
}

func status(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

func TestEmbeddedNATSWithATokenRefusesNodesWithoutIt(t *testing.T) {
	a := serve(t, Config{Node: "a", NATS: NATSConfig{Embedded: "127.0.0.1:0", Token: "n4ts-token"}})
	url := a.embeddedNATS.ClientURL()
	_, err := New(Config{Node: "b", NATS: NATSConfig{URL: url, ClusterSecret: testClusterSecret}})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a node without the token: %v, want an authorization error", err)
	}
	if strings.Contains(err.Error(), "n4ts-token") {
		t.Fatalf("the error shows the token: %v", err)
	}
	b := serve(t, Config{Node: "b", NATS: NATSConfig{URL: url, Token: "n4ts-token"}})
	onB := dial(t, b.ws+"/ws", nil)
	onB.send(`{"type":"subscribe","topic":"t","id":1}`)
	onB.expect(`{"type":"ack","id":1}`)
	pub := dial(t, a.ws+"/ws", nil)
	awaitRoute(t, pub, onB, "t")
}

func TestNATSCredentialsThatDoNotGoTogetherAreRefused(t *testing.T) {
	for name, n := range map[string]NATSConfig{
		"user and token":             {URL: "nats://127.0.0.1:1", User: "u", Password: "p", Token: "t"},
		"user without password":      {URL: "nats://127.0.0.1:1", User: "u"},
		"cert without key":           {URL: "nats://127.0.0.1:1", TLSCert: "c.pem"},
		"cluster user without port":  {Embedded: "127.0.0.1:0", ClusterUser: "u", ClusterPassword: "p"},
		"embedded with a creds file": {Embedded: "127.0.0.1:0", Creds: "x.creds"},
	} {
		if _, err := New(Config{NATS: n}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestALostRouteShowsInTheLogMetricsAndReadiness(t *testing.T) {
	logs := make(logLines, 256)
	auth := func(n NATSConfig) NATSConfig {
		n.ClusterUser, n.ClusterPassword = "route", "r0ute-secret"
		return n
	}
	a := serve(t, Config{Node: "a", NATS: auth(NATSConfig{Embedded: "127.0.0.1:0", Cluster: "127.0.0.1:0"})})
	b := serve(t, Config{Node: "b", Logger: slog.New(logs),
		Protection: Protection{ReadyNeedsNATS: true},
		NATS:       auth(NATSConfig{Embedded: "127.0.0.1:0", Cluster: "127.0.0.1:0", Routes: []string{a.embeddedNATS.ClusterURL()}})})
	logs.await(t, "route up")
	if code, body := status(t, b.http+"/readyz"); code != 200 {
		t.Fatalf("/readyz with the route up: %d %s", code, body)
	}
	if v := metric(t, b.http, "rally_nats_routes"); v != 1 {
		t.Errorf("rally_nats_routes = %v, want 1", v)
	}
	a.stop()
	logs.await(t, "lost a route")
	if code, body := status(t, b.http+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no route") {
		t.Errorf("/readyz with the route lost: %d %q, want 503 saying no route", code, body)
	}
	if v := metric(t, b.http, `rally_nats_connection_events_total{event="route_lost"}`); v != 1 {
		t.Errorf("route_lost events = %v, want 1", v)
	}
	if v := metric(t, b.http, "rally_nats_routes"); v != 0 {
		t.Errorf("rally_nats_routes = %v, want 0", v)
	}
}
