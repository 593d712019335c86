package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// catTimeout bounds every wait of these tests.
const catTimeout = 10 * time.Second

// syncBuffer is a bytes.Buffer that rally cat's goroutines and the test
// may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echoBehaviour says how a test server treats a connection.
type echoBehaviour struct {
	closeAfter int    // close with 1000 "done" after echoing this many messages (0: never)
	closeCode  uint16 // close with this code and "bye" at once instead
	greet      []byte // send this binary message first
	silent     bool   // echo nothing
	tls        bool   // serve wss with a self-signed certificate
}

// startEcho starts a rally.Server that echoes, as b says, behind opts,
// and returns its ws:// URL.
func startEcho(t *testing.T, opts *rally.AcceptOptions, b echoBehaviour) string {
	t.Helper()
	var mu sync.Mutex
	counts := map[*rally.Conn]int{}
	srv := httptest.NewUnstartedServer(&rally.Server{
		Options: opts,
		Open: func(c *rally.Conn) {
			if b.greet != nil {
				c.Send(rally.Binary, b.greet)
			}
			if b.closeCode != 0 {
				c.Close(b.closeCode, "bye")
			}
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			if b.silent {
				return
			}
			c.Send(typ, p)
			mu.Lock()
			counts[c]++
			n := counts[c]
			mu.Unlock()
			if b.closeAfter > 0 && n == b.closeAfter {
				c.Close(rally.CloseNormal, "done")
			}
		},
	})
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a refused certificate is the point of a test
	if b.tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	scheme := "ws://"
	if b.tls {
		scheme = "wss://"
	}
	return scheme + srv.Listener.Addr().String() + "/echo"
}

// runCat runs rally cat with args and stdin and returns its status and
// outputs, failing the test if it does not end within catTimeout.
func runCat(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- cat(args, strings.NewReader(stdin), &stdout, &stderr) }()
	select {
	case status := <-done:
		return status, stdout.String(), stderr.String()
	case <-time.After(catTimeout):
		t.Fatalf("rally cat %q did not end within %v; stderr:\n%s", args, catTimeout, stderr.String())
		return 0, "", ""
	}
}

func TestCatSendsEachMessageAndPrintsTheRepliesWithFlagsBeforeOrAfterTheURL(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{closeAfter: 2})
	for _, args := range [][]string{
		{"-x", "hello", "-x", "world", "-w", "30", url},
		{url, "-x", "hello", "-w", "30", "-x", "world"},
		{"-x", "hello", url, "--x", "world", "-w=30"},
	} {
		status, out, errs := runCat(t, "", args...)
		if status != 0 || out != "hello\nworld\n" {
			t.Fatalf("rally cat %q = %d, stdout %q, stderr %q; want 0 and both echoes", args, status, out, errs)
		}
		if !strings.Contains(errs, "connected") || !strings.Contains(errs, `closed by the server: 1000 (normal closure): "done"`) {
			t.Errorf("stderr %q, want the connection and the server's close", errs)
		}
	}
}

func TestCatSendsStdinLinesAsMessages(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{closeAfter: 4})
	status, out, errs := runCat(t, "first line\nsecond line\n\nlast without newline", "-w", "30", url)
	if status != 0 || out != "first line\nsecond line\n\nlast without newline\n" {
		t.Fatalf("status %d, stdout %q, stderr %q", status, out, errs)
	}
}

func TestCatClosesNormallyOnceTheInputHasEndedAndTheWaitIsOver(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{silent: true})
	for _, args := range [][]string{
		{"-x", "ping", url},
		{"-x", "ping", "-w", "0.05", url},
	} {
		status, out, errs := runCat(t, "", args...)
		if status != 0 || out != "" || !strings.Contains(errs, "closed: 1000 (normal closure)") {
			t.Fatalf("rally cat %q = %d, stdout %q, stderr %q; want 0 after our close", args, status, out, errs)
		}
	}
	status, _, errs := runCat(t, "", url)
	if status != 0 || !strings.Contains(errs, "closed: 1000 (normal closure)") {
		t.Fatalf("with an empty stdin: %d, %q; want 0 after our close", status, errs)
	}
}

func TestCatPrintsBinaryAsHexWithAMarkerAndSendsBinaryWhenAsked(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{greet: []byte{0x00, 0xff, 0x10}, closeAfter: 1})
	status, out, errs := runCat(t, "", "--binary", "-x", "hi", "-w", "30", url)
	want := "[binary 3 bytes] 00 ff 10\n[binary 2 bytes] 68 69\n"
	if status != 0 || out != want {
		t.Fatalf("status %d, stdout %q, stderr %q; want %q", status, out, errs, want)
	}
}

func TestCatSendsHeadersAndOffersSubprotocols(t *testing.T) {
	seen := make(chan http.Header, 1)
	opts := &rally.AcceptOptions{
		Subprotocols: []string{"chat.v2"},
		Authorize: func(r *http.Request) (any, *rally.Rejection) {
			seen <- r.Header.Clone()
			return nil, nil
		},
	}
	url := startEcho(t, opts, echoBehaviour{silent: true})
	status, _, errs := runCat(t, "", "-H", "X-Token: abc", "-H", "X-Two:2", "--subprotocol", "chat.v1", "--subprotocol", "chat.v2", "-x", "m", url)
	if status != 0 || !strings.Contains(errs, "connected (subprotocol chat.v2)") {
		t.Fatalf("status %d, stderr %q; want the subprotocol chosen", status, errs)
	}
	got := <-seen
	if got.Get("X-Token") != "abc" || got.Get("X-Two") != "2" || got.Get("Sec-WebSocket-Protocol") != "chat.v1, chat.v2" {
		t.Fatalf("server saw %v", got)
	}
}

func TestCatShowsTheStatusOfAFailedHandshakeAndFails(t *testing.T) {
	opts := &rally.AcceptOptions{Authorize: func(*http.Request) (any, *rally.Rejection) {
		return nil, &rally.Rejection{Status: http.StatusUnauthorized, Body: "token expired"}
	}}
	url := startEcho(t, opts, echoBehaviour{})
	status, out, errs := runCat(t, "", "-x", "hi", url)
	if status != 1 || out != "" || !strings.Contains(errs, "HTTP status: 401 Unauthorized") || !strings.Contains(errs, "response body: token expired") {
		t.Fatalf("status %d, stdout %q, stderr %q; want 1 and the 401 with its body", status, out, errs)
	}
}

func TestCatShowsTheServersCloseCodeAndReasonAndFailsOnAnAbnormalOne(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{closeCode: 4000})
	status, _, errs := runCat(t, "", "-w", "30", "-x", "x", url)
	if status != 1 || !strings.Contains(errs, `closed by the server: 4000 (application): "bye"`) {
		t.Fatalf("status %d, stderr %q; want 1 and code 4000 with its reason", status, errs)
	}
}

func TestCatToAClosedPortFailsOnceWithoutShowingThePassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	status, out, errs := runCat(t, "", "-x", "hi", "-w", "1", "ws://user:secret@"+addr+"/?token=t0p")
	if status != 1 || out != "" || strings.Contains(errs, "secret") || strings.Contains(errs, "t0p") {
		t.Fatalf("status %d, stdout %q, stderr %q; want 1 and no credentials", status, out, errs)
	}
	if n := strings.Count(errs, "rally cat: dial ws://xxxxx@"); n != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "connection refused") {
		t.Fatalf("stderr %q, want exactly one error saying the connection was refused", errs)
	}
}

func TestCatRefusesWrongUsageWithStatus2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing URL"},
		{[]string{"ws://a/", "ws://b/"}, "one URL at most"},
		{[]string{"--listen", "127.0.0.1:0", "ws://a/"}, "not both"},
		{[]string{"-H", "no colon", "ws://a/"}, "-H wants 'Name: value'"},
		{[]string{"-w", "-1", "ws://a/"}, "-w must not be negative"},
		{[]string{"--proxy", "::user:SECRET", "ws://a/"}, "--proxy wants a URL"},
		{[]string{"--no-such-flag", "ws://a/"}, "rally cat: unknown flag --no-such-flag (see rally cat --help)\n"},
		{[]string{"-x", "hi", "not-a-url"}, "not a URL"},
	} {
		status, _, errs := runCat(t, "", tc.args...)
		if status != 2 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "SECRET") {
			t.Errorf("rally cat %q = %d, stderr %q; want 2 and %q", tc.args, status, errs, tc.want)
		}
	}
	if status, out, _ := runCat(t, "", "--help"); status != 0 || !strings.Contains(out, "Usage: rally cat") || !strings.Contains(out, "\n  --listen ADDR\n") {
		t.Errorf("--help = %d, %q", status, out)
	}
}

func TestCatOverTLSNeedsInsecureForASelfSignedCertificate(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{tls: true, closeAfter: 1})
	if status, _, errs := runCat(t, "", "-x", "tls", url); status != 1 || !strings.Contains(errs, "certificate") {
		t.Fatalf("without --insecure: %d, %q; want a certificate error", status, errs)
	}
	if status, out, errs := runCat(t, "", "--insecure", "-x", "tls", "-w", "30", url); status != 0 || out != "tls\n" {
		t.Fatalf("with --insecure: %d, %q, %q", status, out, errs)
	}
}

func TestCatGoesThroughTinyproxyWithProxyButNotThroughTheEnvironmentForLoopback(t *testing.T) {
	proxy := startTinyproxy(t)
	url := startEcho(t, nil, echoBehaviour{closeAfter: 1})
	// The environment names a proxy that does not exist: loopback never
	// takes it.
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	status, out, errs := runCat(t, "", "--proxy", "http://"+proxy.addr, "-x", "hello", "-w", "30", url)
	if status != 0 || out != "hello\n" || !proxy.logged("CONNECT") {
		t.Fatalf("through tinyproxy: %d, %q, %q (tinyproxy logged CONNECT: %v)", status, out, errs, proxy.logged("CONNECT"))
	}
	connects := proxy.count("CONNECT")
	status, out, errs = runCat(t, "", "-x", "direct", "-w", "30", url)
	if status != 0 || out != "direct\n" || proxy.count("CONNECT") != connects {
		t.Fatalf("with only the environment: %d, %q, %q", status, out, errs)
	}
}

func TestCatListensAndPrintsWhatClientsSendAndSendsStdinLines(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	errR, errW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cat([]string{"--listen", "127.0.0.1:0", "-H", "X-Served-By: rally cat"}, stdinR, outW, errW)
		errW.Close()
		outW.Close()
	}()
	errLines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			errLines <- sc.Text()
		}
		close(errLines)
	}()
	outLines := bufio.NewScanner(outR)
	next := func(ch <-chan string) string {
		select {
		case l := <-ch:
			return l
		case <-time.After(catTimeout):
			t.Fatal("rally cat --listen said nothing more")
			return ""
		}
	}
	addr, ok := strings.CutPrefix(next(errLines), "listening on ws://")
	if !ok {
		t.Fatalf("first line of stderr does not say where rally cat listens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), catTimeout)
	defer cancel()
	c, resp, err := rally.Dial(ctx, "ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if resp.Header.Get("X-Served-By") != "rally cat" {
		t.Errorf("101 headers %v, want the -H header", resp.Header)
	}
	if l := next(errLines); !strings.Contains(l, "connected") {
		t.Fatalf("stderr %q, want the client's connection", l)
	}
	if err := c.Write(ctx, rally.Text, []byte("from the client")); err != nil {
		t.Fatal(err)
	}
	if !outLines.Scan() || outLines.Text() != "from the client" {
		t.Fatalf("stdout %q, want the client's message", outLines.Text())
	}
	fmt.Fprintln(stdinW, "from stdin")
	if _, p, err := c.Read(ctx); err != nil || string(p) != "from stdin" {
		t.Fatalf("client read %q, %v, want the stdin line", p, err)
	}
	stdinW.Close()
	if _, _, err := c.Read(ctx); closeCode(err) != rally.CloseGoingAway {
		t.Fatalf("client read %v after stdin ended, want a close with 1001", err)
	}
	go io.Copy(io.Discard, outR)
	go func() {
		for range errLines {
		}
	}()
	select {
	case status := <-done:
		if status != 0 {
			t.Fatalf("rally cat --listen exited with %d", status)
		}
	case <-time.After(catTimeout):
		t.Fatal("rally cat --listen did not exit after stdin ended")
	}
}

func closeCode(err error) uint16 {
	if ce, ok := err.(*rally.CloseError); ok {
		return ce.Code
	}
	return 0
}

// tinyproxy is a running tinyproxy, the real HTTP proxy rally cat is
// tested through.
type tinyproxy struct {
	addr string
	mu   sync.Mutex
	log  []string
}

// count returns how many lines of the proxy's log contain s.
func (p *tinyproxy) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.log {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

func (p *tinyproxy) logged(s string) bool { return p.count(s) > 0 }

// startTinyproxy runs tinyproxy on a free loopback port until the test
// ends, and fails the test when it is not installed.
func startTinyproxy(t *testing.T) *tinyproxy {
	t.Helper()
	bin := ""
	for _, p := range []string{"/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"} {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Fatal("tinyproxy is not installed: run `apt-get install -y tinyproxy-bin` (make test installs it)")
	}
	for range 3 { // another process may take the free port first
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		conf := filepath.Join(t.TempDir(), "tinyproxy.conf")
		text := fmt.Sprintf("Port %d\nListen 127.0.0.1\nTimeout 30\nLogLevel Info\nMaxClients 16\nAllow 127.0.0.1\n", port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-d", "-c", conf)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &tinyproxy{addr: fmt.Sprintf("127.0.0.1:%d", port)}
		ready, scanned := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(scanned)
			sc := bufio.NewScanner(out)
			announced := false
			for sc.Scan() {
				p.mu.Lock()
				p.log = append(p.log, sc.Text())
				p.mu.Unlock()
				if !announced && strings.Contains(sc.Text(), "Accepting connections") {
					announced = true
					close(ready)
				}
			}
		}()
		stop := func() {
			cmd.Process.Kill()
			<-scanned
			cmd.Wait()
		}
		select {
		case <-ready:
			t.Cleanup(stop)
			return p
		case <-scanned:
			stop()
		case <-time.After(catTimeout):
			stop()
			t.Fatalf("tinyproxy did not listen within %v", catTimeout)
		}
	}
	t.Fatal("tinyproxy could not listen on a free port")
	return nil
}

// offerRecorder serves a compressing echo server and keeps the
// Sec-WebSocket-Extensions header of each handshake.
type offerRecorder struct {
	mu     sync.Mutex
	offers []string
}

func (o *offerRecorder) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.offers) == 0 {
		return "(no handshake)"
	}
	return o.offers[len(o.offers)-1]
}

func startCompressingEcho(t *testing.T, compression *rally.CompressionOptions) (string, *offerRecorder) {
	t.Helper()
	rec := &offerRecorder{}
	ws := &rally.Server{
		Options: &rally.AcceptOptions{Compression: compression},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Send(typ, p)
			c.Close(rally.CloseNormal, "done")
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.offers = append(rec.offers, r.Header.Get("Sec-WebSocket-Extensions"))
		rec.mu.Unlock()
		ws.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), rec
}

func TestCatOffersCompressionOnlyWithCompressAndSaysWhetherItWasNegotiated(t *testing.T) {
	long := strings.Repeat("compress me ", 200) // above the server's threshold
	cases := []struct {
		name        string
		server      *rally.CompressionOptions
		args        []string
		offer, note string
	}{
		{"NoOfferByDefault", &rally.CompressionOptions{}, nil, "", "connected\n"},
		{"OfferedAndNegotiated", &rally.CompressionOptions{ServerNoContextTakeover: true}, []string{"--compress"}, "permessage-deflate; client_max_window_bits", "connected (compression: permessage-deflate; server_no_context_takeover)\n"},
		{"OfferedAndDeclined", nil, []string{"--compress"}, "permessage-deflate; client_max_window_bits", "connected (compression: not negotiated)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, rec := startCompressingEcho(t, tc.server)
			status, out, errs := runCat(t, "", append(tc.args, "-x", long, "-w", "30", url)...)
			if status != 0 || out != long+"\n" {
				t.Fatalf("rally cat = %d, stdout %.40q..., stderr %q; want 0 and the echo", status, out, errs)
			}
			if got := rec.last(); got != tc.offer {
				t.Errorf("offered %q, want %q", got, tc.offer)
			}
			if !strings.HasPrefix(errs, tc.note) {
				t.Errorf("stderr %q, want it to start with %q", errs, tc.note)
			}
		})
	}
}

func TestCatListenAcceptsCompressionOnlyWithCompressAndSaysSo(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		answer string
		note   string
	}{
		{[]string{"--compress"}, "permessage-deflate", " (compression: permessage-deflate)"},
		{nil, "", ""},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			stdinR, stdinW := io.Pipe()
			errR, errW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan int, 1)
			go func() {
				done <- cat(append(tc.args, "--listen", "127.0.0.1:0"), stdinR, outW, errW)
				errW.Close()
				outW.Close()
			}()
			errLines := bufio.NewScanner(errR)
			outLines := bufio.NewScanner(outR)
			if !errLines.Scan() {
				t.Fatal("rally cat --listen said nothing")
			}
			addr, ok := strings.CutPrefix(errLines.Text(), "listening on ws://")
			if !ok {
				t.Fatalf("first line of stderr %q does not say where rally cat listens", errLines.Text())
			}
			ctx, cancel := context.WithTimeout(context.Background(), catTimeout)
			defer cancel()
			c, resp, err := rally.Dial(ctx, "ws://"+addr, nil) // offers compression
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != tc.answer {
				t.Errorf("answer %q, want %q", got, tc.answer)
			}
			if !errLines.Scan() || !strings.HasSuffix(errLines.Text(), "connected"+tc.note) {
				t.Fatalf("stderr %q, want the client's connection ending %q", errLines.Text(), "connected"+tc.note)
			}
			msg := strings.Repeat("squeeze ", 300)
			if err := c.Write(ctx, rally.Text, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if !outLines.Scan() || outLines.Text() != msg {
				t.Fatalf("stdout %.40q, want the client's message", outLines.Text())
			}
			stdinW.Close()
			if _, _, err := c.Read(ctx); closeCode(err) != rally.CloseGoingAway {
				t.Fatalf("client read %v after stdin ended, want a close with 1001", err)
			}
			go io.Copy(io.Discard, outR)
			go io.Copy(io.Discard, errR)
			select {
			case status := <-done:
				if status != 0 {
					t.Fatalf("rally cat --listen exited with %d", status)
				}
			case <-time.After(catTimeout):
				t.Fatal("rally cat --listen did not exit after stdin ended")
			}
		})
	}
}

func TestCatPrintsTheEchoOfAPipedLineWithoutAnyFlag(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{}) // a server that never closes first
	status, out, errs := runCat(t, "hello\n", url)
	if status != 0 || out != "hello\n" || !strings.Contains(errs, "closed: 1000 (normal closure)") {
		t.Fatalf("status %d, stdout %q, stderr %q; want the echo, then our close and 0", status, out, errs)
	}
}

// A line of any length is read whole: past the old scanner's 16 MiB
// (which printed "token too long" and exited 0) without the network, and
// past bufio's 64 KiB buffer through a server.
func TestCatReadsStdinLinesOfAnyLength(t *testing.T) {
	const n = 17 << 20
	var got []int
	err := readLines(strings.NewReader(strings.Repeat("a", n)+"\nb\r\n\nlast"), func(line []byte) bool {
		got = append(got, len(line))
		return true
	})
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]int{n, 1, 0, 4}) {
		t.Fatalf("lines of %v bytes, %v; want %d, 1, 0 and 4", got, err, n)
	}
	url := startEcho(t, nil, echoBehaviour{})
	const m = 200 << 10
	status, out, errs := runCat(t, strings.Repeat("a", m)+"\n", url)
	if status != 0 || len(out) != m+1 {
		t.Fatalf("status %d, %d bytes echoed, stderr %q; want 0 and the %d-byte line back", status, len(out), errs, m)
	}
}

func TestCatFailsWhenTheServerRefusesALongLine(t *testing.T) {
	url := startEcho(t, &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1 << 10}}, echoBehaviour{})
	status, _, errs := runCat(t, strings.Repeat("a", 2<<10)+"\n", url)
	if status != 1 || !strings.Contains(errs, "closed by the server: 1009") {
		t.Fatalf("status %d, stderr %q; want 1 and the server's 1009", status, errs)
	}
}

func TestCatSlashCommandsPingSendBinaryEscapeAndCloseWithACode(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{})
	input := "/ping hi\n/binary 00 ff 10\n//not a command\n/nope\n/close 1005\n/close 4000 bye now\nnever sent\n"
	status, out, errs := runCat(t, input, "-P", url)
	if status != 0 || out != "[binary 3 bytes] 00 ff 10\n/not a command\n" {
		t.Fatalf("status %d, stdout %q, stderr %q", status, out, errs)
	}
	for _, want := range []string{
		`pong received: "hi"`,
		"unknown command /nope",
		"/close: ", // 1005 may not be sent: the connection stays open
		`closed: 4000 (application): "bye now"`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q, want it to say %q", errs, want)
		}
	}
	status, out, _ = runCat(t, "/ping\n", "--literal", url)
	if status != 0 || out != "/ping\n" {
		t.Fatalf("--literal: status %d, stdout %q; want the line sent as it is", status, out)
	}
}

func TestCatShowsThePingsTheServerSendsWithP(t *testing.T) {
	srv := httptest.NewServer(&rally.Server{
		Open: func(c *rally.Conn) {
			c.Ping(context.Background(), []byte("are you there"))
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) { c.Send(typ, p) },
	})
	t.Cleanup(srv.Close)
	url := "ws://" + srv.Listener.Addr().String() + "/"
	// The server's ping was sent before the echo it sends back, so it is
	// shown by the time the echo arrives.
	status, out, errs := runCat(t, "x\n", "-P", url)
	if status != 0 || out != "x\n" || !strings.Contains(errs, `ping received: "are you there"`) {
		t.Fatalf("status %d, stdout %q, stderr %q", status, out, errs)
	}
	_, _, errs = runCat(t, "x\n", url)
	if strings.Contains(errs, "ping received") {
		t.Fatalf("without -P: stderr %q shows the ping", errs)
	}
}

func TestCatSaysAReplyOverItsReadLimitIsItsOwnCloseAndFails(t *testing.T) {
	url := startEcho(t, nil, echoBehaviour{})
	status, _, errs := runCat(t, strings.Repeat("a", 2<<10)+"\n", "--read-limit", "1KiB", url)
	if status != 1 || !strings.Contains(errs, "closed by rally cat: 1009") || !strings.Contains(errs, "--read-limit") {
		t.Fatalf("status %d, stderr %q; want 1 and our 1009 naming --read-limit", status, errs)
	}
}
