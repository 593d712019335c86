package conform

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/slowness"
)

// section106 returns the verdict each case of section 106 must get: the
// fail-fast cases (x.1 to x.4) failFast, the valid text (x.5) valid, the
// text that ends inside a code point (x.6, x.7) endsInside.
func section106(failFast, valid, endsInside Verdict) map[string]Verdict {
	want := map[string]Verdict{}
	for sub := 1; sub <= 2; sub++ {
		for i, v := range []Verdict{failFast, failFast, failFast, failFast, valid, endsInside, endsInside} {
			want[fmt.Sprintf("106.%d.%d", sub, i+1)] = v
		}
	}
	return want
}

func checkVerdicts(t *testing.T, rep *Report, want map[string]Verdict) {
	t.Helper()
	got := verdicts(rep)
	if len(got) != len(want) {
		t.Errorf("%d results, want %d", len(got), len(want))
	}
	for _, r := range rep.Results {
		if r.Verdict != want[r.ID] {
			t.Errorf("%s got %s, want %s: %v %v", r.ID, r.Verdict, want[r.ID], r.BehaviorNotes, r.CloseNotes)
		}
	}
}

// npm ws inflates each compressed frame as it arrives but checks UTF-8 once
// the message is complete: NON-STRICT where compressed text must fail at
// its first bad byte, OK on the rest of section 106.
func TestNpmWsValidatesCompressedTextOnlyAtTheMessageEnd(t *testing.T) {
	o := neverFailsFast()
	o.Cases = []string{"106.*"}
	want := section106(NonStrict, OK, OK)
	t.Run("server", func(t *testing.T) {
		rep, err := RunServer(t.Context(), startNpmWsServer(t, "DEFLATE=1"), o)
		if err != nil {
			t.Fatal(err)
		}
		logReport(t, rep)
		checkVerdicts(t, rep, want)
	})
	t.Run("client", func(t *testing.T) {
		rep, err := RunClient(t.Context(), o, npmWsClient(t, "DEFLATE=1"))
		if err != nil {
			t.Fatal(err)
		}
		logReport(t, rep)
		checkVerdicts(t, rep, want)
	})
}

// A server that echoes compressed frames as they come, never inflating
// them, fails every invalid case of section 106 and passes the valid one:
// what the suite sends is one well-formed compressed message per case,
// and the echo of invalid text is caught.
func TestServerThatEchoesCompressedTextUncheckedFailsSection106(t *testing.T) {
	o := quick()
	o.Cases = []string{"106.*"}
	o.FailFastWait = 50 * time.Millisecond // it never fails, so the wait changes nothing
	rep, err := RunServer(t.Context(), startVerbatimEcho(t, "permessage-deflate; client_no_context_takeover; server_no_context_takeover"), o)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdicts(t, rep, section106(Failed, OK, Failed))
	for _, r := range rep.Results {
		if r.Verdict != Failed {
			continue
		}
		if !strings.Contains(strings.Join(r.BehaviorNotes, " "), "not valid UTF-8") {
			t.Errorf("%s: FAILED for %v, want for echoing invalid UTF-8", r.ID, r.BehaviorNotes)
		}
	}
}

// The reference peer with permessage-deflate inflates each compressed
// message as its bytes arrive: OK in all of section 106, as server and as
// client. Validating only once the message is complete is NON-STRICT
// where the text must fail fast; not validating at all is FAILED.
func TestReferencePeerWithDeflateGetsItsVerdictsInSection106(t *testing.T) {
	o := quick()
	o.Cases = []string{"106.*"}
	// Each answer is awaited until it comes (a failure ends the wait), so
	// a long timeout only keeps a loaded machine from changing a verdict.
	o.Timeout = slowness.Scale(10 * time.Second)
	for _, tt := range []struct {
		name string
		peer refEcho
		want map[string]Verdict
	}{
		{"strict", refEcho{deflate: true}, section106(OK, OK, OK)},
		{"late", refEcho{deflate: true, lateUTF8: true}, section106(NonStrict, OK, OK)},
		{"unchecked", refEcho{deflate: true, skipUTF8: true}, section106(Failed, OK, Failed)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := *o
			if tt.name != "strict" {
				// A peer that never fails fast gets the same verdict
				// however short the wait for it to do so.
				o.FailFastWait = 50 * time.Millisecond
			}
			roles(t, tt.peer, &o, func(t *testing.T, rep *Report) { checkVerdicts(t, rep, tt.want) })
		})
	}
}
