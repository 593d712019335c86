package loadgen_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/loadgen"
)

// asRallyBench is set in the environment of this test binary when a test
// starts it as `rally bench`: a worker of --procs, or the probe of a
// hostile run.
const asRallyBench = "LOADGEN_TEST_AS_RALLY_BENCH"

func TestMain(m *testing.M) {
	if os.Getenv(lowerPriorityChild) != "" {
		os.Exit(reportNiceness())
	}
	if os.Getenv(asRallyBench) != "" {
		// Its own helpers (a hostile run's probe) are this binary too.
		exe, _ := os.Executable()
		loadgen.SetWorkerCommand(func(a []string) (*exec.Cmd, error) { return exec.Command(exe, a...), nil })
		if len(os.Args) > 1 && loadgen.IsHostile(os.Args[1]) {
			os.Exit(loadgen.HostileMain(os.Args[1:], os.Stdout, os.Stderr))
		}
		os.Exit(loadgen.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// pubsubServer speaks the part of rally serve's /ws protocol the idle
// scenario uses: a subscribe request is acknowledged, and a POST to its
// publish endpoint is delivered to every subscriber as
// {"type":"message","topic":T,"data":BODY}.
type pubsubServer struct {
	*testServer
	publish string // http://…/publish/room

	// corrupt delivers other data than was posted.
	corrupt bool
	// fragment delivers in two frames with a ping between them, one byte
	// per write.
	fragment bool

	mu          sync.Mutex
	subscribers []*serverConn
	posts       int
}

func startPubsubServer(t *testing.T) *pubsubServer {
	p := &pubsubServer{}
	p.testServer = startServer(t, func(_ *testServer, c *serverConn, op byte, payload []byte) {
		var req struct {
			Type, Topic string
			ID          json.RawMessage
		}
		if json.Unmarshal(payload, &req) != nil || req.Type != "subscribe" || req.Topic != "room" {
			c.write(serverFrame(0x1, []byte(`{"type":"error"}`), true))
			return
		}
		p.mu.Lock()
		p.subscribers = append(p.subscribers, c)
		p.mu.Unlock()
		c.write(serverFrame(0x1, []byte(`{"type":"ack","id":`+string(req.ID)+`}`), true))
	})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.URL.Path != "/publish/room" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.posts++
		subs := append([]*serverConn(nil), p.subscribers...)
		p.mu.Unlock()
		if p.corrupt {
			body = []byte(`"other"`)
		}
		msg := []byte(`{"type":"message","topic":"room","data":` + string(body) + `}`)
		f := serverFrame(0x1, msg, true)
		if p.fragment {
			f = slices.Concat(serverFrame(0x1, msg[:10], false), serverFrame(0x9, []byte("hi"), true), serverFrame(0x0, msg[10:], true))
		}
		for _, c := range subs {
			if !p.fragment {
				c.write(f)
				continue
			}
			for i := range f {
				c.write(f[i : i+1])
			}
		}
	}))
	t.Cleanup(hs.Close)
	p.publish = hs.URL + "/publish/room"
	return p
}

func TestIdleSubscribesEveryConnectionAndCountsEveryBroadcastDelivery(t *testing.T) {
	s := startPubsubServer(t)
	res := run(t, loadgen.Config{
		Scenario: loadgen.Idle, URL: s.url("/ws"), Conns: 20,
		IdleOptions: loadgen.IdleOptions{Subscribe: "room", Broadcast: s.publish, BroadcastSize: 1024},
	}, nil)
	if res.Errors != 0 || res.Idle == nil || res.Idle.Held != 20 || res.Idle.Subscribed != 20 {
		t.Fatalf("want 20 connections held and subscribed without errors, got %+v (%v)", res.Idle, res.ErrorSamples)
	}
	b := res.Idle.Broadcast
	if b == nil || b.Delivered != 20 || b.Subscribers != 20 || b.Bytes != 1024 || b.Status != 200 {
		t.Fatalf("broadcast %+v, want 1024 bytes delivered to all 20 with status 200", b)
	}
	if b.LastSeconds < b.FirstSeconds || b.FirstSeconds <= 0 {
		t.Errorf("first delivery after %vs, last after %vs", b.FirstSeconds, b.LastSeconds)
	}
	var total uint64
	for _, k := range b.Latency.Buckets {
		total += k.Count
	}
	if total != 20 {
		t.Errorf("the delivery times count %d deliveries, want 20", total)
	}
	if s.posts != 1 {
		t.Errorf("%d posts, want 1", s.posts)
	}
}

func TestIdleCountsABroadcastInFragmentsCutAnywhereAndAnswersThePingBetween(t *testing.T) {
	s := startPubsubServer(t)
	s.fragment = true
	res := run(t, loadgen.Config{
		Scenario: loadgen.Idle, URL: s.url("/ws"), Conns: 3,
		IdleOptions: loadgen.IdleOptions{Subscribe: "room", Broadcast: s.publish, BroadcastSize: 100},
	}, nil)
	if b := res.Idle.Broadcast; res.Errors != 0 || b == nil || b.Delivered != 3 {
		t.Fatalf("broadcast %+v, errors %v: want it delivered to all 3", b, res.ErrorSamples)
	}
	if res.Idle.Pings != 3 {
		t.Errorf("%d pings from the server answered, want 3", res.Idle.Pings)
	}
	for range 3 {
		select {
		case p := <-s.pongs:
			if string(p) != "hi" {
				t.Fatalf("pong %q, want the ping's \"hi\"", p)
			}
		case <-time.After(time.Minute):
			t.Fatal("the server's pings were not answered")
		}
	}
}

func TestIdleCountsADeliveryThatIsNotTheBroadcastAsAnError(t *testing.T) {
	s := startPubsubServer(t)
	s.corrupt = true
	res := run(t, loadgen.Config{
		Scenario: loadgen.Idle, URL: s.url("/ws"), Conns: 3,
		IdleOptions: loadgen.IdleOptions{Subscribe: "room", Broadcast: s.publish},
	}, nil)
	if b := res.Idle.Broadcast; b == nil || b.Delivered != 0 {
		t.Fatalf("broadcast %+v: a delivery of other bytes counted", b)
	}
	if res.Errors != 3 {
		t.Fatalf("%d errors (%v), want one per connection", res.Errors, res.ErrorSamples)
	}
}

func TestIdleSendsPingsAndCountsThePongs(t *testing.T) {
	s := startServer(t, echoReply)
	res := run(t, loadgen.Config{
		Scenario: loadgen.Idle, URL: s.url("/"), Conns: 5,
		IdleOptions: loadgen.IdleOptions{PingInterval: 10_000_000}, // 10 ms
	}, s.pinged(20))
	if res.Errors != 0 || res.Idle.Held != 5 {
		t.Fatalf("held %d, errors %v", res.Idle.Held, res.ErrorSamples)
	}
	if res.Idle.Pongs == 0 {
		t.Fatalf("the server answered 20 pings, the run counted no pong")
	}
}

func TestIdleOpensFromTheSourceAddressesGiven(t *testing.T) {
	s := startServer(t, echoReply)
	opened := make(chan string, 6)
	s.onOpen = func(c *serverConn) {
		host, _, _ := strings.Cut(c.nc.RemoteAddr().String(), ":")
		opened <- host
	}
	ips, err := loadgen.ParseSourceAddrs("127.0.0.2-127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, loadgen.Config{Scenario: loadgen.Idle, URL: s.url("/"), Conns: 6, IdleOptions: loadgen.IdleOptions{SourceAddrs: ips}}, nil)
	if res.Idle.Held != 6 {
		t.Fatalf("held %d of 6: %v", res.Idle.Held, res.ErrorSamples)
	}
	from := map[string]int{}
	for range 6 {
		from[<-opened]++
	}
	// In turn: two connections from each address.
	if len(from) != 3 || from["127.0.0.2"] != 2 || from["127.0.0.3"] != 2 || from["127.0.0.4"] != 2 {
		t.Fatalf("connections came from %v, want two from each of 127.0.0.2, .3 and .4", from)
	}
}

func TestParseSourceAddrsReadsListsAndRanges(t *testing.T) {
	ips, err := loadgen.ParseSourceAddrs("127.0.0.254-127.0.1.1, 10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ip := range ips {
		got = append(got, ip.String())
	}
	if want := "127.0.0.254 127.0.0.255 127.0.1.0 127.0.1.1 10.0.0.1"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	for _, bad := range []string{"", "127.0.0.3-127.0.0.2", "::1", "127.0.0.1-x", "10.0.0.0-10.1.0.0"} {
		if _, err := loadgen.ParseSourceAddrs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMainRejectsWrongIdleOptionsWith2(t *testing.T) {
	for _, args := range [][]string{
		{"echo", "ws://127.0.0.1:1/", "--ping-interval", "1s"},
		{"echo", "ws://127.0.0.1:1/", "--procs", "2"},
		{"idle", "ws://127.0.0.1:1/", "--procs", "0"},
		{"idle", "ws://127.0.0.1:1/", "--source-addrs", "127.0.0.9-127.0.0.1"},
		{"idle", "ws://127.0.0.1:1/", "--server-pids", "12,x"},
		{"idle", "ws://127.0.0.1:1/", "--broadcast", "http://127.0.0.1:1/publish/t"},
		{"idle", "ws://127.0.0.1:1/", "--subscribe", "t", "--broadcast", "ws://127.0.0.1:1/publish/t"},
		{"idle", "ws://127.0.0.1:1/", "--conns", "100000", "--source-addrs", "127.0.0.2"},
		{"idle", "ws://127.0.0.1:1/", "--conns", "100000000", "--procs", "2"},
	} {
		var out, errOut bytes.Buffer
		if code := loadgen.Main(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

// workersInThisBinary makes the processes rally bench starts (--procs
// workers, a hostile run's probe) this test binary run as `rally bench`,
// until the test ends, and returns what reports the arguments of each
// one started so far.
func workersInThisBinary(t *testing.T) (started func() []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var args []string
	t.Cleanup(loadgen.SetWorkerCommand(func(a []string) (*exec.Cmd, error) {
		mu.Lock()
		args = append(args, strings.Join(a, " "))
		mu.Unlock()
		cmd := exec.Command(exe, a...)
		cmd.Env = append(os.Environ(), asRallyBench+"=1")
		return cmd, nil
	}))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(args)
	}
}

func TestIdleOverSeveralProcessesAddsUpWhatEachHeldAndTheBroadcast(t *testing.T) {
	workers := workersInThisBinary(t)
	s := startPubsubServer(t)
	var out, errOut bytes.Buffer
	code := loadgen.Main([]string{"idle", s.url("/ws"), "--conns", "7", "--procs", "3", "--duration", "1ms",
		"--subscribe", "room", "--broadcast", s.publish, "--server-pids", strconv.Itoa(os.Getpid()), "--after", "1ms", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errOut.String())
	}
	var res loadgen.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	started := workers()
	if len(started) != 3 {
		t.Fatalf("%d workers started, want 3", len(started))
	}
	for _, want := range []string{"--conns 3", "--conns 2"} {
		if !strings.Contains(strings.Join(started, "\n"), want) {
			t.Errorf("no worker was given %s: %q", want, started)
		}
	}
	st := res.Idle
	if st == nil || st.Opened != 7 || st.Held != 7 || st.Subscribed != 7 || st.Procs != 3 {
		t.Fatalf("idle %+v, want 7 opened, held and subscribed by 3 processes", st)
	}
	if b := st.Broadcast; b == nil || b.Delivered != 7 || b.Subscribers != 7 || b.Status != 200 {
		t.Fatalf("broadcast %+v, want delivered to all 7", b)
	}
	if s.posts != 1 {
		t.Errorf("%d posts, want 1 for all processes", s.posts)
	}
	if st.RSSBeforeBytes <= 0 || st.RSSHeldBytes <= 0 || st.RSSPeakBytes <= 0 || st.RSSAfterBytes <= 0 || st.RSSClosedBytes <= 0 || st.ClosedAfterSeconds <= 0 {
		t.Errorf("server memory not read at every step: %+v", st)
	}
}
