package frame

import (
	"errors"
	"testing"
)

// TestCheckHeaderAppliesEachStatelessRuleInBothDirections has one row per
// rule of RFC 6455 5.2-5.5; every row runs as a frame from a client (masked)
// and from a server (unmasked), so masking never decides the verdict but in
// the masking rows.
func TestCheckHeaderAppliesEachStatelessRuleInBothDirections(t *testing.T) {
	tests := []struct {
		name       string
		h          Header
		allowedRsv byte
		wantRule   string // "" = accepted
	}{
		{"final text", Header{Fin: true, Opcode: OpText, Length: 10}, 0, ""},
		{"non-final binary", Header{Opcode: OpBinary, Length: 1 << 40}, 0, ""},
		{"continuation", Header{Opcode: OpContinuation}, 0, ""},
		{"reserved data opcode 0x3", Header{Fin: true, Opcode: 0x3}, 0, "reserved opcode 0x3"},
		{"reserved data opcode 0x7", Header{Fin: true, Opcode: 0x7}, 0, "reserved opcode 0x7"},
		{"reserved control opcode 0xB", Header{Fin: true, Opcode: 0xB}, 0, "reserved opcode 0xB"},
		{"reserved control opcode 0xF", Header{Fin: true, Opcode: 0xF}, 0, "reserved opcode 0xF"},
		{"rsv1 without an extension", Header{Fin: true, Rsv: Rsv1, Opcode: OpText}, 0, "rsv bits set that no negotiated extension allows"},
		{"rsv2 without an extension", Header{Fin: true, Rsv: Rsv2, Opcode: OpBinary}, 0, "rsv bits set that no negotiated extension allows"},
		{"rsv3 without an extension", Header{Fin: true, Rsv: Rsv3, Opcode: OpText}, 0, "rsv bits set that no negotiated extension allows"},
		{"rsv1 with permessage-deflate", Header{Fin: true, Rsv: Rsv1, Opcode: OpText}, Rsv1, ""},
		{"rsv1 on a continuation is the caller's rule", Header{Rsv: Rsv1, Opcode: OpContinuation}, Rsv1, ""},
		{"rsv2 with permessage-deflate", Header{Fin: true, Rsv: Rsv2, Opcode: OpText}, Rsv1, "rsv bits set that no negotiated extension allows"},
		{"rsv1 on a ping with permessage-deflate", Header{Fin: true, Rsv: Rsv1, Opcode: OpPing}, Rsv1, "rsv bits set on a control frame"},
		{"rsv3 on a close", Header{Fin: true, Rsv: Rsv3, Opcode: OpClose}, Rsv1 | Rsv2 | Rsv3, "rsv bits set on a control frame"},
		{"ping without fin", Header{Opcode: OpPing}, 0, "fragmented control frame"},
		{"close without fin", Header{Opcode: OpClose, Length: 2}, 0, "fragmented control frame"},
		{"pong of 125 bytes", Header{Fin: true, Opcode: OpPong, Length: 125}, 0, ""},
		{"pong of 126 bytes", Header{Fin: true, Opcode: OpPong, Length: 126}, 0, "control frame payload longer than 125 bytes"},
		{"ping of 2^63-1 bytes", Header{Fin: true, Opcode: OpPing, Length: 1<<63 - 1}, 0, "control frame payload longer than 125 bytes"},
		{"close of 0 bytes", Header{Fin: true, Opcode: OpClose}, 0, ""},
		{"close of 1 byte", Header{Fin: true, Opcode: OpClose, Length: 1}, 0, "close frame payload of 1 byte"},
		{"close of 2 bytes", Header{Fin: true, Opcode: OpClose, Length: 2}, 0, ""},
		{"ping of 1 byte", Header{Fin: true, Opcode: OpPing, Length: 1}, 0, ""},
	}
	for _, tt := range tests {
		for _, fromClient := range []bool{true, false} {
			h := tt.h
			h.Masked = fromClient
			check(t, tt.name, h, fromClient, tt.allowedRsv, tt.wantRule)
		}
	}
}

func TestCheckHeaderFailsWrongMaskingWith1002(t *testing.T) {
	check(t, "unmasked text from a client", Header{Fin: true, Opcode: OpText}, true, 0, "client frame not masked")
	check(t, "unmasked close from a client", Header{Fin: true, Opcode: OpClose}, true, 0, "client frame not masked")
	check(t, "masked text from a server", Header{Fin: true, Opcode: OpText, Masked: true}, false, 0, "server frame masked")
	check(t, "masked pong from a server", Header{Fin: true, Opcode: OpPong, Masked: true}, false, 0, "server frame masked")
}

func check(t *testing.T, name string, h Header, fromClient bool, allowedRsv byte, wantRule string) {
	t.Helper()
	err := CheckHeader(h, fromClient, allowedRsv)
	if wantRule == "" {
		if err != nil {
			t.Errorf("%s (fromClient=%v): CheckHeader = %v, want nil", name, fromClient, err)
		}
		return
	}
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != CloseProtocolError || pe.Rule != wantRule {
		t.Errorf("%s (fromClient=%v): CheckHeader = %v, want 1002 %q", name, fromClient, err, wantRule)
	}
}

func TestProtocolErrorNamesTheCodeAndTheRule(t *testing.T) {
	e := &ProtocolError{Code: 1002, Rule: "control frame payload longer than 125 bytes"}
	want := "websocket: protocol error (1002): control frame payload longer than 125 bytes"
	if got := e.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
