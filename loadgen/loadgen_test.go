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

// run runs cfg until enough is closed (an event of the server: it has
// read enough messages for the client to have counted some), then ends
// the run as an interrupt would, and checks that Run left no goroutine of
// its own behind. The window is open from the start. With a nil enough,
// the run lasts cfg.Duration: for outcomes that do not depend on how much
// happened in it.
func run(t *testing.T, cfg loadgen.Config, enough <-chan struct{}) *loadgen.Result {
	t.Helper()
	if cfg.Duration == 0 {
		cfg.Duration = time.Hour
		if enough == nil {
			cfg.Duration = 300 * time.Millisecond
		}
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = -1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-enough:
			cancel()
		case <-stop:
		}
	}()
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkNoLoadgenGoroutines(t)
	return res
}

// errorsSeen sets cfg.Progress to close the channel it returns once the
// run has counted an error (progress is reported about once a second).
func errorsSeen(cfg *loadgen.Config) <-chan struct{} {
	seen := make(chan struct{})
	closed := false
	cfg.Progress = func(p loadgen.Progress) {
		if p.Errors > 0 && !closed {
			closed = true
			close(seen)
		}
	}
	return seen
}

// runMain is loadgen.Main with args, ended as an interrupt would once
// enough is closed.
func runMain(t *testing.T, enough <-chan struct{}, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer loadgen.SetMainContext(ctx)()
	go func() {
		select {
		case <-enough:
			cancel()
		case <-ctx.Done():
		}
	}()
	var out, errOut bytes.Buffer
	code := loadgen.Main(append(args, "--duration", "1h", "--warmup", "0"), &out, &errOut)
	return code, out.String(), errOut.String()
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
		if strings.Contains(g, "loadgen.(*run)") || strings.Contains(g, "loadgen.(*idleRun)") || strings.Contains(g, "loadgen.(*sender)") || strings.Contains(g, "loadgen.Run") {
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
			res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 3, Size: tc.size, Text: tc.text, InFlight: tc.inflight}, s.enough(int64(3*tc.inflight+4), 0))
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
			// Some corruptions stop the connection without a close: the
			// event is the error, as the run's progress reports it.
			cfg := loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 64, Text: true}
			res := run(t, cfg, errorsSeen(&cfg))
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
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 1, Size: 32}, s.enough(20*loadgen.SampleEvery, 0))
	seen := res.Messages + res.Errors
	if res.Errors*loadgen.SampleEvery < seen-loadgen.SampleEvery || res.Errors*loadgen.SampleEvery > seen+loadgen.SampleEvery {
		t.Errorf("%d errors in %d replies, want one in %d", res.Errors, seen, loadgen.SampleEvery)
	}
}

func TestThroughputChecksTheMaskedRepliesOfAVerbatimEchoServer(t *testing.T) {
	url, enough := startVerbatimServer(t, 4*(256<<10+14))
	res := run(t, loadgen.Config{Scenario: loadgen.Throughput, URL: url, Size: 256 << 10, InFlight: 2, VerbatimEcho: true}, enough)
	if res.Errors != 0 || res.Messages == 0 || res.MiBPerSecond <= 0 {
		t.Fatalf("want replies without errors, got %d replies, %d errors %v", res.Messages, res.Errors, res.ErrorSamples)
	}
	if res.Conns != 1 {
		t.Errorf("throughput used %d connections, want 1", res.Conns)
	}
}

func TestEchoRunsOverTLSWithAnUnverifiedCertificateWhenAsked(t *testing.T) {
	s := startTLSServer(t, echoReply)
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 200, InsecureTLS: true}, s.enough(4, 0))
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
	// Round 2 has begun once the server reads more than a round's 4x2
	// messages: every client has then counted the 4x2 deliveries of round 1.
	res := run(t, loadgen.Config{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 4, Size: 100, Text: true, InFlight: 2}, s.enough(9, 0))
	if res.Errors != 0 {
		t.Fatalf("errors %d: %v", res.Errors, res.ErrorSamples)
	}
	if res.Messages == 0 || res.Unit != "deliveries" {
		t.Fatalf("no deliveries counted: %+v", res)
	}
	if res.Rounds == nil || res.Rounds.Completed == 0 {
		t.Fatalf("rounds %+v; want round 1 counted", res.Rounds)
	}
	var sum strings.Builder
	res.WriteSummary(&sum)
	if !strings.Contains(sum.String(), " stalled (over 4x the median)") {
		t.Fatalf("summary has no stalled rounds:\n%s", sum.String())
	}
}

func TestChatReportsAServerThatOnlyEchoesToTheSender(t *testing.T) {
	s := startServer(t, echoReply)
	// No round ever completes, whatever the window's length.
	res := run(t, loadgen.Config{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 3, Size: 16}, nil)
	if res.Errors == 0 || !containsAny(res.ErrorSamples, "no round completed") {
		t.Fatalf("want the incomplete rounds reported, got %d errors %v", res.Errors, res.ErrorSamples)
	}
}

func TestConnectCountsOpeningHandshakesAndClosesEachConnection(t *testing.T) {
	s := startServer(t, echoReply)
	// A fifth handshake means a worker has counted its first.
	res := run(t, loadgen.Config{Scenario: loadgen.Connect, URL: s.url("/"), Conns: 4}, s.enough(0, 5))
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
	// The run is held until every connection has answered its ping.
	answered := make(chan struct{})
	var pongs []string
	go func() {
		for range 20 {
			pongs = append(pongs, string(<-s.pongs))
		}
		close(answered)
	}()
	res := run(t, loadgen.Config{Scenario: loadgen.Idle, URL: s.url("/"), Conns: 20, ServerPID: os.Getpid()}, answered)
	for _, p := range pongs {
		if p != "ping" {
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
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: u, Conns: 1}, s.enough(2, 0))
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
	// CPU time and the machine's counters advance in ticks: the run lasts
	// until the server has done enough work for some to pass.
	res := run(t, loadgen.Config{Scenario: loadgen.Echo, URL: s.url("/"), Conns: 2, ServerPID: os.Getpid()}, s.enough(5000, 0))
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
	code, out, errOut := runMain(t, s.enough(4, 0), "echo", s.url("/echo"), "--conns", "2", "--json", "--html", page)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var res loadgen.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
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
	if errOut != "" {
		t.Errorf("progress written to a stderr that is not a terminal: %q", errOut)
	}
}

func TestMainPrintsASummaryWithRateLatencyAndErrors(t *testing.T) {
	s := startServer(t, echoReply)
	// The CPU time of a process is counted in ticks: the run lasts until
	// the server has done enough work for some to show.
	code, out, errOut := runMain(t, s.enough(5000, 0), "echo", s.url("/"), "--server-pid", strconv.Itoa(os.Getpid()))
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{"replies/s", "p50", "p99", "errors    0", "CPU per reply,"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestMainExitsWith1WhenTheRunCountedErrors(t *testing.T) {
	s := startServer(t, shortReply)
	// Every reply is a byte short; once the server has read more than the
	// 2 connections keep in flight, the client has checked a reply.
	if code, _, _ := runMain(t, s.enough(4, 0), "echo", s.url("/"), "--conns", "2"); code != 1 {
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
