package conform

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/rallyws/rally/internal/rawpeer"
)

// utf8Group is one group of section 6: payloads sent as one text frame, each
// valid or not as RFC 3629 says.
type utf8Group struct {
	sub      int
	title    string
	payloads []string // hex
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

const kosme = "cebae1bdb9cf83cebcceb5" // κόσμε

// utf8Groups follows the classic suite (after Markus Kuhn's UTF-8 decoder
// capability and stress test) from 6.5 on.
func utf8Groups() []utf8Group {
	nonchars := []string{"efbfbe", "efbfbf"}
	for plane := 1; plane <= 16; plane++ {
		for _, last := range []rune{0xFFFE, 0xFFFF} {
			nonchars = append(nonchars, hex.EncodeToString([]byte(string(rune(plane<<16)|last))))
		}
	}
	var lone2, lone3, lone4, lone5 strings.Builder
	for b := 0xc0; b <= 0xdf; b++ {
		fmt.Fprintf(&lone2, "%02x20", b)
	}
	for b := 0xe0; b <= 0xef; b++ {
		fmt.Fprintf(&lone3, "%02x20", b)
	}
	for b := 0xf0; b <= 0xf7; b++ {
		fmt.Fprintf(&lone4, "%02x20", b)
	}
	for b := 0xf8; b <= 0xfb; b++ {
		fmt.Fprintf(&lone5, "%02x20", b)
	}
	var allCont strings.Builder
	for b := 0x80; b <= 0xbf; b++ {
		fmt.Fprintf(&allCont, "%02x", b)
	}
	var kosmePrefixes []string
	k := unhex(kosme)
	for n := 1; n <= len(k); n++ {
		kosmePrefixes = append(kosmePrefixes, hex.EncodeToString(k[:n]))
	}
	return []utf8Group{
		{5, "Some valid UTF-8 sequences", []string{kosme, "e282ac", "f09d849e", "48656c6c6f20f09f8c8d", "c2a9e282acf09d849e7f"}},
		{6, "Every prefix of κόσμε (valid only at character boundaries)", kosmePrefixes},
		{7, "First possible sequence of each length", []string{"00", "c280", "e0a080", "f0908080"}},
		{8, "First possible sequence of lengths 5 and 6 (not UTF-8)", []string{"f888808080", "fc8480808080"}},
		{9, "Last possible sequence of each length", []string{"7f", "dfbf", "efbfbf", "f48fbfbf"}},
		{10, "Last possible sequence of lengths 4, 5 and 6 (beyond U+10FFFF)", []string{"f7bfbfbf", "fbbfbfbfbf", "fdbfbfbfbfbf"}},
		{11, "Other boundary conditions", []string{"ed9fbf", "ee8080", "efbfbd", "f48fbfbf", "f4908080"}},
		{12, "Unexpected continuation bytes", []string{"80", "bf", "80bf", "80bf80", "80bf80bf", "80bf80bf80", "80bf80bf80bf", allCont.String()}},
		{13, "Lonely start bytes, each followed by a space", []string{lone2.String(), lone3.String(), lone4.String(), lone5.String(), "fc20fd20"}},
		{14, "Sequences with the last continuation byte missing", []string{"c0", "e080", "f08080", "f8808080", "fc80808080", "df", "efbf", "f7bfbf", "fbbfbfbf", "fdbfbfbfbf"}},
		{15, "Concatenation of incomplete sequences", []string{"c0e080f08080f8808080fc80808080dfefbff7bfbffbbfbfbffdbfbfbfbf"}},
		{16, "Impossible bytes", []string{"fe", "ff", "fefeffff"}},
		{17, "Overlong ASCII slash", []string{"c0af", "e080af", "f08080af", "f8808080af", "fc80808080af"}},
		{18, "Maximum overlong sequences", []string{"c1bf", "e09fbf", "f08fbfbf", "f887bfbfbf", "fc83bfbfbfbf"}},
		{19, "Overlong NUL", []string{"c080", "e08080", "f0808080", "f880808080", "fc8080808080"}},
		{20, "Single UTF-16 surrogates", []string{"eda080", "edadbf", "edae80", "edafbf", "edb080", "edbe80", "edbfbf"}},
		{21, "Paired UTF-16 surrogates", []string{"eda080edb080", "eda080edbfbf", "edadbfedb080", "edadbfedbfbf", "edae80edb080", "edae80edbfbf", "edafbfedb080", "edafbfedbfbf"}},
		{22, "Noncharacters (valid UTF-8: RFC 3629 allows them)", nonchars},
		{23, "Specials U+FFF9 to U+FFFF (valid)", []string{"efbfb9", "efbfba", "efbfbb", "efbfbc", "efbfbd", "efbfbe", "efbfbf"}},
	}
}

// utf8Expect is what a text message with payload p must get: its echo when
// valid, failure with 1007 otherwise (RFC 6455 8.1).
func utf8Expect(p []byte) (expect, string) {
	if rawpeer.ValidUTF8(p) {
		return echoes(message(rawpeer.OpText, p)), "Echo the message: the payload is valid UTF-8."
	}
	return failsWith(1007, false), "Fail the connection (1007): the payload is not valid UTF-8."
}

// Section 6: UTF-8 handling.
func (t *caseTable) utf8() {
	validText := func(id, desc string, p []byte, fs func() []rawpeer.Frame) {
		e, exp := utf8Expect(p)
		t.add(id, desc, exp, func(s *session) {
			s.send(fs()...)
			s.conclude(e)
		})
	}
	t.add("6.1.1", "Send a text message of length 0.", "Echo the empty message.", func(s *session) {
		s.send(text(""))
		s.conclude(echoes(textMsg("")))
	})
	t.add("6.1.2", "Send a text message in 3 fragments, each of length 0.", "Echo the empty message.", func(s *session) {
		s.send(first(rawpeer.OpText, nil), cont(nil, false), cont(nil, true))
		s.conclude(echoes(textMsg("")))
	})
	t.add("6.1.3", "Send a text message in 3 fragments, the first and last of length 0.", "Echo the message.", func(s *session) {
		s.send(first(rawpeer.OpText, nil), cont([]byte("middle frame payload"), false), cont(nil, true))
		s.conclude(echoes(textMsg("middle frame payload")))
	})

	hello := []byte("Hello-µ@ßöäüàá-UTF-8!!")
	validText("6.2.1", "Send a valid UTF-8 text message in one frame.", hello, func() []rawpeer.Frame {
		return []rawpeer.Frame{rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: hello}}
	})
	validText("6.2.2", "Send a valid UTF-8 text message in 2 fragments split at a code point boundary.", hello, func() []rawpeer.Frame {
		cut := len("Hello-µ@ßöä")
		return []rawpeer.Frame{first(rawpeer.OpText, hello[:cut]), cont(hello[cut:], true)}
	})
	validText("6.2.3", "Send a valid UTF-8 text message in fragments of 1 byte.", hello, func() []rawpeer.Frame { return byteFragments(hello) })
	validText("6.2.4", "Send the valid UTF-8 text κόσμε in fragments of 1 byte.", unhex(kosme), func() []rawpeer.Frame { return byteFragments(unhex(kosme)) })

	bad := unhex(kosme + "eda080" + "656469746564") // κόσμε, a surrogate, "edited"
	validText("6.3.1", "Send an invalid UTF-8 text message (κόσμε, U+D800 encoded, \"edited\") in one frame.", bad, func() []rawpeer.Frame {
		return []rawpeer.Frame{rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: bad}}
	})
	validText("6.3.2", "Send the invalid UTF-8 text message of 6.3.1 in fragments of 1 byte.", bad, func() []rawpeer.Frame { return byteFragments(bad) })

	t.failFast()

	for _, g := range utf8Groups() {
		for i, h := range g.payloads {
			p := unhex(h)
			validText(fmt.Sprintf("6.%d.%d", g.sub, i+1), fmt.Sprintf("%s: send a text message with payload %s in one frame.", g.title, h), p,
				func() []rawpeer.Frame {
					return []rawpeer.Frame{rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: p}}
				})
		}
	}

	// Beyond the classic suite: every split point of a text across 2
	// fragments, for a valid text with 1- to 4-byte characters and for an
	// invalid one. Validation must not depend on where fragments end.
	for sub, p := range [][]byte{[]byte("aß€𝄞z"), unhex("61e282aceda0807a")} {
		for cut := 1; cut < len(p); cut++ {
			validText(fmt.Sprintf("6.%d.%d", 24+sub, cut),
				fmt.Sprintf("Send the text %x in 2 fragments split after byte %d.", p, cut), p,
				func() []rawpeer.Frame { return []rawpeer.Frame{first(rawpeer.OpText, p[:cut]), cont(p[cut:], true)} })
		}
	}
}

func byteFragments(p []byte) []rawpeer.Frame {
	var fs []rawpeer.Frame
	for i := range p {
		op := rawpeer.OpContinuation
		if i == 0 {
			op = rawpeer.OpText
		}
		fs = append(fs, rawpeer.Fragment(op, p[i:i+1], i == len(p)-1))
	}
	return fs
}

// failFast adds 6.4: the byte that makes the text invalid arrives while the
// rest of the message is held back; the peer must fail the connection then,
// not once the message is complete (RFC 6455 8.1: "fail the connection" as
// soon as the data is known invalid). Failing later is NON-STRICT.
func (t *caseTable) failFast() {
	edited := "656469746564"
	parts := [][3]string{
		{kosme, "f4908080", edited},           // 6.4.1 / 6.4.3: U+110000
		{kosme + "f4", "90", "8080" + edited}, // 6.4.2 / 6.4.4: up to the first byte that is wrong
	}
	const exp = "Fail the connection (1007) when the invalid part arrives (OK), or only once the message is complete (NON-STRICT)."
	for i, pt := range parts {
		p1, p2, p3 := unhex(pt[0]), unhex(pt[1]), unhex(pt[2])
		t.add(fmt.Sprintf("6.4.%d", 1+i),
			fmt.Sprintf("Send a text message in 3 fragments: valid %s, then %s which makes it invalid, then a ping; only after the pong (or a timeout), the rest %s.", pt[0], pt[1], pt[2]),
			exp+" The ping tells that the peer has read the invalid fragment.", func(s *session) {
				probe := []byte("fail-fast probe")
				s.sendFramewise(first(rawpeer.OpText, p1), cont(p2, false), ping(probe))
				s.waitUntil(func() bool { return len(s.obs) > 0 || s.peerClose != nil }, s.opts.Timeout)
				failedFast := s.peerClose != nil || s.ended
				if !failedFast {
					s.send(cont(p3, true))
				}
				s.concludeFailFast(failedFast, pong(probe))
			})
	}
	for i, pt := range parts {
		p1, p2, p3 := unhex(pt[0]), unhex(pt[1]), unhex(pt[2])
		t.add(fmt.Sprintf("6.4.%d", 3+i),
			fmt.Sprintf("Send one text frame of %s|%s|%s in 3 writes, waiting after the second, which makes it invalid.", pt[0], pt[1], pt[2]),
			exp, func(s *session) {
				payload := append(append(append([]byte(nil), p1...), p2...), p3...)
				wire := s.wire(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: payload})
				cut1 := len(wire) - len(payload) + len(p1)
				cut2 := cut1 + len(p2)
				s.writeRaw(wire[:cut1])
				s.writeRaw(wire[cut1:cut2])
				s.waitUntil(func() bool { return s.peerClose != nil || len(s.obs) > 0 }, s.opts.FailFastWait)
				failedFast := s.peerClose != nil || s.ended
				if !failedFast {
					s.writeRaw(wire[cut2:])
				}
				s.concludeFailFast(failedFast)
			})
	}
}

// concludeFailFast judges 6.4: failing before the rest was sent is OK,
// failing after is NON-STRICT, anything else FAILED. allowed lists what the
// peer may send before failing (the probe's pong).
func (s *session) concludeFailFast(failedFast bool, allowed ...observation) {
	s.concludeFailFastAfter(failedFast, nil, allowed...)
}

// concludeFailFastAfter is concludeFailFast for a case whose peer must
// first answer prefix (messages sent ahead of the invalid one).
func (s *session) concludeFailFastAfter(failedFast bool, prefix []observation, allowed ...observation) {
	e := failsWith(1007, false, prefix...)
	if len(allowed) > 0 {
		e.alts = append(e.alts, alt{obs: append(slices.Clone(prefix), allowed...), verdict: OK})
	}
	s.conclude(e)
	if s.res.Behavior == OK && !failedFast {
		s.res.Behavior = NonStrict
		s.res.BehaviorNotes = append(s.res.BehaviorNotes, "failed the connection only after the whole message arrived, not at the invalid byte")
		s.res.Verdict = worse(s.res.Behavior, s.res.CloseBehavior)
	}
}
