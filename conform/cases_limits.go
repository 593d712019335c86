package conform

import (
	"fmt"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// patterned returns n bytes of valid UTF-8 text mixing 1- to 4-byte
// characters, so that fragment and chop boundaries fall inside characters.
func patterned(n int) []byte {
	const unit = "BAsd7&jh23 Hello-µ@ßöäüàá-€𝄞 "
	p := make([]byte, 0, n)
	for len(p)+len(unit) <= n {
		p = append(p, unit...)
	}
	for len(p) < n {
		p = append(p, '*')
	}
	return p
}

func patternedBinary(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}

func payloadFor(op byte, n int) []byte {
	if op == rawpeer.OpText {
		return patterned(n)
	}
	return patternedBinary(n)
}

// informational expects the echoes and rates them INFORMATIONAL; a peer
// that refuses a size with 1009 is within its rights.
func informational(wait time.Duration, obs ...observation) expect {
	e := echoes(obs...)
	e.alts[0].verdict = Informational
	e.limitOK = true
	e.wait = wait
	return e
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// transferWait is the time a case allows for n bytes each way, on top of
// the base timeout: slow enough for any loopback peer.
func (s *session) transferWait(n int) time.Duration {
	return s.opts.Timeout + time.Duration(n)*time.Second/(2<<20)
}

// timed records the throughput of a finished exchange of n payload bytes
// each way in count messages.
func (s *session) timed(start time.Time, count, n int) {
	d := time.Since(start)
	if s.res.Info == nil {
		s.res.Info = map[string]any{}
	}
	s.res.Info["messages"] = count
	s.res.Info["payloadBytes"] = n
	s.res.Info["roundTripMs"] = ms(d)
	if d > 0 {
		s.res.Info["MiBps"] = float64(n) / (1 << 20) / d.Seconds()
	}
}

// Section 9: limits and throughput, timed and INFORMATIONAL. Options.Scale
// shrinks the sizes.
func (t *caseTable) limits() {
	kinds := []struct {
		op   byte
		name string
	}{{rawpeer.OpText, "text"}, {rawpeer.OpBinary, "binary"}}
	scaled := func(o *Options, n int) int { return max(1, int(float64(n)*o.Scale)) }

	for sub, k := range kinds {
		for i, size := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20} {
			t.add(fmt.Sprintf("9.%d.%d", 1+sub, i+1), fmt.Sprintf("Send a %s message of %s (times Options.Scale) in one frame.", k.name, sizeName(size)),
				"Echo it; the time is recorded (INFORMATIONAL).", func(s *session) {
					n := scaled(s.opts, size)
					p := payloadFor(k.op, n)
					start := time.Now()
					s.send(rawpeer.Frame{Fin: true, Opcode: k.op, Payload: p})
					e := informational(s.transferWait(n), message(k.op, p))
					if s.waitUntil(func() bool { return len(s.obs) > 0 || s.peerClose != nil }, e.wait) && len(s.obs) > 0 {
						s.timed(start, 1, n)
					}
					s.conclude(e)
				})
		}
	}
	for sub, k := range kinds {
		for i, frag := range []int{64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
			t.add(fmt.Sprintf("9.%d.%d", 3+sub, i+1), fmt.Sprintf("Send a %s message of 4 MiB (times Options.Scale) in fragments of %s.", k.name, sizeName(frag)),
				"Echo it; the time is recorded (INFORMATIONAL).", func(s *session) {
					n := scaled(s.opts, 4<<20)
					p := payloadFor(k.op, n)
					var fs []rawpeer.Frame
					for off := 0; off < n; off += frag {
						op := rawpeer.OpContinuation
						if off == 0 {
							op = k.op
						}
						fs = append(fs, rawpeer.Fragment(op, p[off:min(off+frag, n)], off+frag >= n))
					}
					start := time.Now()
					s.send(fs...)
					e := informational(s.transferWait(n), message(k.op, p))
					if s.waitUntil(func() bool { return len(s.obs) > 0 || s.peerClose != nil }, e.wait) && len(s.obs) > 0 {
						s.timed(start, 1, n)
					}
					s.conclude(e)
				})
		}
	}
	for sub, k := range kinds {
		for i, chop := range []int{64, 128, 256, 512, 1 << 10, 2 << 10} {
			t.add(fmt.Sprintf("9.%d.%d", 5+sub, i+1), fmt.Sprintf("Send a %s message of 1 MiB (times Options.Scale) in one frame, written in chops of %d bytes.", k.name, chop),
				"Echo it; the time is recorded (INFORMATIONAL).", func(s *session) {
					n := scaled(s.opts, 1<<20)
					p := payloadFor(k.op, n)
					start := time.Now()
					s.sendChopped(chop, rawpeer.Frame{Fin: true, Opcode: k.op, Payload: p})
					e := informational(s.transferWait(n), message(k.op, p))
					if s.waitUntil(func() bool { return len(s.obs) > 0 || s.peerClose != nil }, e.wait) && len(s.obs) > 0 {
						s.timed(start, 1, n)
					}
					s.conclude(e)
				})
		}
	}
	for sub, k := range kinds {
		for i, size := range []int{0, 16, 64, 256, 1 << 10, 4 << 10} {
			t.add(fmt.Sprintf("9.%d.%d", 7+sub, i+1), fmt.Sprintf("Send 1000 (times Options.Scale, at least 10) %s messages of %d bytes, each after the echo of the one before.", k.name, size),
				"Echo each; the round trips are timed (INFORMATIONAL).", func(s *session) {
					count := max(10, int(1000*s.opts.Scale))
					p := payloadFor(k.op, size)
					var want []observation
					start := time.Now()
					for m := range count {
						s.send(rawpeer.Frame{Fin: true, Opcode: k.op, Payload: p})
						want = append(want, message(k.op, p))
						if !s.waitUntil(func() bool { return len(s.obs) > m || s.peerClose != nil }, s.opts.Timeout) || s.peerClose != nil {
							break
						}
					}
					if len(s.obs) == count {
						s.timed(start, count, count*size)
						s.res.Info["meanRoundTripUs"] = float64(time.Since(start).Microseconds()) / float64(count)
					}
					s.conclude(informational(s.opts.Timeout, want...))
				})
		}
	}
}

// Section 10: miscellaneous.
func (t *caseTable) misc() {
	t.add("10.1.1", "Send a text message of 65536 bytes in fragments of 1300 bytes.",
		"Echo the whole message, fragmented or not (auto-fragmentation is the sender's choice).", func(s *session) {
			p := patterned(65536)
			var fs []rawpeer.Frame
			for off := 0; off < len(p); off += 1300 {
				op := rawpeer.OpContinuation
				if off == 0 {
					op = rawpeer.OpText
				}
				fs = append(fs, rawpeer.Fragment(op, p[off:min(off+1300, len(p))], off+1300 >= len(p)))
			}
			s.send(fs...)
			s.conclude(echoes(message(rawpeer.OpText, p)))
		})
}
