package conform

import (
	"fmt"
	"strings"

	"github.com/rallyws/rally/internal/rawpeer"
)

// closeReply expects nothing but the close reply, with one of codes.
func closeReply(codes ...uint16) expect {
	e := echoes()
	e.codes = codes
	return e
}

// Section 7: the close handshake.
func (t *caseTable) closing() {
	hello := "Hello World!"
	t.add("7.1.1", "Send a text message, then a close frame (1000).", "Echo the message, then answer the close with 1000.", func(s *session) {
		s.send(text(hello), rawpeer.Close(1000, ""))
		e := echoes(textMsg(hello))
		s.conclude(e)
	})
	t.add("7.1.2", "Send two close frames (1000).", "Answer the first close with 1000 and ignore the second.", func(s *session) {
		s.send(rawpeer.Close(1000, ""), rawpeer.Close(1000, ""))
		s.conclude(closeReply(1000))
	})
	t.add("7.1.3", "Send a close frame (1000), then a ping.", "Answer the close; no pong: nothing is processed after a close frame.", func(s *session) {
		s.send(rawpeer.Close(1000, ""), ping([]byte(hello)))
		s.conclude(closeReply(1000))
	})
	t.add("7.1.4", "Send a close frame (1000), then a text message.", "Answer the close; no echo.", func(s *session) {
		s.send(rawpeer.Close(1000, ""), text(hello))
		s.conclude(closeReply(1000))
	})
	t.add("7.1.5", "Send the first fragment of a text message, a close frame (1000), then the last fragment.",
		"Answer the close; no echo of the unfinished message.", func(s *session) {
			s.send(first(rawpeer.OpText, []byte("fragment1")), rawpeer.Close(1000, ""), cont([]byte("fragment2"), true))
			s.conclude(closeReply(1000))
		})
	t.add("7.1.6", "Send a text message of 256 KiB, then a close frame (1000), then a ping.",
		"Answer the close, with or without echoing the message first (INFORMATIONAL); no pong.", func(s *session) {
			p := patterned(256 << 10)
			s.send(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Payload: p}, rawpeer.Close(1000, ""), ping([]byte(hello)))
			s.conclude(expect{alts: []alt{
				{obs: nil, verdict: Informational, note: "closed without echoing the message"},
				{obs: []observation{message(rawpeer.OpText, p)}, verdict: Informational, note: "echoed the message, then closed"},
			}, codes: []uint16{1000}})
		})

	t.add("7.3.1", "Send a close frame with an empty body.", "Answer the close, with an empty body or 1000.", func(s *session) {
		s.send(rawpeer.Close(0, ""))
		s.conclude(closeReply(0, 1000))
	})
	t.add("7.3.2", "Send a close frame with a 1-byte body.", "Fail the connection (1002): a body is empty or holds a 2-byte code (RFC 6455 5.5.1).", func(s *session) {
		s.send(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpClose, Payload: []byte{0x03}})
		s.conclude(failsWith(1002, false))
	})
	for i, reason := range []string{"", hello, strings.Repeat("*", 123)} {
		t.add(fmt.Sprintf("7.3.%d", 3+i), fmt.Sprintf("Send a close frame with code 1000 and a reason of %d bytes.", len(reason)), "Answer the close with 1000.", func(s *session) {
			s.send(rawpeer.Close(1000, reason))
			s.conclude(closeReply(1000))
		})
	}
	t.add("7.3.6", "Send a close frame with code 1000 and a reason of 124 bytes (a 126-byte control frame).",
		"Fail the connection (1002): control frames carry at most 125 bytes.", func(s *session) {
			s.send(rawpeer.Close(1000, strings.Repeat("*", 124)))
			s.conclude(failsWith(1002, false))
		})
	t.add("7.5.1", "Send a close frame with code 1000 and a reason that is not valid UTF-8.",
		"Fail the connection (1007): a close reason is UTF-8 (RFC 6455 5.5.1).", func(s *session) {
			s.send(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpClose, Payload: append(rawpeer.CloseBody(1000, ""), unhex(kosme+"eda080656469746564")...)})
			s.conclude(failsWith(1007, false))
		})
	valid := []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999, 1012, 1013, 1014}
	for i, code := range valid {
		t.add(fmt.Sprintf("7.7.%d", i+1), fmt.Sprintf("Send a close frame with the valid code %d.", code),
			fmt.Sprintf("Answer the close with %d or 1000.", code), func(s *session) {
				s.send(rawpeer.Close(code, ""))
				s.conclude(closeReply(code, 1000))
			})
	}
	invalid := []uint16{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999, 1015}
	for i, code := range invalid {
		t.add(fmt.Sprintf("7.9.%d", i+1), fmt.Sprintf("Send a close frame with the invalid code %d.", code),
			"Fail the connection (1002): the code is not one a close frame may carry (RFC 6455 7.4).", func(s *session) {
				s.send(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpClose, Payload: []byte{byte(code >> 8), byte(code)}})
				s.conclude(failsWith(1002, false))
			})
	}
	for i, code := range []uint16{5000, 65535} {
		t.add(fmt.Sprintf("7.13.%d", i+1), fmt.Sprintf("Send a close frame with code %d, outside every range RFC 6455 defines.", code),
			"Recorded only (INFORMATIONAL): most peers fail the connection with 1002.", func(s *session) {
				s.send(rawpeer.Close(code, ""))
				e := echoes()
				e.alts[0].verdict = Informational
				e.closeInfo = true
				s.conclude(e)
			})
	}
}
