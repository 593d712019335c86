package conform

import (
	"fmt"
	"slices"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// alt is one acceptable sequence of observations and the verdict it earns.
type alt struct {
	obs     []observation
	verdict Verdict
	note    string
}

// expect states what a case accepts once its frames are sent.
type expect struct {
	// fail: the peer must fail the connection, with a close frame whose code
	// is in codes or by dropping TCP (RFC 6455 7.1.7). Otherwise the suite
	// closes with 1000 (unless the case already sent a close) and the
	// peer's reply must carry a code in codes (default 1000).
	fail  bool
	codes []uint16

	// alts are the acceptable observation sequences, tried in order.
	alts []alt
	// match, when set, replaces alts: it judges the observations.
	match func(obs []observation) (Verdict, string)
	// done, when set, says when to stop waiting for observations; by
	// default the suite waits for as many as the longest alt has.
	done func(obs []observation) bool

	// closeInfo: the close behaviour is recorded, not judged.
	closeInfo bool
	// limitOK: the peer may close with 1009 (message too big) or 1008 (a
	// policy limit such as the number of fragments) instead of answering;
	// both sides of the verdict are then INFORMATIONAL.
	limitOK bool
	// wait replaces Options.Timeout for the observations.
	wait time.Duration
}

func echoes(obs ...observation) expect { return expect{alts: []alt{{obs: obs, verdict: OK}}} }

// failsWith expects the peer to fail the connection with code after
// answering prefix (NON-STRICT when it fails before answering prefix, as
// the classic suite rates it, if lenient is set).
func failsWith(code uint16, lenient bool, prefix ...observation) expect {
	e := expect{fail: true, codes: []uint16{code}, alts: []alt{{obs: prefix, verdict: OK}}}
	if lenient && len(prefix) > 0 {
		e.alts = append(e.alts, alt{verdict: NonStrict, note: "failed the connection before answering the valid frames sent ahead of the bad one"})
	}
	return e
}

func (e expect) wants() int {
	n := 0
	for _, a := range e.alts {
		n = max(n, len(a.obs))
	}
	return n
}

// answerBytes is the largest payload the alts expect, in total.
func (e expect) answerBytes() int {
	n := 0
	for _, a := range e.alts {
		m := 0
		for _, o := range a.obs {
			m += len(o.payload)
		}
		n = max(n, m)
	}
	return n
}

func (e expect) isDone(obs []observation) bool {
	if e.done != nil {
		return e.done(obs)
	}
	return len(obs) >= e.wants()
}

// diverged reports whether obs can no longer become any alt.
func (e expect) diverged(obs []observation) bool {
	if e.match != nil {
		return false
	}
	for _, a := range e.alts {
		if len(obs) <= len(a.obs) && prefixOf(obs, a.obs) {
			return false
		}
	}
	return true
}

func prefixOf(obs, full []observation) bool {
	for i := range obs {
		if !obs[i].equal(full[i]) {
			return false
		}
	}
	return true
}

func (e expect) judge(obs []observation) (Verdict, string) {
	if e.match != nil {
		return e.match(obs)
	}
	for _, a := range e.alts {
		if len(obs) == len(a.obs) && prefixOf(obs, a.obs) {
			return a.verdict, a.note
		}
	}
	return Failed, fmt.Sprintf("observed %s", describeAlt(obs))
}

func (e expect) describe() []string {
	if e.match != nil {
		return nil
	}
	var out []string
	for _, a := range e.alts {
		out = append(out, fmt.Sprintf("%s: %s", a.verdict, describeAlt(a.obs)))
	}
	return out
}

// conclude waits for what e expects, runs the close handshake and sets the
// verdicts. Every case ends here.
func (s *session) conclude(e expect) {
	r := s.res
	r.Expected = e.describe()
	wait := e.wait
	if wait == 0 {
		wait = s.answerWait(s.sent + e.answerBytes())
	}
	if e.fail {
		s.waitUntil(func() bool { return s.peerClose != nil || e.diverged(s.obs) }, wait)
	} else {
		s.waitUntil(func() bool { return e.isDone(s.obs) || s.peerClose != nil || e.diverged(s.obs) }, wait)
	}
	failedConn := s.peerClose != nil || s.ended

	// Behaviour: what arrived before the peer's close frame.
	beh, note := e.judge(s.obs)
	r.Behavior = beh
	if note != "" {
		r.BehaviorNotes = append(r.BehaviorNotes, note)
	}
	if e.fail && !failedConn && r.Behavior != Failed {
		r.Behavior = Failed
		r.BehaviorNotes = append(r.BehaviorNotes, fmt.Sprintf("connection not failed within %v", wait))
	}
	limited := e.limitOK && s.peerClose != nil && s.res.Close.PeerInitiated && isLimitCode(s.res.Close.ReceivedCode)

	// The close handshake.
	if !s.closeSent && !s.ended {
		switch {
		case s.peerClose == nil:
			s.send(rawpeer.Close(1000, ""))
		default:
			// Answer the peer's close as RFC 6455 5.5.1 asks, echoing its code.
			code, _, _ := rawpeer.ParseClose(s.peerClose.Payload)
			if len(s.peerClose.Payload) >= 2 && !validCloseCode(code) {
				code = 1002
			}
			s.send(rawpeer.Close(code, ""))
		}
	}
	closeWait := s.opts.CloseTimeout
	if !e.fail || failedConn {
		s.waitUntil(func() bool { return s.peerClose != nil }, closeWait)
	}
	if s.client {
		// RFC 6455 7.1.1: the server SHOULD close TCP first.
		if s.waitUntil(func() bool { return false }, closeWait); s.ended {
			r.Close.TCPClosedBy = "peer"
		} else {
			r.Close.TCPClosedBy = "suite"
		}
	} else if s.ended {
		r.Close.TCPClosedBy = "peer"
	} else {
		r.Close.TCPClosedBy = "suite"
	}

	r.CloseBehavior, r.CloseNotes = s.judgeClose(e, failedConn)
	if len(s.violations) > 0 {
		r.Behavior = Failed
		r.BehaviorNotes = append(r.BehaviorNotes, s.violations...)
	}
	if limited {
		r.Behavior, r.CloseBehavior = Informational, Informational
		r.BehaviorNotes = append(r.BehaviorNotes, fmt.Sprintf("the peer refused the message with %d: a configured limit", s.res.Close.ReceivedCode))
	}
	r.Verdict = worse(r.Behavior, r.CloseBehavior)
}

func (s *session) judgeClose(e expect, failedConn bool) (Verdict, []string) {
	c := s.res.Close
	var notes []string
	got := func() string {
		switch {
		case s.peerClose != nil && len(s.peerClose.Payload) == 0:
			return "an empty close body"
		case s.peerClose != nil && len(s.peerClose.Payload) == 1:
			return "a 1-byte close body"
		}
		return fmt.Sprintf("code %d", c.ReceivedCode)
	}
	if e.closeInfo {
		switch {
		case s.peerClose != nil:
			notes = append(notes, "peer closed with "+got())
		case s.ended:
			notes = append(notes, "peer dropped TCP without a close frame")
		default:
			notes = append(notes, "peer neither closed nor dropped the connection")
		}
		return Informational, notes
	}
	if e.fail {
		switch {
		case s.peerClose != nil && slices.Contains(e.codes, uint16(c.ReceivedCode)):
		case s.peerClose != nil:
			return Failed, []string{fmt.Sprintf("failed the connection with %s, want %v", got(), e.codes)}
		case s.ended:
			notes = append(notes, "failed the connection by dropping TCP without a close frame")
		default:
			return Failed, []string{"the connection was not failed"}
		}
	} else {
		codes := e.codes
		if len(codes) == 0 {
			codes = []uint16{1000}
		}
		switch {
		case s.peerClose == nil && s.ended:
			return Failed, []string{"peer dropped TCP without a close frame (1006)"}
		case s.peerClose == nil:
			return Failed, []string{fmt.Sprintf("no close frame within %v of ours", s.opts.CloseTimeout)}
		case c.PeerInitiated && !(e.limitOK && isLimitCode(c.ReceivedCode)):
			return Failed, []string{"peer closed the connection unprompted with " + got()}
		case !slices.Contains(codes, uint16(c.ReceivedCode)):
			return Failed, []string{fmt.Sprintf("close reply with %s, want %v", got(), codes)}
		}
	}
	if s.client && c.TCPClosedBy != "peer" {
		return NonStrict, append(notes, fmt.Sprintf("server kept TCP open %v after the close handshake (RFC 6455 7.1.1: it SHOULD close first)", s.opts.CloseTimeout))
	}
	return OK, notes
}

// isLimitCode reports whether a close code names a limit of the peer: 1009
// (message too big) or 1008 (policy, e.g. too many fragments).
func isLimitCode(code int) bool { return code == 1008 || code == 1009 }
