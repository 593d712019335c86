package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rallyws/rally/loadgen"
)

// run runs cfg with short windows and checks that Run left no goroutine
// of its own behind.
func run(t *testing.T, cfg loadgen.Config) *loadgen.Result {
	t.Helper()
	if cfg.Duration == 0 {
		cfg.Duration = 300 * time.Millisecond
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = 50 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkNoLoadgenGoroutines(t)
	return res
}

// checkNoLoadgenGoroutines fails if a goroutine of Run outlived it. A
// goroutine that has signalled its end may still be on its way out, so the
// check yields the processor a bounded number of times before failing.
func checkNoLoadgenGoroutines(t *testing.T) {
	t.Helper()
	var left string
	for range 10000 {
		if left = loadgenGoroutine(); left == "" {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("goroutine left running after Run returned:\n%s", left)
}

func loadgenGoroutine() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "loadgen.(*run)") || strings.Contains(g, "loadgen.(*sender)") || strings.Contains(g, "loadgen.Run") {
			return g
		}
	}
	return ""
}

func TestEchoCountsRepliesOfACorrectServerWithoutErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reply    func(*testServer, *serverConn, byte, []byte)
		size     int
		text     bool
		inflight int
	}{
		{"16 B text", echoReply, 16, true, 1},
		{"1000 B text, 8 in flight", echoReply, 1000, true, 8},
		{"70000 B binary (64-bit length)", echoReply, 70000, false, 2},
		{"fragmented replies with pings between fragments", fragmentedEchoReply, 300, false, 4},
		{"1 B binary", echoReply, 1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.reply)
			res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 3, Size: tc.size, Text: tc.text, InFlight: tc.inflight})
			if res.Errors != 0 {
				t.Fatalf("errors %d: %v", res.Errors, res.ErrorSamples)
			}
			if res.Messages == 0 || res.Rate <= 0 {
				t.Fatalf("no replies counted: %+v", res)
			}
			if res.PayloadBytes != res.Messages*int64(tc.size) {
				t.Errorf("payload bytes %d, want %d replies x %d", res.PayloadBytes, res.Messages, tc.size)
			}
			if res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.Latency.Max < res.Latency.P99 {
				t.Errorf("latency percentiles out of order: %+v", res.Latency)
			}
		})
	}
}

func TestEchoReportsCorruptedRepliesAsErrorsNotMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(*testServer, *serverConn, byte, []byte)
		want  string
	}{
		{"one byte changed", flippedByteReply, "reply bytes differ"},
		{"binary instead of text", wrongTypeReply, "reply is a binary message, want text"},
		{"one byte short", shortReply, "reply has 63 bytes, want 64"},
		{"masked by the server", maskedReply, "masked frame from the server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.reply)
			res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 64, Text: true})
			if res.Errors == 0 {
				t.Fatalf("no error counted for corrupted replies: %+v", res)
			}
			if !containsAny(res.ErrorSamples, tc.want) {
				t.Errorf("error samples %q lack %q", res.ErrorSamples, tc.want)
			}
			if tc.name != "one byte changed" && res.Messages != 0 {
				t.Errorf("%d corrupted replies counted as messages", res.Messages)
			}
		})
	}
}

func TestEchoComparesTheBytesOfOneReplyInSampleEvery(t *testing.T) {
	s := startServer(t, flippedByteReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 1, Size: 32, Warmup: -1})
	seen := res.Messages + res.Errors
	if res.Errors*loadgen.SampleEvery < seen-loadgen.SampleEvery || res.Errors*loadgen.SampleEvery > seen+loadgen.SampleEvery {
		t.Errorf("%d errors in %d replies, want one in %d", res.Errors, seen, loadgen.SampleEvery)
	}
}

func TestThroughputChecksTheMaskedRepliesOfAVerbatimEchoServer(t *testing.T) {
	url := startVerbatimServer(t)
	res := run(t, loadgen.Config{Scenario: loadgen.Throughput, URL: url, Size: 256 << 10, InFlight: 2, VerbatimEcho: true})
	if res.Errors != 0 || res.Messages == 0 || res.MiBPerSecond <= 0 {
		t.Fatalf("want replies without errors, got %d replies, %d errors %v", res.Messages, res.Errors, res.ErrorSamples)
	}
	if res.Conns != 1 {
		t.Errorf("throughput used %d connections, want 1", res.Conns)
	}
}

func TestEchoRunsOverTLSWithAnUnverifiedCertificateWhenAsked(t *testing.T) {
	s := startTLSServer(t, echoReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 200, InsecureTLS: true})
	if res.Errors != 0 || res.Messages == 0 {
		t.Fatalf("got %d replies, %d errors %v", res.Messages, res.Errors, res.ErrorSamples)
	}
	_, err := loadgen.Run(context.Background(), loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 1, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("got %v, want the self-signed certificate refused", err)
	}
}

func TestChatCountsEveryDeliveryToEveryClient(t *testing.T) {
	s := startServer(t, chatReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 4, Size: 100, Text: true, InFlight: 2})
	if res.Errors != 0 {
		t.Fatalf("errors %d: %v", res.Errors, res.ErrorSamples)
	}
	if res.Messages == 0 || res.Unit != "deliveries" {
		t.Fatalf("no deliveries counted: %+v", res)
	}
}

func TestChatReportsAServerThatOnlyEchoesToTheSender(t *testing.T) {
	s := startServer(t, echoReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 3, Size: 16})
	if res.Errors == 0 || !containsAny(res.ErrorSamples, "no round completed") {
		t.Fatalf("want the incomplete rounds reported, got %d errors %v", res.Errors, res.ErrorSamples)
	}
}

func TestConnectCountsOpeningHandshakesAndClosesEachConnection(t *testing.T) {
	s := startServer(t, echoReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Connect, URL: s.url("/"), Conns: 4})
	if res.Errors != 0 || res.Messages == 0 || res.Unit != "handshakes" {
		t.Fatalf("got %d handshakes, %d errors %v", res.Messages, res.Errors, res.ErrorSamples)
	}
}

func TestIdleHoldsConnectionsAnswersPingsAndReadsServerMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc on this system")
	}
	s := startServer(t, echoReply)
	s.onOpen = func(c *serverConn) { c.write(serverFrame(0x9, []byte("ping"), true)) }
	res := run(t, loadgen.Config{Scenario: loadgen.Idle, URL: s.url("/"), Conns: 20, ServerPID: os.Getpid()})
	for range 20 {
		if p := <-s.pongs; string(p) != "ping" {
			t.Fatalf("pong carries %q, want the ping's data", p)
		}
	}
	if res.Errors != 0 || res.Idle == nil || res.Idle.Held != 20 {
		t.Fatalf("want 20 connections held without errors, got %+v (%v)", res.Idle, res.ErrorSamples)
	}
	if res.Server == nil || res.Server.RSSBytes <= 0 || res.Idle.RSSAfterBytes <= 0 {
		t.Errorf("server memory not read: %+v %+v", res.Server, res.Idle)
	}
}

func TestRunRefusesAServerWithAWrongAcceptValue(t *testing.T) {
	s := startServer(t, echoReply)
	s.accept = "dGhlIHNhbXBsZSBub25jZQ=="
	_, err := loadgen.Run(context.Background(), loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 1, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "Sec-WebSocket-Accept does not match") {
		t.Fatalf("got %v, want a handshake error about the accept value", err)
	}
}

func TestResultHidesCredentialsOfTheURLButSendsThemAsBasicAuth(t *testing.T) {
	s := startServer(t, echoReply)
	u := strings.Replace(s.url("/echo?token=s3cret"), "ws://", "ws://user:hunter2@", 1)
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: u, Conns: 1})
	if strings.Contains(res.URL, "hunter2") || strings.Contains(res.URL, "s3cret") {
		t.Errorf("result URL %q shows a secret", res.URL)
	}
	var sum bytes.Buffer
	res.WriteSummary(&sum)
	if strings.Contains(sum.String(), "hunter2") || strings.Contains(sum.String(), "s3cret") {
		t.Errorf("summary shows a secret:\n%s", sum.String())
	}
	if got := s.authz[0]; got != "Basic dXNlcjpodW50ZXIy" {
		t.Errorf("Authorization %q, want Basic user:hunter2", got)
	}
}

func TestRunWithServerPIDReportsServerCPUAndMachineLoad(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	s := startServer(t, echoReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 2, ServerPID: os.Getpid()})
	if res.Server == nil || res.Server.PID != os.Getpid() || res.Server.PeakRSSBytes <= 0 {
		t.Fatalf("server stats missing: %+v", res.Server)
	}
	if !res.Machine.Measured || res.Machine.OtherBusyPercent < 0 || res.Machine.OtherBusyPercent > 100 {
		t.Errorf("machine stats out of range: %+v", res.Machine)
	}
}

func TestRunStopsEarlyWhenTheContextEnds(t *testing.T) {
	s := startServer(t, echoReply)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 2, Duration: time.Hour, Warmup: -1}
	measuring := make(chan struct{}, 1)
	cfg.Progress = func(p loadgen.Progress) {
		if p.Phase == "measuring" {
			select {
			case measuring <- struct{}{}:
			default:
			}
		}
	}
	done := make(chan *loadgen.Result)
	go func() {
		res, err := loadgen.Run(ctx, cfg)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-measuring
	cancel()
	res := <-done
	if res == nil || res.WindowSeconds >= 3600 {
		t.Fatalf("window not cut short: %+v", res)
	}
	checkNoLoadgenGoroutines(t)
}

func TestPayloadIsValidUTF8TextOfExactlyTheSize(t *testing.T) {
	for size := range 200 {
		p := loadgen.Payload(size, true)
		if len(p) != size || !utf8.Valid(p) {
			t.Fatalf("size %d: got %d bytes, valid %v", size, len(p), utf8.Valid(p))
		}
	}
	p := loadgen.Payload(16<<10, true)
	if ascii := bytes.IndexFunc(p, func(r rune) bool { return r >= 0x80 }); ascii < 0 || !utf8.Valid(p) {
		t.Fatal("16 KiB text payload is not non-ASCII UTF-8")
	}
	if b := loadgen.Payload(64<<10, false); len(b) != 64<<10 || bytes.Equal(b[:100], b[100:200]) {
		t.Fatal("binary payload has the wrong size or repeats")
	}
}

func TestMainPrintsJSONAndWritesASelfContainedHTMLReport(t *testing.T) {
	s := startServer(t, echoReply)
	page := filepath.Join(t.TempDir(), "report.html")
	var out, errOut bytes.Buffer
	code := loadgen.Main([]string{"echo", s.url("/echo"), "--conns", "2", "--duration", "1200ms", "--warmup=0", "--json", "--html", page}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	var res loadgen.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	if res.Scenario != loadgen.Echo || res.Conns != 2 || !res.Text || res.Messages == 0 {
		t.Errorf("JSON result %+v", res)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("<svg")) || bytes.Contains(html, []byte("src=")) || bytes.Contains(html, []byte("href=")) {
		t.Errorf("HTML report is not a self-contained page with inline SVG")
	}
	if errOut.Len() != 0 {
		t.Errorf("progress written to a stderr that is not a terminal: %q", errOut.String())
	}
}

func TestMainPrintsASummaryWithRateLatencyAndErrors(t *testing.T) {
	s := startServer(t, echoReply)
	var out, errOut bytes.Buffer
	code := loadgen.Main([]string{"--duration=200ms", "echo", "--warmup", "0", s.url("/"), "--server-pid", strconv.Itoa(os.Getpid())}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	for _, want := range []string{"replies/s", "p50", "p99", "errors    0", "CPU per reply,"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMainExitsWith1WhenTheRunCountedErrors(t *testing.T) {
	s := startServer(t, shortReply)
	var out, errOut bytes.Buffer
	if code := loadgen.Main([]string{"echo", s.url("/"), "--duration=200ms", "--warmup=0"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
}

func TestMainRejectsBadUsageWith2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"echo"},
		{"ping", "ws://127.0.0.1:1/"},
		{"echo", "ftp://127.0.0.1:1/"},
		{"echo", "ws://127.0.0.1:1/", "--conns", "0"},
		{"echo", "ws://127.0.0.1:1/", "--bogus"},
		{"echo", "ws://127.0.0.1:1/", "--conns", "many"},
	} {
		var out, errOut bytes.Buffer
		if code := loadgen.Main(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
