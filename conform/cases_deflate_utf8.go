package conform

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/rallyws/rally/internal/rawpeer"
)

// Section 106: UTF-8 of compressed text, section 6 under permessage-deflate.
//
// The suite's own sections are numbered from 100 up, so they never collide
// with the classic suite's (1 to 13) and say which classic section they
// extend: 106 is 6 (UTF-8) with compressed messages. Like 12 and 13 they run
// only when selected by name, and a peer that does not negotiate
// permessage-deflate gets UNIMPLEMENTED.
//
// 106.1.x negotiate context takeover both ways, 106.2.x no context takeover
// either way; the seven cases x are the same in both:
//
//  1. the first compressed fragment inflates to invalid UTF-8 (U+110000)
//     while the message goes on (fail fast, as 6.4.1);
//  2. the second compressed fragment inflates to the byte that makes the
//     text invalid (a code point cut across fragments, as 6.4.2);
//  3. one compressed frame whose first TCP write inflates to invalid UTF-8
//     (as 6.4.3);
//  4. one compressed frame whose second TCP write inflates to the byte that
//     makes the text invalid (as 6.4.4);
//  5. valid text whose code points of 2, 3 and 4 bytes are cut across
//     compressed fragments, each inflating to one byte: echoed;
//  6. text that ends inside a code point, in 2 compressed fragments;
//  7. the same in one compressed frame.
//
// Each case first sends a valid compressed message and waits for its echo,
// and its text starts with the same bytes, so that with context takeover
// the message under test refers back into the one before it.

// pmdNoTakeover negotiates permessage-deflate without context takeover
// either way.
var pmdNoTakeover = &pmdCase{
	offer: "permessage-deflate; client_no_context_takeover; server_no_context_takeover",
	respond: func(extension) string {
		return "permessage-deflate; client_no_context_takeover; server_no_context_takeover"
	},
}

// compressedFragments returns one compressed message as frames: one frame
// per chunk but the last, which is cut into frames of at most frag bytes
// (RSV1 on the first frame, RFC 7692 6; FIN on the last).
func compressedFragments(op byte, chunks [][]byte, frag int) []rawpeer.Frame {
	payloads := slices.Clone(chunks[:len(chunks)-1])
	last := chunks[len(chunks)-1]
	for off := 0; off == 0 || off < len(last); off += frag {
		payloads = append(payloads, last[off:min(off+frag, len(last))])
	}
	fs := make([]rawpeer.Frame, len(payloads))
	for i, p := range payloads {
		fs[i] = rawpeer.Fragment(rawpeer.OpContinuation, p, i == len(payloads)-1)
	}
	fs[0].Opcode, fs[0].Rsv = op, rawpeer.Rsv1
	return fs
}

// warmUp sends p as one compressed text message and waits for its echo;
// it returns the echo the case must see first.
func (s *session) warmUp(p []byte) []observation {
	seen := len(s.obs)
	s.send(s.compressedFrames(rawpeer.OpText, p, 0)...)
	s.waitUntil(func() bool { return len(s.obs) > seen || s.peerClose != nil }, s.opts.Timeout)
	return []observation{message(rawpeer.OpText, p)}
}

// compressedUTF8 adds section 106.
func (t *caseTable) compressedUTF8() {
	negotiations := []struct {
		name string
		pmd  *pmdCase
	}{
		{"context takeover", pmdDefault},
		{"no context takeover either way", pmdNoTakeover},
	}
	lead := patterned(1 << 10)
	k := unhex(kosme)
	const restSize, frag = 256 << 10, 16 << 10
	rest := randomText(restSize, 106)
	join := func(ps ...[]byte) []byte { return bytes.Join(ps, nil) }
	// heads are the parts sent before the suite holds back the rest: each
	// is one fragment (or one TCP write), and the last makes the text
	// invalid.
	invalid := []struct {
		heads [][]byte
		names []string // what each head is, for the descriptions
	}{
		{[][]byte{join(lead, k, unhex("f4908080"))}, []string{"the 1 KiB of the message before, κόσμε and U+110000 (f4908080)"}},
		{[][]byte{join(lead, k, unhex("f4")), unhex("90")}, []string{"the 1 KiB of the message before, κόσμε and f4", "90 (the first byte that is wrong)"}},
	}
	inflating := func(unit string, names []string) string {
		d := fmt.Sprintf("the first %s inflating to %s", unit, names[0])
		if len(names) > 1 {
			d += ", the second to " + names[1]
		}
		return d
	}
	const failFastExp = "Fail the connection (1007) when the part that makes the text invalid arrives (OK), or only once the message is complete (NON-STRICT)."
	for sub, n := range negotiations {
		id := func(i int) string { return fmt.Sprintf("106.%d.%d", sub+1, i) }
		before := fmt.Sprintf("With permessage-deflate (%s), send a compressed text message of 1 KiB and wait for its echo; then ", n.name)

		for i, v := range invalid {
			t.addPMD(id(1+i),
				before+fmt.Sprintf("send a compressed text message of %d KiB in compressed fragments, %s, then a ping; only after the pong (or a timeout), the rest (letters) in fragments of %d KiB.", restSize>>10, inflating("fragment", v.names), frag>>10),
				failFastExp+" The ping tells that the peer has read the invalid fragment.", n.pmd, func(s *session) {
					prefix := s.warmUp(lead)
					fs := compressedFragments(rawpeer.OpText, s.pmd.compressParts(append(slices.Clone(v.heads), rest)...), frag)
					probe := []byte("fail-fast probe")
					seen := len(s.obs)
					s.sendFramewise(append(slices.Clone(fs[:len(v.heads)]), ping(probe))...)
					s.waitUntil(func() bool { return len(s.obs) > seen || s.peerClose != nil }, s.opts.Timeout)
					failedFast := s.peerClose != nil || s.ended
					if !failedFast {
						s.send(fs[len(v.heads):]...)
					}
					s.concludeFailFastAfter(failedFast, prefix, pong(probe))
				})
		}

		for i, v := range invalid {
			t.addPMD(id(3+i),
				before+fmt.Sprintf("send one compressed text frame of %d KiB (inflated) in TCP writes, %s; wait, then write the rest of the frame.", restSize>>10, inflating("write (with the frame header)", v.names)),
				failFastExp, n.pmd, func(s *session) {
					prefix := s.warmUp(lead)
					chunks := s.pmd.compressParts(append(slices.Clone(v.heads), rest)...)
					payload := bytes.Join(chunks, nil)
					wire := s.wire(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpText, Payload: payload})
					from, at := 0, len(wire)-len(payload)
					for _, c := range chunks[:len(v.heads)] {
						at += len(c)
						s.writeRaw(wire[from:at])
						from = at
					}
					seen := len(s.obs)
					s.waitUntil(func() bool { return len(s.obs) > seen || s.peerClose != nil }, s.opts.FailFastWait)
					failedFast := s.peerClose != nil || s.ended
					if !failedFast {
						s.writeRaw(wire[from:])
					}
					s.concludeFailFastAfter(failedFast, prefix)
				})
		}

		split := join(k, unhex("f09d849e"), unhex("e282ac"), unhex("c39f")) // κόσμε𝄞€ß
		t.addPMD(id(5),
			before+fmt.Sprintf("send a compressed text message of the same 1 KiB, κόσμε𝄞€ß and %d KiB of letters in compressed fragments: one for the 1 KiB, one inflating to each byte of κόσμε𝄞€ß, the letters in fragments of %d KiB.", restSize>>10, frag>>10),
			"Echo both messages: the text is valid UTF-8 wherever fragments cut its code points.", n.pmd, func(s *session) {
				prefix := s.warmUp(lead)
				parts := [][]byte{lead}
				for i := range split {
					parts = append(parts, split[i:i+1])
				}
				s.send(compressedFragments(rawpeer.OpText, s.pmd.compressParts(append(parts, rest)...), frag)...)
				e := echoes(append(prefix, message(rawpeer.OpText, join(lead, split, rest)))...)
				e.wait = s.transferWait(len(lead) + len(split) + len(rest))
				s.conclude(e)
			})

		const endsInside = "Echo the first message, then fail the connection (1007): the text ends inside a code point. Failing at the end of the message is OK: only there is the text known to be cut."
		t.addPMD(id(6),
			before+"send a compressed text message in 2 compressed fragments, the first inflating to the same 1 KiB, κόσμε and f09d, the last to 84: the message ends inside 𝄞 (f09d849e).",
			endsInside, n.pmd, func(s *session) {
				prefix := s.warmUp(lead)
				s.send(compressedFragments(rawpeer.OpText, s.pmd.compressParts(join(lead, k, unhex("f09d")), unhex("84")), frag)...)
				s.conclude(failsWith(1007, false, prefix...))
			})
		t.addPMD(id(7),
			before+"send one compressed text frame inflating to the same 1 KiB, κόσμε and f09d84: the message ends inside 𝄞 (f09d849e).",
			endsInside, n.pmd, func(s *session) {
				prefix := s.warmUp(lead)
				s.send(s.compressedFrames(rawpeer.OpText, join(lead, k, unhex("f09d84")), 0)...)
				s.conclude(failsWith(1007, false, prefix...))
			})
	}
}
