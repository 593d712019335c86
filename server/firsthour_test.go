package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rallyws/rally"
)

func TestTLSFilesThatCannotBeReadAreRefusedByNew(t *testing.T) {
	_, err := New(Config{TLSCert: "/nonexistent.pem", TLSKey: "/nonexistent.key"})
	if err == nil || !strings.HasPrefix(err.Error(), "rally serve: ") || !strings.Contains(err.Error(), "/nonexistent.pem") {
		t.Fatalf("New: %v, want an error with the rally serve prefix naming the file", err)
	}
}

func TestNumbersWithoutAMeaningAreRefused(t *testing.T) {
	for _, cfg := range []Config{
		{MaxMessageBytes: -5},
		{HeaderReadTimeout: -1},
		{ShutdownTimeout: -1},
	} {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("New(%+v): %v, want an error naming the flag", cfg, err)
		}
	}
}

func TestEmbeddedNATSOnABusyPortSaysSoAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(Config{NATS: NATSConfig{Embedded: ln.Addr().String(), ClusterSecret: testClusterSecret}})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("New: %v, want address already in use", err)
	}
}

// logBuffer is a log destination tests can read while the server writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestARefusedOriginIsLoggedAtInfo(t *testing.T) {
	var logs logBuffer
	ts := serve(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if got := handshakeStatus(t, ts.ws+"/ws", http.Header{"Origin": {"https://evil.example"}}); got != 403 {
		t.Fatalf("foreign origin: %d, want 403", got)
	}
	// The log line is written before the 403 is sent.
	if l := logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, "reason=origin") {
		t.Fatalf("log %q, want an info line with reason=origin", l)
	}
}

func TestTheBannerShowsTheAddressGivenAndABrowsableURLForAWildcard(t *testing.T) {
	for _, tc := range []struct{ addr, listening, url string }{
		{"127.0.0.1:0", "listening on 127.0.0.1:", "http://127.0.0.1:"},
		{"0.0.0.0:0", "listening on 0.0.0.0:", "http://localhost:"},
		{"localhost:0", "listening on localhost:", "http://localhost:"},
	} {
		s, err := New(Config{Addr: tc.addr, InsecureNoAuth: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- s.ListenAndServe(ctx, pw); pw.Close() }()
		var banner strings.Builder
		buf := make([]byte, 4096)
		for !strings.Contains(banner.String(), "metrics:") {
			n, err := pr.Read(buf)
			if err != nil {
				t.Fatalf("banner so far %q: %v", banner.String(), err)
			}
			banner.Write(buf[:n])
		}
		cancel()
		go io.Copy(io.Discard, pr)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b := banner.String()
		if !strings.Contains(b, tc.listening) || !strings.Contains(b, "demo:     "+tc.url) || strings.Contains(b, "[::]") || strings.Contains(b, ":0/") {
			t.Errorf("--addr %s: banner\n%s\nwant %q and URLs starting %q with the port bound", tc.addr, b, tc.listening, tc.url)
		}
	}
}

func TestTopicsWithSlashesArePublishedWithoutEscaping(t *testing.T) {
	ts := serve(t, Config{})
	sub := dial(t, ts.ws+"/ws", nil)
	sub.send(`{"type":"subscribe","topic":"user/42/inbox","id":1}`)
	sub.expect(`{"type":"ack","id":1}`)
	status, ans := post(t, ts.http+"/publish/user/42/inbox", "text/plain", "", []byte("d->c <b>&"))
	if status != 200 || !sameJSON(ans, `{"topic":"user/42/inbox","received":1,"dropped":0}`) {
		t.Fatalf("answer %d %s", status, ans)
	}
	// The delivery is the text as it was sent, not HTML-escaped.
	if got, want := sub.next(), `{"type":"message","topic":"user/42/inbox","data":"d->c <b>&"}`; got != want {
		t.Fatalf("delivery %s, want %s", got, want)
	}
}

func TestPublishWithAnotherMethodAnswersAJSONError(t *testing.T) {
	ts := serve(t, Config{})
	resp, err := http.Get(ts.http + "/publish/t")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || resp.Header.Get("Content-Type") != "application/json" ||
		!sameJSON(string(body), `{"code":"method_not_allowed","message":"publish with POST /publish/{topic}"}`) {
		t.Fatalf("GET /publish/t: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

func TestRefusalCountersAreInTheMetricsFromTheStart(t *testing.T) {
	ts := serve(t, Config{})
	for _, series := range []string{
		`rally_limit_refusals_total{limit="connections"}`,
		`rally_limit_refusals_total{limit="handshake_rate"}`,
		`rally_limit_refusals_total{limit="message_size"}`,
		`rally_handshake_failures_total{reason="origin"}`,
		`rally_drops_total{reason="buffer_limit"}`,
	} {
		if got := metric(t, ts.http, series); got != 0 {
			t.Errorf("%s = %v, want 0", series, got)
		}
	}
}

func TestChatRelaysEveryMessageToEveryClientTheSenderIncluded(t *testing.T) {
	ts := serve(t, Config{})
	read := func(name string, c *client, wantType rally.MessageType, want string) {
		t.Helper()
		typ, p, err := c.c.Read(testContext(t))
		if err != nil || typ != wantType || string(p) != want {
			t.Fatalf("%s read %v %q %v, want %v %q", name, typ, p, err, wantType, want)
		}
	}
	// A connection is in the room before the server reads its first
	// message, so each client's first message, once back, proves it in.
	a := dial(t, ts.ws+"/chat", nil)
	a.send("a is here")
	read("a", a, rally.Text, "a is here")
	b := dial(t, ts.ws+"/chat", nil)
	if err := b.c.Write(testContext(t), rally.Binary, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	read("a", a, rally.Binary, "\x01\x02\x03")
	read("b", b, rally.Binary, "\x01\x02\x03")
	a.send("hello")
	read("a", a, rally.Text, "hello")
	read("b", b, rally.Text, "hello")
	if got := metric(t, ts.http, `rally_publishes_total{source="chat"}`); got != 3 {
		t.Errorf(`rally_publishes_total{source="chat"} = %v, want 3`, got)
	}
}
