package conform

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/rallyws/rally/internal/rawpeer"
)

var (
	tableOnce sync.Once
	table     []Case
)

// Cases returns every case of the suite in table order (sections 1 to 13,
// then the suite's own from 106 up).
func Cases() []Case {
	tableOnce.Do(func() {
		var t caseTable
		t.framing()
		t.pings()
		t.reservedBits()
		t.opcodes()
		t.fragmentation()
		t.utf8()
		t.closing()
		t.limits()
		t.misc()
		t.deflate()
		t.compressedUTF8()
		table = t.cases
	})
	return append([]Case(nil), table...)
}

type caseTable struct{ cases []Case }

func (t *caseTable) add(id, desc, expectation string, run func(s *session)) {
	t.cases = append(t.cases, Case{ID: id, Description: desc, Expectation: expectation, run: run})
}

// Frame helpers for the tables.

func text(s string) rawpeer.Frame   { return rawpeer.Text(s) }
func binary(b []byte) rawpeer.Frame { return rawpeer.Binary(b) }
func ping(b []byte) rawpeer.Frame   { return rawpeer.Ping(b) }
func first(op byte, b []byte) rawpeer.Frame {
	return rawpeer.Fragment(op, b, false)
}
func cont(b []byte, fin bool) rawpeer.Frame { return rawpeer.Continuation(b, fin) }
func withRsv(f rawpeer.Frame, rsv byte) rawpeer.Frame {
	f.Rsv = rsv << 4
	return f
}

// chopMode names how a case writes its frames: in one write, one write per
// frame, or one write per byte.
type chopMode int

const (
	oneChop chopMode = iota
	frameChops
	octetChops
)

func (m chopMode) String() string {
	switch m {
	case frameChops:
		return "frame-wise chops"
	case octetChops:
		return "octet-wise chops"
	}
	return "one chop"
}

func (s *session) sendAs(m chopMode, fs ...rawpeer.Frame) {
	switch m {
	case frameChops:
		s.sendFramewise(fs...)
	case octetChops:
		s.sendChopped(1, fs...)
	default:
		s.send(fs...)
	}
}

func repeat(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// Section 1: framing.
func (t *caseTable) framing() {
	lengths := []int{0, 125, 126, 127, 128, 65535, 65536}
	for sub, op := range []byte{rawpeer.OpText, rawpeer.OpBinary} {
		kind := map[byte]string{rawpeer.OpText: "text", rawpeer.OpBinary: "binary"}[op]
		fill := map[byte]byte{rawpeer.OpText: '*', rawpeer.OpBinary: 0xfe}[op]
		for i, n := range lengths {
			t.add(fmt.Sprintf("1.%d.%d", sub+1, i+1),
				fmt.Sprintf("Send a %s message with a payload of %d bytes.", kind, n),
				"Echo the message.",
				func(s *session) {
					p := repeat(fill, n)
					s.send(rawpeer.Frame{Fin: true, Opcode: op, Payload: p})
					s.conclude(echoes(message(op, p)))
				})
		}
		for i, c := range []struct{ n, chunk int }{{65536, 997}, {1 << 20, 0}, {1 << 20, 4093}} {
			desc := fmt.Sprintf("Send a %s message with a payload of %d bytes", kind, c.n)
			if c.chunk > 0 {
				desc += fmt.Sprintf(", written in chops of %d bytes", c.chunk)
			}
			t.add(fmt.Sprintf("1.%d.%d", sub+1, i+8), desc+".", "Echo the message.", func(s *session) {
				p := repeat(fill, c.n)
				f := rawpeer.Frame{Fin: true, Opcode: op, Payload: p}
				if c.chunk > 0 {
					s.sendChopped(c.chunk, f)
				} else {
					s.send(f)
				}
				s.conclude(echoes(message(op, p)))
			})
		}
	}
}

// Section 2: pings and pongs.
func (t *caseTable) pings() {
	const pongIt = "Answer with a pong carrying the same payload."
	t.add("2.1", "Send a ping without payload.", pongIt, func(s *session) {
		s.send(ping(nil))
		s.conclude(echoes(pong([]byte{})))
	})
	t.add("2.2", "Send a ping with a small text payload.", pongIt, func(s *session) {
		p := []byte("Hello, world!")
		s.send(ping(p))
		s.conclude(echoes(pong(p)))
	})
	t.add("2.3", "Send a ping with a small binary (non UTF-8) payload.", pongIt, func(s *session) {
		p := []byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff}
		s.send(ping(p))
		s.conclude(echoes(pong(p)))
	})
	t.add("2.4", "Send a ping with a binary payload of 125 bytes.", pongIt, func(s *session) {
		p := repeat(0xfe, 125)
		s.send(ping(p))
		s.conclude(echoes(pong(p)))
	})
	t.add("2.5", "Send a ping with a binary payload of 126 bytes (control frames carry at most 125, RFC 6455 5.5).",
		"Fail the connection (1002); no pong.", func(s *session) {
			s.send(ping(repeat(0xfe, 126)))
			s.conclude(failsWith(1002, false))
		})
	t.add("2.6", "Send a ping with a binary payload of 125 bytes, written in chops of 1 byte.", pongIt, func(s *session) {
		p := repeat(0xfe, 125)
		s.sendChopped(1, ping(p))
		s.conclude(echoes(pong(p)))
	})
	t.add("2.7", "Send an unsolicited pong without payload.", "Nothing: an unsolicited pong is ignored.", func(s *session) {
		s.send(rawpeer.Pong(nil))
		s.conclude(echoes())
	})
	t.add("2.8", "Send an unsolicited pong with payload.", "Nothing: an unsolicited pong is ignored.", func(s *session) {
		s.send(rawpeer.Pong([]byte("unsolicited pong payload")))
		s.conclude(echoes())
	})
	t.add("2.9", "Send an unsolicited pong with payload, then a ping with payload.", "One pong, answering the ping.", func(s *session) {
		s.send(rawpeer.Pong([]byte("unsolicited pong payload")))
		s.send(ping([]byte("ping payload")))
		s.conclude(echoes(pong([]byte("ping payload"))))
	})
	for i, m := range []chopMode{oneChop, octetChops} {
		id := fmt.Sprintf("2.%d", 10+i)
		desc := "Send 10 pings with payloads payload-0 to payload-9"
		if m == octetChops {
			desc += ", written in chops of 1 byte"
		}
		t.add(id, desc+".", "Ten pongs in order, each with its ping's payload, as the classic suite requires: the pings arrive together, nothing holds the pongs back, so none is superseded (RFC 6455 5.5.3 lets a peer skip only a pong it could not send yet).",
			func(s *session) {
				var fs []rawpeer.Frame
				var want []observation
				for k := range 10 {
					p := fmt.Appendf(nil, "payload-%d", k)
					fs = append(fs, ping(p))
					want = append(want, pong(p))
				}
				s.sendAs(m, fs...)
				last := want[len(want)-1]
				s.conclude(expect{
					// The last ping's pong ends the answer: a peer that
					// skipped some sends nothing after it.
					done: func(obs []observation) bool {
						return len(obs) > 0 && obs[len(obs)-1].equal(last) || len(obs) >= len(want)
					},
					match: func(obs []observation) (Verdict, string) {
						if len(obs) == len(want) && prefixOf(obs, want) {
							return OK, ""
						}
						return Failed, fmt.Sprintf("%d pongs, want the 10 in order: observed %s", len(obs), describeAlt(obs))
					},
				})
			})
	}
}

// Section 3: reserved bits.
func (t *caseTable) reservedBits() {
	hello := "Hello, world!"
	failNote := "Fail the connection (1002) at the frame with a reserved bit set"
	t.add("3.1", "Send a small text message with RSV = 1.", failNote+".", func(s *session) {
		s.send(withRsv(text(hello), 1))
		s.conclude(failsWith(1002, false))
	})
	for i, m := range []chopMode{oneChop, frameChops, octetChops} {
		rsv := byte(2 + i)
		t.add(fmt.Sprintf("3.%d", 2+i),
			fmt.Sprintf("Send a small text message, then the same with RSV = %d, then a ping, in %s.", rsv, m),
			failNote+", after echoing the first message; no pong.", func(s *session) {
				s.sendAs(m, text(hello), withRsv(text(hello), rsv), ping([]byte("ping payload")))
				s.conclude(failsWith(1002, true, textMsg(hello)))
			})
	}
	t.add("3.5", "Send a small binary message with RSV = 5.", failNote+".", func(s *session) {
		s.send(withRsv(binary([]byte{0, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0, 0xff}), 5))
		s.conclude(failsWith(1002, false))
	})
	t.add("3.6", "Send a ping with payload and RSV = 6.", failNote+"; no pong.", func(s *session) {
		s.send(withRsv(ping([]byte(hello)), 6))
		s.conclude(failsWith(1002, false))
	})
	t.add("3.7", "Send a close frame with RSV = 7.", failNote+".", func(s *session) {
		s.send(withRsv(rawpeer.Close(1000, ""), 7))
		s.conclude(failsWith(1002, false))
	})
}

// Section 4: reserved opcodes.
func (t *caseTable) opcodes() {
	for sub, ops := range [][]byte{{3, 4, 5, 6, 7}, {11, 12, 13, 14, 15}} {
		kind := []string{"non-control", "control"}[sub]
		for i, op := range ops {
			id := fmt.Sprintf("4.%d.%d", sub+1, i+1)
			f := rawpeer.Frame{Fin: true, Opcode: op}
			if i%2 == 1 {
				f.Payload = []byte("reserved opcode payload")
			}
			withPayload := map[bool]string{false: "", true: " with payload"}[f.Payload != nil]
			if i < 2 {
				t.add(id, fmt.Sprintf("Send a frame with reserved %s opcode %d%s.", kind, op, withPayload),
					"Fail the connection (1002).", func(s *session) {
						s.send(f)
						s.conclude(failsWith(1002, false))
					})
				continue
			}
			t.add(id, fmt.Sprintf("Send a small text message, then a frame with reserved %s opcode %d%s, then a ping.", kind, op, withPayload),
				"Echo the text, then fail the connection (1002); no pong.", func(s *session) {
					s.send(text("Hello, world!"), f, ping([]byte("ping payload")))
					s.conclude(failsWith(1002, true, textMsg("Hello, world!")))
				})
		}
	}
}

// Section 5: fragmentation.
func (t *caseTable) fragmentation() {
	f1, f2 := []byte("fragment1"), []byte("fragment2")
	t.add("5.1", "Send a ping in 2 fragments.", "Fail the connection (1002): control frames are never fragmented (RFC 6455 5.5).", func(s *session) {
		s.send(first(rawpeer.OpPing, f1), cont(f2, true))
		s.conclude(failsWith(1002, false))
	})
	t.add("5.2", "Send a pong in 2 fragments.", "Fail the connection (1002): control frames are never fragmented (RFC 6455 5.5).", func(s *session) {
		s.send(first(rawpeer.OpPong, f1), cont(f2, true))
		s.conclude(failsWith(1002, false))
	})
	whole := textMsg("fragment1fragment2")
	for i, m := range []chopMode{oneChop, frameChops, octetChops} {
		t.add(fmt.Sprintf("5.%d", 3+i), fmt.Sprintf("Send a text message in 2 fragments, in %s.", m), "Echo the whole message.", func(s *session) {
			s.sendAs(m, first(rawpeer.OpText, f1), cont(f2, true))
			s.conclude(echoes(whole))
		})
	}
	for i, m := range []chopMode{oneChop, frameChops, octetChops} {
		t.add(fmt.Sprintf("5.%d", 6+i), fmt.Sprintf("Send a text message in 2 fragments with a ping between them, in %s.", m),
			"A pong, then the whole message (control frames may come between fragments, RFC 6455 5.4).", func(s *session) {
				s.sendAs(m, first(rawpeer.OpText, f1), ping([]byte("ping payload")), cont(f2, true))
				s.conclude(echoes(pong([]byte("ping payload")), whole))
			})
	}
	for i, m := range []chopMode{oneChop, frameChops, octetChops} {
		t.add(fmt.Sprintf("5.%d", 9+i), fmt.Sprintf("Send a continuation frame with FIN = 1 and nothing to continue, then a text message, in %s.", m),
			"Fail the connection (1002) at the continuation frame; no echo.", func(s *session) {
				s.sendAs(m, cont([]byte("non-continuation payload"), true), text("Hello, world!"))
				s.conclude(failsWith(1002, false))
			})
	}
	for i, m := range []chopMode{oneChop, frameChops, octetChops} {
		t.add(fmt.Sprintf("5.%d", 12+i), fmt.Sprintf("Send a continuation frame with FIN = 0 and nothing to continue, then a text message, in %s.", m),
			"Fail the connection (1002) at the continuation frame; no echo.", func(s *session) {
				s.sendAs(m, cont([]byte("non-continuation payload"), false), text("Hello, world!"))
				s.conclude(failsWith(1002, false))
			})
	}
	t.add("5.15", "Send a text message in 2 fragments, then a continuation frame with FIN = 0 and nothing to continue, then a text message in 2 fragments.",
		"Echo the first message, then fail the connection (1002).", func(s *session) {
			s.send(first(rawpeer.OpText, f1), cont(f2, true), cont([]byte("fragment3"), false), first(rawpeer.OpText, []byte("fragment4")), cont([]byte("fragment5"), true))
			s.conclude(failsWith(1002, true, whole))
		})
	for i, fin := range []bool{false, true} {
		t.add(fmt.Sprintf("5.%d", 16+i), fmt.Sprintf("Twice: send a continuation frame with FIN = %d and nothing to continue, then a text message in 2 fragments.", map[bool]int{false: 0, true: 1}[fin]),
			"Fail the connection (1002) at the first frame; no echo.", func(s *session) {
				var fs []rawpeer.Frame
				for range 2 {
					fs = append(fs, cont([]byte("fragment1"), fin), first(rawpeer.OpText, f1), cont(f2, true))
				}
				s.send(fs...)
				s.conclude(failsWith(1002, false))
			})
	}
	t.add("5.18", "Send a text message in 2 fragments whose second fragment also has the text opcode.",
		"Fail the connection (1002): a new message cannot start inside one (RFC 6455 5.4).", func(s *session) {
			s.send(first(rawpeer.OpText, f1), rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: f2})
			s.conclude(failsWith(1002, false))
		})
	for i, m := range []chopMode{oneChop, frameChops} {
		t.add(fmt.Sprintf("5.%d", 19+i),
			fmt.Sprintf("Send 2 fragments of a text message and a ping, wait for its pong, then 2 more fragments, another ping and the last fragment, in %s.", m),
			"Two pongs while the message is open, then the whole message of 5 fragments.", func(s *session) {
				p1, p2 := []byte("pongme 1!"), []byte("pongme 2!")
				s.sendAs(m, first(rawpeer.OpText, []byte("fragment1")), cont([]byte("fragment2"), false), ping(p1))
				s.waitUntil(func() bool { return len(s.obs) > 0 || s.peerClose != nil }, s.opts.Timeout)
				s.sendAs(m, cont([]byte("fragment3"), false), cont([]byte("fragment4"), false), ping(p2), cont([]byte("fragment5"), true))
				s.conclude(echoes(pong(p1), pong(p2), textMsg("fragment1fragment2fragment3fragment4fragment5")))
			})
	}
	t.add("5.21", "Send a binary message of 256 bytes in 256 fragments of 1 byte.", "Echo the whole message.", func(s *session) {
		var fs []rawpeer.Frame
		p := make([]byte, 256)
		for k := range p {
			p[k] = byte(k)
			op := rawpeer.OpContinuation
			if k == 0 {
				op = rawpeer.OpBinary
			}
			fs = append(fs, rawpeer.Fragment(op, p[k:k+1], k == 255))
		}
		s.send(fs...)
		s.conclude(echoes(message(rawpeer.OpBinary, p)))
	})
}
