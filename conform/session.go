package conform

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// Limits of what a Result keeps of the wire.
const (
	maxTraceEntries = 200
	maxTraceHex     = 128 // bytes shown per entry
	maxObservedHex  = 64  // bytes shown per observation
)

// observation is something the peer sent that a case judges: a complete
// message (text or binary), a ping or a pong.
type observation struct {
	kind    string // "message", "ping", "pong"
	opcode  byte   // for messages: rawpeer.OpText or OpBinary
	payload []byte
}

func message(op byte, p []byte) observation { return observation{"message", op, p} }
func textMsg(s string) observation          { return message(rawpeer.OpText, []byte(s)) }
func pong(p []byte) observation             { return observation{"pong", 0, p} }

func (o observation) equal(p observation) bool {
	return o.kind == p.kind && o.opcode == p.opcode && string(o.payload) == string(p.payload)
}

func (o observation) String() string {
	kind := o.kind
	if o.kind == "message" {
		kind = "binary message"
		if o.opcode == rawpeer.OpText {
			kind = "text message"
		}
	}
	return fmt.Sprintf("%s (%d bytes) %s", kind, len(o.payload), shortHex(o.payload, maxObservedHex))
}

func shortHex(b []byte, limit int) string {
	if len(b) <= limit {
		return hex.EncodeToString(b)
	}
	return hex.EncodeToString(b[:limit]) + "…"
}

// event is what the reader goroutine hands to the case: a frame, or the end
// of the connection.
type event struct {
	frame rawpeer.Frame
	err   error
	at    time.Duration
}

// session runs one case over one connection. The case's goroutine owns it:
// it writes, and processes what the reader goroutine queued. The reader
// goroutine only reads frames and queues them.
type session struct {
	peer   *rawpeer.Peer
	client bool // the suite is the client: it masks, the peer under test must not
	opts   *Options
	start  time.Time
	res    *Result

	mu           sync.Mutex
	pending      []event
	trace        []TraceEntry
	traceOmitted int
	notify       chan struct{}
	readerDone   chan struct{}

	obs        []observation
	inMsg      bool
	msgOp      byte
	msgBuf     []byte
	pmd        *codec // permessage-deflate, when negotiated
	compressed bool   // the message being received has RSV1 set
	peerClose  *rawpeer.Frame
	closeSent  bool
	ended      bool
	endErr     error
	violations []string
	writeErr   error

	// sent counts the bytes this case wrote; active is when the peer last
	// showed progress: it took bytes from us or sent a frame. Waits count
	// from it (see waitUntil).
	sent   int
	active time.Time
}

func newSession(p *rawpeer.Peer, client bool, opts *Options, res *Result, pmd *codec) *session {
	s := &session{
		peer: p, client: client, opts: opts, res: res, start: time.Now(), active: time.Now(), pmd: pmd,
		notify: make(chan struct{}, 1), readerDone: make(chan struct{}),
	}
	res.Close = CloseRecord{SentCode: -1, ReceivedCode: -1}
	p.SetReadTimeout(0) // the case's own waits bound reads; finish's Close ends the reader
	p.Trace = s.record
	go s.read()
	return s
}

func (s *session) since() time.Duration { return time.Since(s.start) }

func (s *session) record(out bool, b []byte) {
	dir := "received"
	if out {
		dir = "sent"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.trace) >= maxTraceEntries {
		s.traceOmitted++
		return
	}
	s.trace = append(s.trace, TraceEntry{AtMS: ms(s.since()), Dir: dir, Len: len(b), Hex: shortHex(b, maxTraceHex)})
}

func (s *session) read() {
	defer close(s.readerDone)
	for {
		f, err := s.peer.ReadFrame()
		s.mu.Lock()
		s.pending = append(s.pending, event{frame: f, err: err, at: s.since()})
		s.mu.Unlock()
		select {
		case s.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// drain processes every queued event.
func (s *session) drain() {
	s.mu.Lock()
	evs := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(evs) > 0 {
		s.active = time.Now()
	}
	for _, ev := range evs {
		s.process(ev)
	}
}

// waitUntil processes events until cond holds, the connection ends or d
// passes without progress from the peer. It reports whether cond holds.
//
// d counts from the peer's last progress (a frame from it, or the end of
// one of our writes, which it had to read), not from the call: on a busy
// machine a peer that answers slowly but steadily is waited for, and a
// silent one is given up on after d. A chatty peer cannot hold the case
// for more than maxWaits times d.
func (s *session) waitUntil(cond func() bool, d time.Duration) bool {
	began := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.drain()
		if cond() {
			return true
		}
		if s.ended {
			return false
		}
		select {
		case <-s.notify:
		case <-timer.C:
			s.drain()
			if cond() {
				return true
			}
			now := time.Now()
			until := s.active.Add(d)
			if last := began.Add(maxWaits * d); until.After(last) {
				until = last
			}
			if !until.After(now) {
				return false
			}
			timer.Reset(until.Sub(now))
		}
	}
}

// maxWaits bounds a wait that progress keeps extending, in multiples of
// the wait asked for.
const maxWaits = 10

// answerWait is how long a case waits, from the peer's last progress, for
// an answer to n bytes sent and expected: the base timeout plus the time
// a peer slowed down by a busy machine and a race detector takes to move
// n bytes (a quick peer answers well within it, and the case waits no
// longer than the answer takes).
func (s *session) answerWait(n int) time.Duration {
	return s.opts.Timeout + time.Duration(n)*time.Second/slowRate
}

// slowRate is the rate, in bytes per second, at which a peer under test on
// a loaded machine is still expected to read, process and answer.
const slowRate = 1 << 20

func (s *session) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// process judges one frame from the peer against RFC 6455 and files it.
func (s *session) process(ev event) {
	if ev.err != nil {
		if !s.ended {
			s.ended, s.endErr = true, ev.err
			s.res.Close.TCPClosedAtMS = ms(ev.at)
		}
		return
	}
	f := ev.frame
	if s.peerClose != nil {
		s.violate("frame with opcode %#x after the close frame (RFC 6455 5.5.1)", f.Opcode)
		return
	}
	// RFC 6455 5.1: a client masks every frame, a server masks none.
	if s.client && f.Masked {
		s.violate("server sent a masked frame (RFC 6455 5.1)")
	}
	if !s.client && !f.Masked {
		s.violate("client sent an unmasked frame (RFC 6455 5.1)")
	}
	rsv := f.Rsv
	if s.pmd != nil && rsv == rawpeer.Rsv1 && (f.Opcode == rawpeer.OpText || f.Opcode == rawpeer.OpBinary) {
		rsv = 0 // RFC 7692 6: RSV1 marks the first frame of a compressed message
	}
	if rsv != 0 {
		s.violate("frame with opcode %#x and reserved bits %#x not negotiated (RFC 6455 5.2, RFC 7692 6)", f.Opcode, f.Rsv)
	}
	switch f.Opcode {
	case rawpeer.OpPing, rawpeer.OpPong, rawpeer.OpClose:
		// RFC 6455 5.5: control frames are final and carry <= 125 bytes.
		if !f.Fin || len(f.Payload) > 125 {
			s.violate("control frame %#x fin=%v with %d bytes (RFC 6455 5.5)", f.Opcode, f.Fin, len(f.Payload))
		}
	}
	switch f.Opcode {
	case rawpeer.OpPing:
		// A peer may ping at any time; answer as any endpoint must.
		s.send(rawpeer.Pong(f.Payload))
	case rawpeer.OpPong:
		s.obs = append(s.obs, pong(f.Payload))
	case rawpeer.OpClose:
		fr := f
		s.peerClose = &fr
		s.res.Close.ReceivedAtMS = ms(ev.at)
		s.res.Close.PeerInitiated = !s.closeSent
		code, reason, ok := rawpeer.ParseClose(f.Payload)
		s.res.Close.ReceivedCode = int(code)
		s.res.Close.ReceivedBody = shortHex(f.Payload, maxObservedHex)
		s.res.Close.ReceivedReason = string(reason)
		switch {
		case !ok:
			s.violate("close frame with a 1-byte body (RFC 6455 5.5.1)")
		case len(f.Payload) >= 2 && !validCloseCode(code):
			s.violate("close frame with invalid code %d (RFC 6455 7.4)", code)
		case !rawpeer.ValidUTF8(reason):
			s.violate("close reason is not valid UTF-8 (RFC 6455 5.5.1)")
		}
	case rawpeer.OpText, rawpeer.OpBinary:
		if s.inMsg {
			s.violate("new data frame inside a fragmented message (RFC 6455 5.4)")
		}
		s.inMsg, s.msgOp, s.msgBuf = true, f.Opcode, append([]byte(nil), f.Payload...)
		s.compressed = s.pmd != nil && f.Rsv&rawpeer.Rsv1 != 0
		s.endFragment(f.Fin)
	case rawpeer.OpContinuation:
		if !s.inMsg {
			s.violate("continuation frame with no message to continue (RFC 6455 5.4)")
			return
		}
		s.msgBuf = append(s.msgBuf, f.Payload...)
		s.endFragment(f.Fin)
	default:
		s.violate("frame with reserved opcode %#x (RFC 6455 5.2)", f.Opcode)
	}
}

func (s *session) endFragment(fin bool) {
	if !fin {
		return
	}
	if s.compressed {
		p, err := s.pmd.inflate(s.msgBuf)
		if err != nil {
			s.violate("compressed message does not inflate: %v (RFC 7692 7.2.2)", err)
		}
		s.msgBuf = p
	}
	if s.msgOp == rawpeer.OpText && !rawpeer.ValidUTF8(s.msgBuf) {
		s.violate("text message that is not valid UTF-8 (RFC 6455 8.1)")
	}
	s.obs = append(s.obs, message(s.msgOp, s.msgBuf))
	s.inMsg, s.msgBuf = false, nil
}

// validCloseCode reports whether a peer may send code in a close frame:
// RFC 6455 7.4.1 and the IANA registry (1012-1014 registered since), and
// 3000-4999 for libraries and applications. 1004-1006 and 1015 are never
// sent on the wire.
func validCloseCode(code uint16) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// wire returns f's bytes as this side sends it: masked with a fresh random
// key when the suite is the client, unless the case set a mask itself.
func (s *session) wire(f rawpeer.Frame) []byte {
	if s.client && !f.Masked {
		f.Masked = true
		rand.Read(f.Mask[:])
	}
	return rawpeer.Build(f)
}

func (s *session) writeRaw(b []byte) {
	if s.writeErr != nil {
		return
	}
	// Enough for any loopback peer to take b: the base timeout and 1 MiB/s.
	s.peer.SetWriteTimeout(s.opts.Timeout + time.Duration(len(b))*time.Second/(1<<20))
	if err := s.peer.WriteRaw(b); err != nil {
		s.writeErr = err
		return
	}
	s.sent += len(b)
	s.active = time.Now()
}

func (s *session) noteClose(f rawpeer.Frame) {
	if f.Opcode == rawpeer.OpClose && !s.closeSent {
		s.closeSent = true
		code, _, _ := rawpeer.ParseClose(f.Payload)
		s.res.Close.SentCode = int(code)
		s.res.Close.SentBodyHex = shortHex(f.Payload, maxObservedHex)
		s.res.Close.SentAtMS = ms(s.since())
	}
}

// frames returns the bytes of fs as this side sends them, noting a close
// frame among them.
func (s *session) frames(fs []rawpeer.Frame) []byte {
	var b []byte
	for _, f := range fs {
		s.noteClose(f)
		b = append(b, s.wire(f)...)
	}
	return b
}

// send writes frames in one write, as one chop.
func (s *session) send(fs ...rawpeer.Frame) { s.writeRaw(s.frames(fs)) }

// sendFramewise writes each frame in its own write.
func (s *session) sendFramewise(fs ...rawpeer.Frame) {
	for _, f := range fs {
		s.send(f)
	}
}

// sendChopped writes the frames' bytes in writes of chunk bytes.
func (s *session) sendChopped(chunk int, fs ...rawpeer.Frame) {
	b := s.frames(fs)
	for len(b) > 0 && s.writeErr == nil {
		n := min(chunk, len(b))
		s.writeRaw(b[:n])
		b = b[n:]
	}
}

// finish tears the connection down and waits for the reader goroutine.
func (s *session) finish() {
	s.peer.Close()
	<-s.readerDone
	s.drain()
	s.mu.Lock()
	s.res.Trace, s.res.TraceOmitted = s.trace, s.traceOmitted
	s.mu.Unlock()
	s.res.DurationMS = ms(s.since())
	for _, o := range s.obs {
		s.res.Observed = append(s.res.Observed, o.String())
	}
	if s.res.Observed == nil {
		s.res.Observed = []string{}
	}
}

func describeAlt(obs []observation) string {
	if len(obs) == 0 {
		return "nothing"
	}
	parts := make([]string, len(obs))
	for i, o := range obs {
		parts[i] = o.String()
	}
	return strings.Join(parts, ", ")
}
