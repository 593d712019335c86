package conform

import (
	"fmt"
	"math/rand/v2"

	"github.com/rallyws/rally/internal/rawpeer"
)

// randomText returns n bytes of random letters: valid UTF-8 that deflate
// barely shrinks.
func randomText(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
	p := make([]byte, n)
	for i := range p {
		p[i] = letters[r.IntN(len(letters))]
	}
	return p
}

// randomBinary returns n random bytes: incompressible.
func randomBinary(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// compressedFrames returns p as one compressed message (RFC 7692 6: RSV1
// on the first frame only), in fragments of frag compressed bytes when
// frag > 0.
func (s *session) compressedFrames(op byte, p []byte, frag int) []rawpeer.Frame {
	c := s.pmd.compress(p)
	if frag <= 0 || frag >= len(c) {
		return []rawpeer.Frame{{Fin: true, Rsv: rawpeer.Rsv1, Opcode: op, Payload: c}}
	}
	var fs []rawpeer.Frame
	for off := 0; off < len(c); off += frag {
		f := rawpeer.Fragment(rawpeer.OpContinuation, c[off:min(off+frag, len(c))], off+frag >= len(c))
		if off == 0 {
			f.Opcode, f.Rsv = op, rawpeer.Rsv1
		}
		fs = append(fs, f)
	}
	return fs
}

// echoCompressed sends the messages one at a time, compressed, each after
// the echo of the one before, and expects every echo (compressed or not).
func (s *session) echoCompressed(op byte, msgs [][]byte, frag int) {
	var want []observation
	for i, p := range msgs {
		s.send(s.compressedFrames(op, p, frag)...)
		want = append(want, message(op, p))
		if !s.waitUntil(func() bool { return len(s.obs) > i || s.peerClose != nil }, s.transferWait(len(p))) || s.peerClose != nil {
			break
		}
	}
	e := echoes(want...)
	e.wait = s.opts.Timeout
	s.conclude(e)
}

// pmdDefault offers and answers plain permessage-deflate (context takeover
// both ways, 15-bit windows).
var pmdDefault = &pmdCase{
	offer:   "permessage-deflate; client_max_window_bits",
	respond: func(extension) string { return "permessage-deflate" },
}

func (t *caseTable) addPMD(id, desc, expectation string, pmd *pmdCase, run func(s *session)) {
	t.cases = append(t.cases, Case{ID: id, Description: desc, Expectation: expectation, optIn: true, pmd: pmd, run: run})
}

// deflate adds sections 12 and 13 (permessage-deflate, RFC 7692). They run
// only when selected by name; a peer that does not negotiate the extension
// gets UNIMPLEMENTED.
func (t *caseTable) deflate() {
	sizes := []int{16, 64, 256, 1 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10}
	const count = 10
	kinds := []struct {
		op   byte
		name string
		gen  func(n int, seed uint64) []byte
	}{
		{rawpeer.OpText, "compressible text", func(n int, _ uint64) []byte { return patterned(n) }},
		{rawpeer.OpBinary, "compressible binary", func(n int, _ uint64) []byte { return patternedBinary(n) }},
		{rawpeer.OpText, "random-letter text", randomText},
		{rawpeer.OpBinary, "random (incompressible) binary", randomBinary},
	}
	for sub, k := range kinds {
		for i, n := range sizes {
			t.addPMD(fmt.Sprintf("12.%d.%d", sub+1, i+1),
				fmt.Sprintf("With permessage-deflate (context takeover), send %d %s messages of %d bytes, compressed, each after the echo of the one before.", count, k.name, n),
				"Echo each message (compressed or not); every compressed frame inflates with the negotiated context.", pmdDefault,
				func(s *session) {
					var msgs [][]byte
					for m := range count {
						msgs = append(msgs, k.gen(n, uint64(m)))
					}
					s.echoCompressed(k.op, msgs, 0)
				})
		}
	}
	large := []struct {
		name string
		op   byte
		n    int
		gen  func(n int, seed uint64) []byte
		frag int
	}{
		{"compressible text of 1 MiB", rawpeer.OpText, 1 << 20, func(n int, _ uint64) []byte { return patterned(n) }, 0},
		{"compressible text of 4 MiB", rawpeer.OpText, 4 << 20, func(n int, _ uint64) []byte { return patterned(n) }, 0},
		{"random binary of 1 MiB", rawpeer.OpBinary, 1 << 20, randomBinary, 0},
		{"random binary of 4 MiB", rawpeer.OpBinary, 4 << 20, randomBinary, 0},
		{"compressible text of 1 MiB in compressed fragments of 4 KiB", rawpeer.OpText, 1 << 20, func(n int, _ uint64) []byte { return patterned(n) }, 4 << 10},
		{"random binary of 1 MiB in compressed fragments of 4 KiB", rawpeer.OpBinary, 1 << 20, randomBinary, 4 << 10},
	}
	for i, l := range large {
		t.addPMD(fmt.Sprintf("12.5.%d", i+1), fmt.Sprintf("With permessage-deflate, send one %s (times Options.Scale), compressed.", l.name),
			"Echo the message (compressed or not).", pmdDefault, func(s *session) {
				n := max(1, int(float64(l.n)*s.opts.Scale))
				s.echoCompressed(l.op, [][]byte{l.gen(n, 1)}, l.frag)
			})
	}

	// Section 13: the negotiation parameters. The offer is what the suite
	// sends to a server; the answer what it returns to a client's offer.
	withClientBits := func(answer string, bits int) func(extension) string {
		return func(offer extension) string {
			if _, ok := offer.has("client_max_window_bits"); ok {
				return fmt.Sprintf("%s; client_max_window_bits=%d", answer, bits)
			}
			return answer
		}
	}
	fixed := func(answer string) func(extension) string { return func(extension) string { return answer } }
	params := []struct {
		desc string
		pmd  *pmdCase
	}{
		{"default parameters", &pmdCase{offer: "permessage-deflate", respond: fixed("permessage-deflate")}},
		{"client_no_context_takeover", &pmdCase{offer: "permessage-deflate; client_no_context_takeover",
			respond: fixed("permessage-deflate; client_no_context_takeover")}},
		{"server_no_context_takeover", &pmdCase{offer: "permessage-deflate; server_no_context_takeover",
			respond: fixed("permessage-deflate; server_no_context_takeover")}},
		{"server_max_window_bits=8", &pmdCase{offer: "permessage-deflate; server_max_window_bits=8",
			respond: fixed("permessage-deflate; server_max_window_bits=8")}},
		{"server_max_window_bits=15", &pmdCase{offer: "permessage-deflate; server_max_window_bits=15",
			respond: fixed("permessage-deflate; server_max_window_bits=15")}},
		{"client_max_window_bits (8 in the answer to a client)", &pmdCase{offer: "permessage-deflate; client_max_window_bits",
			respond: withClientBits("permessage-deflate", 8)}},
		{"no context takeover both ways and 9-bit windows", &pmdCase{
			offer:   "permessage-deflate; client_no_context_takeover; client_max_window_bits; server_no_context_takeover; server_max_window_bits=9",
			respond: withClientBits("permessage-deflate; client_no_context_takeover; server_no_context_takeover; server_max_window_bits=9", 9)}},
		{"several offers, the first with an unknown parameter (a server must skip it)", &pmdCase{
			offer:   "permessage-deflate; x_unknown, permessage-deflate; server_no_context_takeover; server_max_window_bits=10",
			respond: fixed("permessage-deflate; server_no_context_takeover; server_max_window_bits=10"), mayRefuse: true}},
	}
	for sub, pr := range params {
		for i, n := range []int{64, 4 << 10, 64 << 10} {
			t.addPMD(fmt.Sprintf("13.%d.%d", sub+1, i+1),
				fmt.Sprintf("Negotiate permessage-deflate with %s, then send %d compressible text messages of %d bytes, compressed, each after the echo of the one before.", pr.desc, count, n),
				"Accept a valid response to the offer (RFC 7692 7.1); echo each message, honouring the negotiated context takeover.", pr.pmd,
				func(s *session) {
					var msgs [][]byte
					for m := range count {
						p := patterned(n)
						p[0] = byte('a' + m) // messages differ, so context matters
						msgs = append(msgs, p)
					}
					s.echoCompressed(rawpeer.OpText, msgs, 0)
				})
		}
	}
}
