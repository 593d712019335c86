package conform

import (
	"fmt"
	"strings"
	"time"
)

// Verdict is the judgement of one case, or of one side of it (behaviour,
// close behaviour), with the meanings of the classic suite.
type Verdict string

// The verdicts, from best to worst. Only OK and INFORMATIONAL let a run
// pass (see Report.Passed).
const (
	// OK: the peer did what the RFC requires.
	OK Verdict = "OK"
	// Informational: the case measures or records something the RFC leaves
	// open (timings, limits); nothing was wrong.
	Informational Verdict = "INFORMATIONAL"
	// Unimplemented: the peer does not implement the optional feature the
	// case tests (permessage-deflate not negotiated).
	Unimplemented Verdict = "UNIMPLEMENTED"
	// NonStrict: the peer behaved acceptably but not as strictly as the RFC
	// asks (a SHOULD not followed, a failure detected later than possible).
	NonStrict Verdict = "NON-STRICT"
	// Failed: the peer broke a MUST of the RFC.
	Failed Verdict = "FAILED"
)

func (v Verdict) rank() int {
	switch v {
	case OK:
		return 0
	case Informational:
		return 1
	case Unimplemented:
		return 2
	case NonStrict:
		return 3
	}
	return 4
}

// worse returns the worse of two verdicts; the case verdict is the worse of
// its behaviour and its close behaviour.
func worse(a, b Verdict) Verdict {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Result is what one case did: its verdicts, the reasons behind them, and
// the record of what was sent and observed. It is written as one JSON file
// per case.
type Result struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Expectation string `json:"expectation"`

	// Verdict is the worse of Behavior and CloseBehavior.
	Verdict       Verdict  `json:"verdict"`
	Behavior      Verdict  `json:"behavior"`
	BehaviorNotes []string `json:"behaviorNotes,omitempty"`
	CloseBehavior Verdict  `json:"closeBehavior"`
	CloseNotes    []string `json:"closeNotes,omitempty"`

	// Observed lists, in order, the messages and pongs received before the
	// peer's close frame; Expected the acceptable sequences.
	Observed []string `json:"observed"`
	Expected []string `json:"expected,omitempty"`

	// Close records the close handshake: who closed, with what, and when
	// (milliseconds since the connection opened).
	Close CloseRecord `json:"close"`

	// Info carries measurements (section 9 timings and throughput).
	Info map[string]any `json:"info,omitempty"`

	DurationMS float64 `json:"durationMs"`

	// Trace is the wire, entry by entry: chunks written and frames read, in
	// hex, cut after a limit (TraceOmitted counts what was left out).
	Trace        []TraceEntry `json:"trace"`
	TraceOmitted int          `json:"traceOmitted,omitempty"`
}

// CloseRecord describes how a case's connection ended. Codes are -1 when no
// close frame went that way and 0 when its body held no code (empty, or a
// single byte); the bodies in hex say exactly what it was.
type CloseRecord struct {
	SentCode       int     `json:"sentCode"`
	SentBodyHex    string  `json:"sentBodyHex,omitempty"`
	SentAtMS       float64 `json:"sentAtMs,omitempty"`
	ReceivedCode   int     `json:"receivedCode"`
	ReceivedBody   string  `json:"receivedBodyHex,omitempty"`
	ReceivedReason string  `json:"receivedReason,omitempty"`
	ReceivedAtMS   float64 `json:"receivedAtMs,omitempty"`
	// PeerInitiated is set when the peer's close frame came before ours.
	PeerInitiated bool `json:"peerInitiated"`
	// TCPClosedBy is "peer" when the peer closed TCP (EOF or reset) and
	// "suite" when the suite had to.
	TCPClosedBy   string  `json:"tcpClosedBy"`
	TCPClosedAtMS float64 `json:"tcpClosedAtMs,omitempty"`
}

// TraceEntry is one chunk written ("sent") or one frame read ("received").
type TraceEntry struct {
	AtMS float64 `json:"atMs"`
	Dir  string  `json:"dir"`
	Len  int     `json:"len"`
	Hex  string  `json:"hex"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Counts is the number of cases per verdict.
type Counts struct {
	OK, NonStrict, Informational, Unimplemented, Failed int
}

// Total is the number of cases counted.
func (c Counts) Total() int {
	return c.OK + c.NonStrict + c.Informational + c.Unimplemented + c.Failed
}

// String is the final line of a run:
// "N cases: a OK, b NON-STRICT, c INFORMATIONAL, d UNIMPLEMENTED, e FAILED".
func (c Counts) String() string {
	return fmt.Sprintf("%d cases: %d OK, %d NON-STRICT, %d INFORMATIONAL, %d UNIMPLEMENTED, %d FAILED",
		c.Total(), c.OK, c.NonStrict, c.Informational, c.Unimplemented, c.Failed)
}

func (c *Counts) add(v Verdict) {
	switch v {
	case OK:
		c.OK++
	case NonStrict:
		c.NonStrict++
	case Informational:
		c.Informational++
	case Unimplemented:
		c.Unimplemented++
	default:
		c.Failed++
	}
}

// Report is the outcome of a run: every selected case's Result in the
// order of the case table.
type Report struct {
	// Agent names the implementation under test.
	Agent string `json:"agent"`
	// Mode is "server" (the suite tested a server) or "client".
	Mode string `json:"mode"`
	// Target is the URL or the listening address.
	Target     string    `json:"target"`
	Started    time.Time `json:"started"`
	DurationMS float64   `json:"durationMs"`
	Results    []Result  `json:"-"`
}

// Counts counts the verdicts of all results.
func (r *Report) Counts() Counts {
	var c Counts
	for _, res := range r.Results {
		c.add(res.Verdict)
	}
	return c
}

// Passed reports whether every case is OK or INFORMATIONAL: the condition
// for exit status 0.
func (r *Report) Passed() bool {
	for _, res := range r.Results {
		if res.Verdict != OK && res.Verdict != Informational {
			return false
		}
	}
	return true
}

// Failures returns one line per case that is neither OK nor INFORMATIONAL:
// its id, verdict and notes.
func (r *Report) Failures() []string {
	var out []string
	for _, res := range r.Results {
		if res.Verdict == OK || res.Verdict == Informational {
			continue
		}
		notes := append(append([]string{}, res.BehaviorNotes...), res.CloseNotes...)
		out = append(out, fmt.Sprintf("%s %s: %s", res.Verdict, res.ID, strings.Join(notes, "; ")))
	}
	return out
}
