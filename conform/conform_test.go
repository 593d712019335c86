package conform

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

func verdicts(rep *Report) map[string]Verdict {
	m := map[string]Verdict{}
	for _, r := range rep.Results {
		m[r.ID] = r.Verdict
	}
	return m
}

// roles runs fn once against a server and once against a client built from
// the same reference endpoint.
func roles(t *testing.T, r refEcho, o *Options, fn func(t *testing.T, rep *Report)) {
	t.Run("server", func(t *testing.T) {
		rep, err := RunServer(t.Context(), startRefServer(t, r), o)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, rep)
	})
	t.Run("client", func(t *testing.T) {
		rep, err := RunClient(t.Context(), o, refClient(r))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, rep)
	})
}

func TestStrictPeerGetsOnlyOKAndInformationalInEverySection(t *testing.T) {
	roles(t, refEcho{}, quick(), func(t *testing.T, rep *Report) {
		c := rep.Counts()
		if !rep.Passed() || c.Total() != len(Select(nil)) {
			logReport(t, rep)
			t.Fatalf("strict peer: %v", c)
		}
		for id, v := range verdicts(rep) {
			if v == Informational && !strings.HasPrefix(id, "9.") && id != "7.1.6" && !strings.HasPrefix(id, "7.13.") {
				t.Errorf("%s is INFORMATIONAL; only 7.1.6, 7.13.* and 9.* record without judging", id)
			}
		}
	})
}

func TestPeerWithoutUTF8ValidationFailsEveryInvalidCaseOfSection6(t *testing.T) {
	o := neverFailsFast()
	o.Cases = []string{"6.*"}
	roles(t, refEcho{skipUTF8: true}, o, func(t *testing.T, rep *Report) {
		failed := 0
		for _, r := range rep.Results {
			invalid := strings.Contains(r.Expectation, "(1007)")
			switch {
			case invalid && r.Verdict != Failed:
				t.Errorf("%s (invalid UTF-8) got %s, want FAILED", r.ID, r.Verdict)
			case !invalid && r.Verdict != OK:
				t.Errorf("%s (valid UTF-8) got %s, want OK: %v", r.ID, r.Verdict, r.BehaviorNotes)
			case invalid:
				failed++
			}
		}
		if failed < 60 {
			t.Errorf("only %d FAILED cases in section 6", failed)
		}
	})
}

func TestPeerThatValidatesUTF8OnlyAtMessageEndIsNonStrictIn64(t *testing.T) {
	o := neverFailsFast()
	o.Cases = []string{"6.4.*", "6.3.*"}
	roles(t, refEcho{lateUTF8: true}, o, func(t *testing.T, rep *Report) {
		want := map[string]Verdict{"6.3.1": OK, "6.3.2": OK, "6.4.1": NonStrict, "6.4.2": NonStrict, "6.4.3": NonStrict, "6.4.4": NonStrict}
		if got := verdicts(rep); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("verdicts %v, want %v", got, want)
		}
	})
}

func TestPeerThatEchoesCloseCodesBlindlyFailsSection7(t *testing.T) {
	o := quick()
	o.Cases = []string{"7.*"}
	roles(t, refEcho{blindClose: true}, o, func(t *testing.T, rep *Report) {
		for id, v := range verdicts(rep) {
			mustFail := id == "7.3.2" || id == "7.5.1" || strings.HasPrefix(id, "7.9.") || strings.HasPrefix(id, "7.13.")
			if mustFail && v != Failed {
				t.Errorf("%s got %s, want FAILED", id, v)
			}
			if !mustFail && v == Failed {
				t.Errorf("%s got FAILED; the blind echo is right there", id)
			}
		}
	})
}

func TestPeerThatMasksTheWrongWayFailsEveryCaseWithAnAnswer(t *testing.T) {
	o := quick()
	o.Cases = []string{"1.1.1", "2.2"}
	roles(t, refEcho{wrongMasking: true}, o, func(t *testing.T, rep *Report) {
		for _, r := range rep.Results {
			if r.Verdict != Failed || !strings.Contains(strings.Join(r.BehaviorNotes, " "), "RFC 6455 5.1") {
				t.Errorf("%s got %s %v, want FAILED naming RFC 6455 5.1", r.ID, r.Verdict, r.BehaviorNotes)
			}
		}
	})
}

func TestPeerThatAnswersOnlyTheLastOfPingsArrivingTogetherFails210(t *testing.T) {
	o := quick()
	o.Cases = []string{"2.10"}
	// Nine of the ten pongs never come, however long the wait.
	o.Timeout = time.Second
	roles(t, refEcho{lastPongOnly: true}, o, func(t *testing.T, rep *Report) {
		for _, r := range rep.Results {
			if r.Verdict != Failed || !strings.Contains(strings.Join(r.BehaviorNotes, " "), "want the 10 in order") {
				t.Errorf("%s got %s %v, want FAILED for missing pongs", r.ID, r.Verdict, r.BehaviorNotes)
			}
		}
	})
}

// knownNpmWs checks the verdicts npm ws is known to get: OK apart from
// NON-STRICT in 6.4.x (it validates UTF-8 once the message is complete) and
// INFORMATIONAL where the case only records.
func knownNpmWs(t *testing.T, rep *Report) {
	t.Helper()
	logReport(t, rep)
	for id, v := range verdicts(rep) {
		switch {
		case strings.HasPrefix(id, "6.4."):
			if v != NonStrict {
				t.Errorf("%s got %s, want NON-STRICT", id, v)
			}
		case strings.HasPrefix(id, "9.") || id == "7.1.6" || strings.HasPrefix(id, "7.13."):
			if v != Informational {
				t.Errorf("%s got %s, want INFORMATIONAL", id, v)
			}
		case v != OK:
			t.Errorf("%s got %s, want OK", id, v)
		}
	}
	if got, want := len(rep.Results), len(Select(nil)); got != want {
		t.Errorf("%d results, want %d", got, want)
	}
}

func TestNpmWsServerGetsItsKnownVerdicts(t *testing.T) {
	u := startNpmWsServer(t)
	rep, err := RunServer(t.Context(), u, neverFailsFast())
	if err != nil {
		t.Fatal(err)
	}
	knownNpmWs(t, rep)
}

func TestNpmWsClientGetsItsKnownVerdicts(t *testing.T) {
	rep, err := RunClient(t.Context(), neverFailsFast(), npmWsClient(t))
	if err != nil {
		t.Fatal(err)
	}
	knownNpmWs(t, rep)
}

func TestCasePatternsSelectAndExclude(t *testing.T) {
	ids := func(o *Options) string {
		var out []string
		for _, c := range Select(o) {
			out = append(out, c.ID)
		}
		return strings.Join(out, " ")
	}
	if got := ids(&Options{Cases: []string{"6.4.*", "2.1"}}); got != "2.1 6.4.1 6.4.2 6.4.3 6.4.4" {
		t.Errorf("6.4.*,2.1 selects %q", got)
	}
	if got := ids(&Options{Cases: []string{"1.*"}, Exclude: []string{"1.2.*", "1.1.1?"}}); got != "1.1.1 1.1.2 1.1.3 1.1.4 1.1.5 1.1.6 1.1.7 1.1.8 1.1.9" {
		t.Errorf("1.* minus 1.2.*,1.1.1? selects %q", got)
	}
	if got := ids(&Options{Cases: []string{"1.*"}}); strings.Contains(got, "10.") {
		t.Errorf("1.* selects section 10: %q", got)
	}
	for _, c := range Select(nil) {
		if strings.HasPrefix(c.ID, "12.") || strings.HasPrefix(c.ID, "13.") || strings.HasPrefix(c.ID, "106.") {
			t.Fatalf("default selection includes %s; sections 12, 13 and 106 run only when named", c.ID)
		}
	}
	if got := ids(&Options{Cases: []string{"1.*", "10.*", "6.*"}}); strings.Contains(got, "106.") {
		t.Errorf("1.*, 10.* and 6.* select section 106: %q", got)
	}
	if got := ids(&Options{Cases: []string{"106.2.*"}}); got != "106.2.1 106.2.2 106.2.3 106.2.4 106.2.5 106.2.6 106.2.7" {
		t.Errorf("106.2.* selects %q", got)
	}
}

func TestEveryCaseHasAUniqueIDADescriptionAndAnExpectation(t *testing.T) {
	seen := map[string]bool{}
	valid := regexp.MustCompile(`^\d+(\.\d+)+$`)
	for _, c := range Cases() {
		if seen[c.ID] || !valid.MatchString(c.ID) || c.Description == "" || c.Expectation == "" || c.run == nil {
			t.Errorf("case %q: duplicate=%v, description %q, expectation %q", c.ID, seen[c.ID], c.Description, c.Expectation)
		}
		seen[c.ID] = true
	}
}

func TestReportWritesIndexJSONOneFilePerCaseAndAnHTMLGrid(t *testing.T) {
	o := quick()
	o.Cases = []string{"1.1.1", "6.3.1"}
	o.Agent = "broken"
	rep, err := RunServer(t.Context(), startRefServer(t, refEcho{skipUTF8: true}), o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Agent   string         `json:"agent"`
		Summary string         `json:"summary"`
		Passed  bool           `json:"passed"`
		Counts  map[string]int `json:"counts"`
		Cases   []indexEntry   `json:"cases"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.Agent != "broken" || idx.Passed || idx.Counts["FAILED"] != 1 || idx.Counts["OK"] != 1 || len(idx.Cases) != 2 ||
		idx.Summary != "2 cases: 1 OK, 0 NON-STRICT, 0 INFORMATIONAL, 0 UNIMPLEMENTED, 1 FAILED" {
		t.Fatalf("index.json: %s", b)
	}
	var res Result
	b, err = os.ReadFile(filepath.Join(dir, idx.Cases[1].File))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.ID != "6.3.1" || res.Verdict != Failed || len(res.Trace) == 0 || res.Trace[0].Dir != "sent" || len(res.Observed) != 1 {
		t.Fatalf("case file: %s", b)
	}
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<a class="failed" href="#c6.3.1"`, `<a class="ok" href="#c1.1.1"`, `<details id="c6.3.1" class="failed">`, res.Trace[0].Hex} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("index.html lacks %q", want)
		}
	}
}

var finalLine = regexp.MustCompile(`^\d+ cases: \d+ OK, \d+ NON-STRICT, \d+ INFORMATIONAL, \d+ UNIMPLEMENTED, \d+ FAILED$`)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// scaledWaits is the flags giving Main quick's waits for answers, scaled
// with the load: a strict peer's echo of 1 MiB (1.1.9) took longer than
// the default 2 s at load 13 and was "observed nothing".
func scaledWaits() []string {
	o := quick()
	return []string{"--timeout", o.Timeout.String(), "--close-timeout", o.CloseTimeout.String(), "--fail-fast-wait", o.FailFastWait.String()}
}

func TestMainExitsZeroForAStrictServerAndPrintsTheCountsLast(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(append([]string{"server", "--cases", "1.1.*,2.*", startRefServer(t, refEcho{}), "--scale", "0.01", "--agent", "ref"}, scaledWaits()...), &out, &errb)
	if code != 0 || !finalLine.MatchString(lastLine(out.String())) || !strings.Contains(out.String(), " 0 FAILED") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}

func TestMainExitsNonZeroNamingTheFailedCases(t *testing.T) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	code := Main([]string{"server", startRefServer(t, refEcho{skipUTF8: true}), "--cases", "6.3.*", "--report", dir}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "FAILED 6.3.1") || !strings.Contains(out.String(), "FAILED 6.3.2") ||
		lastLine(out.String()) != "2 cases: 0 OK, 0 NON-STRICT, 0 INFORMATIONAL, 0 UNIMPLEMENTED, 2 FAILED" {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		t.Fatal(err)
	}
}

func TestMainListsTheSelectedCases(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"list", "--cases", "2.1,7.9.*", "--exclude", "7.9.1?"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		ids = append(ids, strings.Fields(line)[0])
	}
	if got := strings.Join(ids, " "); got != "2.1 7.9.1 7.9.2 7.9.3 7.9.4 7.9.5 7.9.6 7.9.7 7.9.8 7.9.9" {
		t.Fatalf("listed %q", got)
	}
}

func TestMainRejectsBadUsageWithStatus2(t *testing.T) {
	for _, args := range [][]string{nil, {"server"}, {"client"}, {"nonsense"}, {"server", "ftp://x/"}, {"server", "--bogus", "ws://x/"}} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb); code != 2 {
			t.Errorf("Main(%q) = %d, want 2", args, code)
		}
	}
}

func TestMainClientModeServesTheFuzzingServerPaths(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() {
		code := Main(append([]string{"client", "--addr", "127.0.0.1:0", "--cases", "2.*", "--agent", "ref"}, scaledWaits()...), &out, pw)
		pw.Close()
		done <- code
	}()
	// The first line on stderr names the address Main listens on.
	stderr := bufio.NewReader(pr)
	line, err := stderr.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := regexp.MustCompile(`ws://(\S+)`).FindStringSubmatch(line)
	if addr == nil {
		t.Fatalf("no address in %q", line)
	}
	go io.Copy(io.Discard, stderr)
	if err := refClient(refEcho{})(t.Context(), addr[1]); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || lastLine(out.String()) != "11 cases: 11 OK, 0 NON-STRICT, 0 INFORMATIONAL, 0 UNIMPLEMENTED, 0 FAILED" {
		t.Fatalf("exit %d, stdout:\n%s", code, out.String())
	}
}

func TestClientCasesNoClientRanAreFailed(t *testing.T) {
	o := quick()
	o.Cases = []string{"2.1", "2.2"}
	rep, err := RunClient(t.Context(), o, func(ctx context.Context, addr string) error {
		p, _, err := rawpeer.DialClient(addr, "/runCase?case=1&agent=lazy", nil, 5*time.Second)
		if err != nil {
			return err
		}
		refEcho{}.serve(p, true)
		p, _, err = rawpeer.DialClient(addr, "/getCaseStatus?case=1&agent=lazy", nil, 5*time.Second)
		if err != nil {
			return err
		}
		f, err := p.ReadFrame()
		p.Close()
		if err != nil || string(f.Payload) != `{"behavior":"OK"}` {
			return fmt.Errorf("getCaseStatus: %q, %v", f.Payload, err)
		}
		p2, _, err := rawpeer.DialClient(addr, "/updateReports?agent=lazy", nil, 5*time.Second)
		if err != nil {
			return err
		}
		return p2.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := verdicts(rep)
	if got["2.1"] != OK || got["2.2"] != Failed || rep.Agent != "lazy" {
		t.Fatalf("verdicts %v agent %q; want 2.1 OK, 2.2 FAILED (never run), agent lazy", got, rep.Agent)
	}
}

// startDyingRefServer is startRefServer's echo that goes away (closes its
// listener) once it has accepted n connections.
func startDyingRefServer(t *testing.T, n int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer ln.Close()
		for range n {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				if p, _, err := rawpeer.AcceptServer(nc, nil, 10*time.Second); err == nil {
					refEcho{}.serve(p, false)
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String() + "/echo" // http:// stands for ws://
}

func TestMainStopsInOneLineWithStatus2WhenTheServerGoesAway(t *testing.T) {
	var out, errb bytes.Buffer
	// The first connection is the reachability check, the next two run
	// 1.1.1 and 1.1.2; 1.1.3 finds the server gone.
	code := Main([]string{"server", "--cases", "1.1.*,2.*", startDyingRefServer(t, 3)}, &out, &errb)
	if code != 2 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 ||
		!strings.Contains(errb.String(), "went away during case 1.1.3 (2 cases run), stopped") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
