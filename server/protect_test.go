package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

const upgradeHead = "GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// rawStatus sends head (and whatever the server reads of it) on a new
// TCP connection and returns the status line of the answer.
func rawStatus(t *testing.T, addr, head string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	// The server may answer and close before reading all of a large head.
	go io.WriteString(c, head)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the status line: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestRequestHeadOfOneMiBGets431Not101(t *testing.T) {
	s := serve(t, Config{})
	addr := strings.TrimPrefix(s.http, "http://")
	if got := rawStatus(t, addr, upgradeHead+"\r\n"); got != "HTTP/1.1 101 Switching Protocols" {
		t.Fatalf("a small upgrade request: %q", got)
	}
	big := upgradeHead + "X-Pad: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"
	if got := rawStatus(t, addr, big); got != "HTTP/1.1 431 Request Header Fields Too Large" {
		t.Fatalf("a 1 MiB header: %q, want 431", got)
	}
}

func TestRequestHeadLimitIsConfigurableAndNetHTTPAddsItsSlack(t *testing.T) {
	// net/http reads up to MaxHeaderBytes plus 4096 bytes of slack before
	// answering 431: a head of 8 KiB passes a 4 KiB limit, one of 9 KiB
	// does not.
	s := serve(t, Config{Protection: Protection{MaxHeaderBytes: 4 << 10}})
	addr := strings.TrimPrefix(s.http, "http://")
	pad := func(n int) string {
		return upgradeHead + "X-Pad: " + strings.Repeat("a", n-len(upgradeHead)-11) + "\r\n\r\n"
	}
	if got := rawStatus(t, addr, pad(8<<10)); got != "HTTP/1.1 101 Switching Protocols" {
		t.Errorf("an 8 KiB head under a 4 KiB limit: %q, want 101", got)
	}
	if got := rawStatus(t, addr, pad(9<<10)); got != "HTTP/1.1 431 Request Header Fields Too Large" {
		t.Errorf("a 9 KiB head under a 4 KiB limit: %q, want 431", got)
	}
}

// slowHead opens a connection and sends an unfinished request head.
func slowHead(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never finished
	return c
}

func TestPastThePendingHeadLimitTheOldestHeadIsCutWith503(t *testing.T) {
	s := serve(t, Config{Protection: Protection{MaxPendingHandshakes: 2, OpsAddr: "127.0.0.1:0"}})
	addr := strings.TrimPrefix(s.http, "http://")
	oldest := slowHead(t, addr)
	slowHead(t, addr)
	// A client that sends its head at once is served; the oldest slow
	// head gives way (connections are accepted in arrival order).
	if got := rawStatus(t, addr, upgradeHead+"\r\n"); got != "HTTP/1.1 101 Switching Protocols" {
		t.Fatalf("a fresh client with two heads pending: %q, want 101", got)
	}
	b, _ := io.ReadAll(oldest)
	if !strings.HasPrefix(string(b), "HTTP/1.1 503 Service Unavailable") {
		t.Errorf("the oldest slow head got %q, want a 503 and the end", b)
	}
	if v := metric(t, "http://"+s.OpsAddr(), `rally_limit_refusals_total{limit="pending_handshakes"}`); v != 1 {
		t.Errorf("refusals counted: %v, want 1", v)
	}
}

func TestHandshakesGet503UnderMemoryPressureAndAreCounted(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 30)
	s := serve(t, Config{Protection: Protection{MemoryBudget: budget}})
	d := dial(t, s.ws+"/echo", nil)
	// Past 90% of the budget (request heads may take it to the limit).
	if !budget.Reserve(rally.MemoryHandshakes, 950<<20) {
		t.Fatal("reserve refused")
	}
	resp, err := http.Get(s.http + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz under memory pressure: %v %v", resp, err)
	}
	resp.Body.Close()
	_, resp, err = rally.Dial(testContext(t), s.ws+"/ws", nil)
	var he *rally.HandshakeError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable {
		t.Fatalf("handshake at 93%% of the budget: %v, want 503", err)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if v := metric(t, s.http, `rally_limit_refusals_total{limit="memory"}`); v != 1 {
		t.Errorf(`rally_limit_refusals_total{limit="memory"} = %v, want 1`, v)
	}
	if v := metric(t, s.http, `rally_memory_budget_used_bytes{category="handshakes"}`); v < 950<<20 {
		t.Errorf("handshake bytes in metrics = %v", v)
	}
	// Open connections go on.
	d.send(`"still here"`)
	d.expect(`"still here"`)
	budget.Release(rally.MemoryHandshakes, 950<<20)
	dial(t, s.ws+"/echo", nil)
}

func TestEchoMessageLimitHasItsOwnSetting(t *testing.T) {
	s := serve(t, Config{Protection: Protection{EchoMaxMessageBytes: 1000}})
	c := dial(t, s.ws+"/echo", nil)
	c.send(strings.Repeat("a", 1000))
	if got := c.next(); len(got) != 1000 {
		t.Fatalf("echo of exactly the limit: %d bytes", len(got))
	}
	c.send(strings.Repeat("a", 1001))
	if code := c.closed(); code != rally.CloseTooBig {
		t.Errorf("over the /echo limit: closed with %d, want 1009", code)
	}
}

func TestEchoAcceptsOneMiBByDefaultAndNotMore(t *testing.T) {
	s := serve(t, Config{})
	c := dial(t, s.ws+"/echo", nil)
	ctx := testContext(t)
	if err := c.c.Write(ctx, rally.Binary, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.c.Read(ctx); err != nil || len(p) != 1<<20 {
		t.Fatalf("echo of 1 MiB: %d bytes, %v", len(p), err)
	}
	c.c.Write(ctx, rally.Binary, make([]byte, 1<<20+1))
	if code := c.closed(); code != rally.CloseTooBig {
		t.Errorf("1 MiB + 1 on /echo: closed with %d, want 1009", code)
	}
}

func TestProtectionRefusesANegativeHeadLimit(t *testing.T) {
	_, err := New(Config{Protection: Protection{MaxHeaderBytes: -1}})
	if err == nil || !strings.Contains(err.Error(), "max header bytes") {
		t.Errorf("New with MaxHeaderBytes -1: %v", err)
	}
}

func TestPendingHeadsAreChargedToTheBudgetAndGivenBack(t *testing.T) {
	budget := rally.NewMemoryBudget(0)
	s := serve(t, Config{Protection: Protection{MemoryBudget: budget, MaxPendingHandshakes: 1, OpsAddr: "127.0.0.1:0"}})
	addr := strings.TrimPrefix(s.http, "http://")
	ops := "http://" + s.OpsAddr()
	first := slowHead(t, addr)
	second := slowHead(t, addr)
	// The first one cut shows that the second one's head is counted.
	if b, _ := io.ReadAll(first); !strings.HasPrefix(string(b), "HTTP/1.1 503") {
		t.Fatalf("first slow head got %q, want 503", b)
	}
	want := float64(DefaultMaxHeaderBytes + headBufferBytes)
	if v := metric(t, ops, `rally_memory_budget_used_bytes{category="handshakes"}`); v != want {
		t.Errorf("handshakes charged with one head pending = %v, want %v", v, want)
	}
	io.WriteString(second, "\r\n")
	if line, err := bufio.NewReader(second).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("finished head: %q, %v", line, err)
	}
	if v := metric(t, ops, `rally_memory_budget_used_bytes{category="handshakes"}`); v != 0 {
		t.Errorf("handshakes charged once the head is done = %v, want 0", v)
	}
}

func TestPressureLogIsWrittenOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	l := newEveryLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for i := range 5 {
		l.warn("refused", "i", i)
	}
	if n := strings.Count(buf.String(), "refused"); n != 1 {
		t.Errorf("%d lines for 5 refusals within the interval:\n%s", n, buf.String())
	}
}
