package interop_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The wire tables. Each row is a script between A, the side under test,
// and B, its peer, with a wire tap between them. A is npm ws first, then
// rally, in the same role (server, or client), against the same B (an npm
// ws peer of the other role, or a raw peer where the row needs bytes that
// ws will not send). The row's want is what npm ws does: it must hold for
// npm ws, which pins the reference, and for rally, unless the row names a
// deliberate difference (one of the contract's four, or the further ones
// docs/ARCHITECTURE.md records).
//
// Observations read "A: ..." (what A reported: an event, or the result of
// a call), "A> ..." (the next frame A sent, as the tap saw it: header
// bytes without mask bit and key, then the payload), and the same for B.

// Deliberate differences named by the contract (docs/ARCHITECTURE.md).
const (
	diffUTF8FailFast = "contract: UTF-8 fails fast at the first bad byte (ws waits for the whole message)"
	diffVersion426   = "contract: a wrong Sec-WebSocket-Version gets 426 with Sec-WebSocket-Version: 13 (ws answers 400)"
	diffSendClosed   = "contract: a send on a closed connection returns its error at once (ws reports it on the next tick)"
)

// peerKind says what B is.
type peerKind int

const (
	peerWS  peerKind = iota // an npm ws connection
	peerRaw                 // an internal/rawpeer peer
)

type row struct {
	name  string
	peer  peerKind
	limit int64 // A's message size limit (ws maxPayload, rally ReadLimit); 0 means each one's default
	do    func(h *harness)
	want  []string // npm ws as A
	rally []string // rally as A, when it differs from want
	diff  string   // why rally differs: the deliberate difference it keeps
}

// harness runs one row against one A.
type harness struct {
	t      *testing.T
	a, b   endpoint
	raw    *rawEndpoint // b, when the row's peer is raw
	client bool         // B is the client (A is the server)
	aWire  *wireLog
	bWire  *wireLog
	seen   []string
}

// A records an observation of A; AN records A's next event, AW the next
// frame A sent. B, BN and BW are the same for B.
func (h *harness) A(s string) { h.seen = append(h.seen, "A: "+s) }
func (h *harness) B(s string) { h.seen = append(h.seen, "B: "+s) }
func (h *harness) AN()        { h.A(h.a.Next()) }
func (h *harness) BN()        { h.B(h.b.Next()) }
func (h *harness) AW() string {
	s := h.aWire.next()
	h.seen = append(h.seen, "A> "+s)
	return s
}
func (h *harness) BW() { h.seen = append(h.seen, "B> "+h.bWire.next()) }

// closeA starts A's close handshake with a valid code.
func (h *harness) closeA(code uint16, reason []byte) { h.A(h.a.Close(code, reason)) }

// must checks that a call of B's succeeded: B is the instrument, not the
// subject.
func (h *harness) must(s string) {
	h.t.Helper()
	if !strings.HasSuffix(s, " ok") {
		h.t.Fatalf("peer B failed: %s", s)
	}
}

// wrongMask makes the raw B send f with the masking rule of its role
// broken: unmasked from a client, masked from a server.
func (h *harness) wrongMask(f rawpeer.Frame) {
	if h.client {
		h.must(h.raw.Raw(rawpeer.Build(f)))
		return
	}
	f.Masked, f.Mask = true, [4]byte{1, 2, 3, 4}
	h.must(h.raw.Frame(f))
}

// answerClose makes the raw B answer A's close with code and hang up.
func (h *harness) answerClose(code uint16) {
	h.must(h.raw.Close(code, nil))
	h.raw.Hangup()
}

// frame renders a frame as the tap does.
func frame(b0 byte, p []byte) string {
	return renderFrame(b0&0x80 != 0, b0&0x70, b0&0x0F, p)
}

func closeBody(code uint16, reason string) []byte { return rawpeer.CloseBody(code, reason) }

func textMsg(p []byte) string { return "message text " + summary(p) }
func binMsg(p []byte) string  { return "message binary " + summary(p) }

func msgOf(op byte, p []byte) string {
	if op == opText {
		return textMsg(p)
	}
	return binMsg(p)
}

// echoRow: B sends p, A reports it and sends it back, B reports it.
func echoRow(name string, op byte, p []byte) row {
	return row{
		name: name,
		do: func(h *harness) {
			h.must(h.b.Send(op, p, true))
			h.AN()
			h.A(h.a.Send(op, p, true))
			h.AW()
			h.BN()
		},
		want: []string{"A: " + msgOf(op, p), "A: send() ok", "A> " + frame(0x80|op, p), "B: " + msgOf(op, p)},
	}
}

// failRow: B (raw) sends what send does; A fails the connection with code,
// sends its close frame, and reports the close once B answers and hangs up.
// npm ws sends the bare code and reports 1006 (it stops reading when it
// fails); rally sends the rule as the reason and reports the code it sent
// (diffFailReport).
func failRow(name string, code uint16, rallyReason string, send func(h *harness)) row {
	return row{
		name: name,
		peer: peerRaw,
		do: func(h *harness) {
			send(h)
			h.AW()
			h.answerClose(code)
			h.AN()
			h.AN()
		},
		want: []string{
			"A> " + frame(0x88, closeBody(code, "")),
			fmt.Sprintf("A: fail %d", code),
			`A: close 1006 ""`,
		},
		rally: []string{
			"A> " + frame(0x88, closeBody(code, rallyReason)),
			fmt.Sprintf("A: fail %d", code),
			fmt.Sprintf("A: close %d %q", code, rallyReason),
		},
		diff: diffFailReport,
	}
}

// rally's close reasons: the rule the peer broke.
const (
	utf8Reason  = "text message is not valid UTF-8"
	limitReason = "message larger than the read limit"
)

// Further deliberate differences, recorded in docs/ARCHITECTURE.md
// ("Deliberate differences from npm ws") after these tables found them.
const (
	diffFailReport = "docs/ARCHITECTURE.md, deliberate differences: on a protocol violation rally sends the broken rule as the close reason and reports one *CloseError with the code it sent; ws sends the bare code and reports 1006"
	diffLengthMSB  = "docs/ARCHITECTURE.md, deliberate differences: a 64-bit length with its top bit set is a framing error (1002, RFC 6455 5.2); ws answers 1009"
	diffNoUpgrade  = "docs/ARCHITECTURE.md, deliberate differences: a request without an Upgrade header gets 400 from rally's http.Handler; ws's own server on a dedicated port answers 426"
)

func bytesOf(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

// commonRows hold for A as a server and as a client.
func commonRows(server bool) []row {
	maskReason := "server frame masked"
	if server {
		maskReason = "client frame not masked"
	}
	rows := []row{}
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		rows = append(rows, echoRow(fmt.Sprintf("text of %d bytes", n), opText, bytesOf(n, 'a')))
	}
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		rows = append(rows, echoRow(fmt.Sprintf("binary of %d bytes", n), opBinary, p))
	}
	rows = append(rows, echoRow("text outside ASCII", opText, []byte("héllo wörld € 😀")))

	hello := []byte("Hello, wörld")
	rows = append(rows,
		row{
			name: "text in three fragments",
			do: func(h *harness) {
				h.must(h.b.Send(opText, hello[:3], false))
				h.must(h.b.Send(opText, hello[3:7], false))
				h.must(h.b.Send(opText, hello[7:], true))
				h.BW()
				h.BW()
				h.BW()
				h.AN()
			},
			want: []string{
				"B> " + frame(0x01, hello[:3]), "B> " + frame(0x00, hello[3:7]), "B> " + frame(0x80, hello[7:]),
				"A: " + textMsg(hello),
			},
		},
		row{
			name: "text fragmented inside a character",
			do: func(h *harness) {
				h.must(h.b.Send(opText, []byte("€")[:1], false))
				h.must(h.b.Send(opText, []byte("€")[1:], true))
				h.AN()
			},
			want: []string{"A: " + textMsg([]byte("€"))},
		},
		row{
			name: "binary with an empty first and last fragment",
			do: func(h *harness) {
				h.must(h.b.Send(opBinary, nil, false))
				h.must(h.b.Send(opBinary, []byte{1, 2}, false))
				h.must(h.b.Send(opBinary, nil, true))
				h.AN()
			},
			want: []string{"A: " + binMsg([]byte{1, 2})},
		},
		row{
			name: "ping between fragments",
			do: func(h *harness) {
				h.must(h.b.Send(opText, []byte("ab"), false))
				h.must(h.b.Ping([]byte("p")))
				h.must(h.b.Send(opText, []byte("cd"), true))
				h.AN()
				h.AW()
				h.AN()
			},
			want: []string{"A: ping 70", "A> " + frame(0x8A, []byte("p")), "A: " + textMsg([]byte("abcd"))},
		},
	)

	for _, p := range [][]byte{nil, []byte("hello"), bytesOf(125, 'p')} {
		rows = append(rows, row{
			name: fmt.Sprintf("ping with %d bytes from B", len(p)),
			do: func(h *harness) {
				h.must(h.b.Ping(p))
				h.AN()
				h.AW()
				h.BN()
			},
			want: []string{"A: ping " + summary(p), "A> " + frame(0x8A, p), "B: pong " + summary(p)},
		})
	}
	rows = append(rows,
		row{
			name: "ping with a payload from A",
			do: func(h *harness) {
				h.A(h.a.Ping([]byte("abc")))
				h.AW()
				h.BN()
				h.BW()
				h.AN()
			},
			want: []string{"A: ping() ok", "A> 89 03 616263", "B: ping 616263", "B> 8a 03 616263", "A: pong 616263"},
		},
		row{
			name: "unsolicited pong",
			peer: peerRaw,
			do: func(h *harness) {
				h.must(h.raw.Frame(rawpeer.Pong([]byte("x"))))
				h.must(h.raw.Ping([]byte("y")))
				h.AN()
				h.AN()
				h.AW()
			},
			want: []string{"A: pong 78", "A: ping 79", "A> 8a 01 79"},
		},
	)

	// Close from B, with every class of valid code.
	for _, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999} {
		rows = append(rows, closeFromB(fmt.Sprintf("close %d from B", code), code, []byte("bye")))
	}
	rows = append(rows,
		closeFromB("close with a reason of 123 bytes from B", 1000, bytesOf(123, 'r')),
		closeFromB("close with a reason outside ASCII from B", 4000, []byte("adiós €")),
		row{
			name: "close with an empty body from B",
			do: func(h *harness) {
				h.must(h.b.Close(0, nil))
				h.BW()
				h.AN()
				h.AW()
				h.BN()
			},
			want: []string{"B> 88 00", `A: close 1005 ""`, "A> 88 00", `B: close 1005 ""`},
		},
	)

	// Close bodies that are not allowed on the wire.
	for _, code := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535} {
		body := []byte{byte(code >> 8), byte(code)}
		rows = append(rows, failRow(fmt.Sprintf("close code %d on the wire", code), 1002, "invalid close code", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Opcode: opClose, Payload: body}))
		}))
	}
	rows = append(rows,
		failRow("close body of 1 byte", 1002, "close frame payload of 1 byte", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Opcode: opClose, Payload: []byte{0x03}}))
		}),
		failRow("close reason not UTF-8", 1007, "close reason is not valid utf-8", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Opcode: opClose, Payload: append(closeBody(1000, ""), 0xff)}))
		}),
		failRow("close reason of 124 bytes", 1002, "control frame payload longer than 125 bytes", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Close(1000, strings.Repeat("r", 124))))
		}),
	)

	// Close from A.
	for _, code := range []uint16{1000, 1001, 3000, 4999} {
		rows = append(rows, closeFromA(fmt.Sprintf("close %d from A", code), code, []byte("bye")))
	}
	rows = append(rows, closeFromA("close with a reason of 123 bytes from A", 1000, bytesOf(123, 'r')))
	for _, code := range []uint16{999, 1004, 1005, 1006, 1015, 2999, 5000} {
		rows = append(rows, refusedCloseFromA(fmt.Sprintf("close %d from A is refused", code), code, nil))
	}
	rows = append(rows, refusedCloseFromA("close with a reason of 124 bytes from A is refused", 1000, bytesOf(124, 'r')))
	rows = append(rows, row{
		name: "send after close returns its error",
		do: func(h *harness) {
			h.closeA(1000, nil)
			h.AW()
			h.BN()
			h.BW()
			h.AN()
			h.A(h.a.Send(opText, []byte("late"), true))
		},
		want:  []string{"A: close() ok", "A> 88 02 03e8", `B: close 1000 ""`, "B> 88 02 03e8", `A: close 1000 ""`, "A: send() error later"},
		rally: []string{"A: close() ok", "A> 88 02 03e8", `B: close 1000 ""`, "B> 88 02 03e8", `A: close 1000 ""`, "A: send() error at once"},
		diff:  diffSendClosed,
	})

	// Invalid UTF-8.
	for _, bad := range []struct {
		name   string
		p      []byte
		reason string // rally's close reason
	}{
		{"a byte that never starts UTF-8", []byte{0xff, 0x68}, utf8Reason},
		{"an overlong encoding", []byte{0xc0, 0xaf}, utf8Reason},
		{"a surrogate", []byte{0xed, 0xa0, 0x80}, utf8Reason},
		{"a code point above U+10FFFF", []byte{0xf4, 0x90, 0x80, 0x80}, utf8Reason},
		{"a character cut at the end", []byte{0x68, 0xe2, 0x82}, "text message ends inside a UTF-8 sequence"},
	} {
		rows = append(rows, row{
			name: "text with " + bad.name,
			do: func(h *harness) {
				h.must(h.b.Send(opText, bad.p, true))
				h.AN()
				h.AW()
				h.BN()
				h.AN()
			},
			want: []string{"A: fail 1007", "A> 88 02 03ef", `B: close 1007 ""`, `A: close 1006 ""`},
			rally: []string{"A: fail 1007", "A> " + frame(0x88, closeBody(1007, bad.reason)),
				fmt.Sprintf("B: close 1007 %q", bad.reason), fmt.Sprintf("A: close 1007 %q", bad.reason)},
			diff: diffFailReport,
		})
	}
	rows = append(rows,
		row{
			name: "invalid UTF-8 in the first fragment of a text",
			peer: peerRaw,
			do: func(h *harness) {
				h.must(h.raw.Frame(rawpeer.Fragment(opText, []byte{0xff}, false)))
				h.must(h.raw.Ping([]byte("x")))
				if strings.HasPrefix(h.AW(), "8a") {
					// Still open: the failure waits for the end of the message.
					h.must(h.raw.Frame(rawpeer.Continuation([]byte("h"), true)))
					h.AW()
				}
				h.answerClose(1007)
				h.AN()
				h.AN()
			},
			want:  []string{"A> 8a 01 78", "A> 88 02 03ef", "A: ping 78", "A: fail 1007"},
			rally: []string{"A> " + frame(0x88, closeBody(1007, utf8Reason)), "A: fail 1007", fmt.Sprintf("A: close 1007 %q", utf8Reason)},
			diff:  diffUTF8FailFast,
		},
		row{
			name: "text sent by A with invalid UTF-8 goes out as it is",
			do: func(h *harness) {
				h.A(h.a.Send(opText, []byte{0xff, 0x68}, true))
				h.AW()
				h.BN()
				h.BW()
				h.AN()
			},
			want: []string{"A: send() ok", "A> 81 02 ff68", "B: fail 1007", "B> 88 02 03ef", `A: close 1007 ""`},
		},
	)

	// Size limits.
	rows = append(rows,
		row{
			name:  "message of exactly the limit",
			limit: 1024,
			do: func(h *harness) {
				h.must(h.b.Send(opBinary, bytesOf(1024, 'x'), true))
				h.AN()
			},
			want: []string{"A: " + binMsg(bytesOf(1024, 'x'))},
		},
		limitRow("message one byte over the limit", func(h *harness) {
			h.must(h.b.Send(opBinary, bytesOf(1025, 'x'), true))
		}),
		limitRow("fragments adding up to more than the limit", func(h *harness) {
			h.must(h.b.Send(opBinary, bytesOf(600, 'x'), false))
			h.must(h.b.Send(opBinary, bytesOf(600, 'x'), true))
		}),
	)

	// Framing rules, from a raw B.
	rows = append(rows,
		failRow("frame with the wrong masking", 1002, maskReason, func(h *harness) { h.wrongMask(rawpeer.Text("hi")) }),
		failRow("reserved data opcode 0x3", 1002, "reserved opcode 0x3", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Opcode: 0x3}))
		}),
		failRow("reserved control opcode 0xB", 1002, "reserved opcode 0xB", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Opcode: 0xB}))
		}),
		failRow("RSV1 without an extension", 1002, "rsv bits set that no negotiated extension allows", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: opText, Payload: []byte("x")}))
		}),
		failRow("RSV2 and RSV3", 1002, "rsv bits set that no negotiated extension allows", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv2 | rawpeer.Rsv3, Opcode: opBinary}))
		}),
		failRow("ping of 126 bytes", 1002, "control frame payload longer than 125 bytes", func(h *harness) {
			h.must(h.raw.Ping(bytesOf(126, 'p')))
		}),
		failRow("fragmented ping", 1002, "fragmented control frame", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Frame{Opcode: opPing, Payload: []byte("p")}))
		}),
		failRow("continuation with no message open", 1002, "continuation frame without a message in progress", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Continuation([]byte("x"), true)))
		}),
		failRow("new message while a fragmented one is open", 1002, "new data frame inside a fragmented message", func(h *harness) {
			h.must(h.raw.Frame(rawpeer.Fragment(opText, []byte("a"), false)))
			h.must(h.raw.Frame(rawpeer.Text("b")))
		}),
		func() row {
			r := failRow("length with its most significant bit set", 1009, "", func(h *harness) {
				b := []byte{0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 1}
				if h.client {
					b[1] |= 0x80
					b = append(b, 1, 2, 3, 4)
				}
				h.must(h.raw.Raw(b))
			})
			// RFC 6455 5.2 makes the bit a framing rule, which rally answers
			// with 1002; ws treats it as a length it cannot hold (1009).
			const reason = "64-bit payload length with the most significant bit set"
			r.rally = []string{"A> " + frame(0x88, closeBody(1002, reason)), "A: fail 1002", fmt.Sprintf("A: close 1002 %q", reason)}
			r.diff = diffLengthMSB
			return r
		}(),
		failRow("header claiming 200 MiB, over both defaults", 1009, limitReason, func(h *harness) {
			b := []byte{0x82, 0x7F, 0, 0, 0, 0, 0x0C, 0x80, 0, 0}
			if h.client {
				b[1] |= 0x80
				b = append(b, 1, 2, 3, 4)
			}
			h.must(h.raw.Raw(b))
		}),
	)
	// Compression rows (each permessage-deflate negotiation variant:
	// offers with and without context takeover and window bits, compressed
	// fragments, a compressed message over the limit once inflated) join
	// this table when rally negotiates permessage-deflate; docs/INTEROP.md
	// lists them.
	return rows
}

func closeFromB(name string, code uint16, reason []byte) row {
	body := closeBody(code, string(reason))
	return row{
		name: name,
		do: func(h *harness) {
			h.must(h.b.Close(code, reason))
			h.BW()
			h.AN()
			h.AW()
			h.BN()
		},
		want: []string{"B> " + frame(0x88, body), fmt.Sprintf("A: close %d %q", code, reason), "A> " + frame(0x88, body), fmt.Sprintf("B: close %d %q", code, reason)},
	}
}

func closeFromA(name string, code uint16, reason []byte) row {
	body := closeBody(code, string(reason))
	return row{
		name: name,
		do: func(h *harness) {
			h.closeA(code, reason)
			h.AW()
			h.BN()
			h.BW()
			h.AN()
		},
		want: []string{"A: close() ok", "A> " + frame(0x88, body), fmt.Sprintf("B: close %d %q", code, reason),
			"B> " + frame(0x88, body), fmt.Sprintf("A: close %d %q", code, reason)},
	}
}

// refusedCloseFromA: A's close call is refused, and the connection goes on
// as if it had not been made. Older ws differed here (rally validates
// before any state changes, ws moved to CLOSING first), but ws
// 8.23.1 validates first too: its close() throws before it changes
// readyState, and the send that follows goes out. Both sides agree.
func refusedCloseFromA(name string, code uint16, reason []byte) row {
	return row{
		name: name,
		do: func(h *harness) {
			h.A(h.a.Close(code, reason))
			h.A(h.a.Send(opText, []byte("still open"), true))
			h.AW()
			h.BN()
		},
		want: []string{"A: close() refused", "A: send() ok", "A> " + frame(0x81, []byte("still open")), "B: " + textMsg([]byte("still open"))},
	}
}

func limitRow(name string, send func(h *harness)) row {
	return row{
		name:  name,
		limit: 1024,
		do: func(h *harness) {
			send(h)
			h.AN()
			h.AW()
			h.BN()
			h.AN()
		},
		want: []string{"A: fail 1009", "A> 88 02 03f1", `B: close 1009 ""`, `A: close 1006 ""`},
		rally: []string{"A: fail 1009", "A> " + frame(0x88, closeBody(1009, limitReason)),
			fmt.Sprintf("B: close 1009 %q", limitReason), fmt.Sprintf("A: close 1009 %q", limitReason)},
		diff: diffFailReport,
	}
}

// runRows runs rows with A in the server role (server true) or the client
// role, first as npm ws, then as rally (as a server, in each mode).
func runRows(t *testing.T, server bool, rows []row) {
	node := startNode(t, "interop-peer.mjs")
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Run("npm ws", func(t *testing.T) {
				got := runRow(t, node, server, false, r, serverMode{})
				if !slices.Equal(got, r.want) {
					t.Errorf("npm ws as A (the reference) no longer does what the row says:\n%s", table(got, r.want))
				}
			})
			t.Run("rally", func(t *testing.T) {
				want := r.want
				if r.rally != nil {
					want = r.rally
					t.Logf("rally differs from npm ws here: %s", r.diff)
				}
				check := func(t *testing.T, mode serverMode) {
					got := runRow(t, node, server, true, r, mode)
					if !slices.Equal(got, want) {
						t.Errorf("rally as A:\n%s", table(got, want))
					}
				}
				if server {
					inModes(t, check)
				} else {
					check(t, serverMode{})
				}
			})
		})
	}
}

// table shows observations side by side with what the row wants.
func table(got, want []string) string {
	var b strings.Builder
	for i := range max(len(got), len(want)) {
		g, w := "", ""
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		mark := "  "
		if g != w {
			mark = "!="
		}
		fmt.Fprintf(&b, "  %s got %-60s want %s\n", mark, g, w)
	}
	return b.String()
}

// runRow sets A and B up for r and runs it; a rally server runs in mode.
func runRow(t *testing.T, node *nodePeer, server, useRally bool, r row, mode serverMode) []string {
	h := &harness{t: t, client: server}
	var target string // what the tap forwards to: the server
	var acceptWS func() (int, error)
	var acceptRally chan *rallyEndpoint
	var acceptRaw chan *rawEndpoint
	connOpts := rally.ConnOptions{ReadLimit: r.limit}

	// The server.
	switch {
	case server && useRally:
		target, acceptRally = newRallyServer(t, mode, &rally.AcceptOptions{ConnOptions: connOpts})
	case server || r.peer == peerWS:
		limit := int64(0)
		if server {
			limit = r.limit
		}
		idx, port := node.listen(t, limit)
		target = fmt.Sprintf("127.0.0.1:%d", port)
		acceptWS = func() (int, error) { return node.nextConnection(idx) }
	default:
		target, acceptRaw = listenRaw(t)
	}
	tap := newWireTap(t, target)
	url := "ws://" + tap.Addr() + "/"
	h.aWire, h.bWire = tap.s2c, tap.c2s
	if !server {
		h.aWire, h.bWire = tap.c2s, tap.s2c
	}

	// The client.
	var clientEnd endpoint
	switch {
	case !server && useRally:
		e, err := dialRally(t, url, &rally.DialOptions{ConnOptions: connOpts})
		if err != nil {
			t.Fatalf("rally client: %v", err)
		}
		clientEnd = e
	case !server || r.peer == peerWS:
		limit := int64(0)
		if !server {
			limit = r.limit
		}
		conn, err := node.connect(t, url, limit)
		if err != nil {
			t.Fatal(err)
		}
		clientEnd = &wsEndpoint{t: t, p: node, conn: conn}
	default:
		p, _, err := rawpeer.DialClient(tap.Addr(), "/", nil, waitFor)
		if err != nil {
			t.Fatalf("raw client: %v", err)
		}
		clientEnd = &rawEndpoint{p: p}
	}

	// The server's end of the connection.
	var serverEnd endpoint
	switch {
	case acceptRally != nil:
		select {
		case e := <-acceptRally:
			serverEnd = e
		case <-time.After(waitFor):
			t.Fatal("rally server accepted no connection")
		}
	case acceptWS != nil:
		conn, err := acceptWS()
		if err != nil {
			t.Fatal(err)
		}
		serverEnd = &wsEndpoint{t: t, p: node, conn: conn}
	default:
		select {
		case e := <-acceptRaw:
			serverEnd = e
			acceptRaw <- e // listenRaw's cleanup hangs it up
		case <-time.After(waitFor):
			t.Fatal("raw server got no connection")
		}
	}
	t.Cleanup(func() {
		clientEnd.Hangup()
		serverEnd.Hangup()
	})

	h.a, h.b = serverEnd, clientEnd
	if !server {
		h.a, h.b = clientEnd, serverEnd
	}
	if raw, ok := h.b.(*rawEndpoint); ok {
		h.raw = raw
	}
	if e, ok := h.a.(*rallyEndpoint); ok && !server {
		readerReady(h, e)
	}
	r.do(h)
	return h.seen
}

// readerReady makes sure that the reading goroutine of a dialed rally A is
// inside Read before the row starts: a ping's pong has to come back
// through it. Otherwise a Close that starts before the first Read does the
// reading itself (discarding data) and the row's events could depend on
// which of the two got there first. The ping and pong are taken off the
// wire logs and B's events.
func readerReady(h *harness, e *rallyEndpoint) {
	h.t.Helper()
	if s := e.Ping(nil); s != "ping() ok" {
		h.t.Fatalf("rally client: %s", s)
	}
	if h.raw != nil {
		if f := h.raw.Next(); f != "89 00" {
			h.t.Fatalf("raw server: got %s, want the ping 89 00", f)
		}
		h.must(h.raw.Frame(rawpeer.Pong(nil)))
	} else if ev := h.b.Next(); ev != "ping " {
		h.t.Fatalf("npm ws server: got %s, want the ping", ev)
	}
	if ev := e.Next(); ev != "pong " {
		h.t.Fatalf("rally client: got %s, want the pong", ev)
	}
	h.aWire.next()
	h.bWire.next()
}

// TestServerRowsMatchNpmWs runs the wire table with the server under test:
// npm ws's WebSocketServer, then rally.Server in each mode, each against an
// npm ws client (or a raw client), with a tap recording the bytes.
func TestServerRowsMatchNpmWs(t *testing.T) {
	runRows(t, true, commonRows(true))
}

// TestClientRowsMatchNpmWs runs the wire table with the client under test:
// npm ws's WebSocket, then rally.Dial, each against an npm ws server (or a
// raw server), with a tap recording the bytes.
func TestClientRowsMatchNpmWs(t *testing.T) {
	runRows(t, false, commonRows(false))
}
