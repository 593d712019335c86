package frame

import "testing"

func TestOpcodeClassesAndNamesFollowRFC6455(t *testing.T) {
	tests := []struct {
		op       Opcode
		name     string
		control  bool
		reserved bool
	}{
		{OpContinuation, "continuation", false, false},
		{OpText, "text", false, false},
		{OpBinary, "binary", false, false},
		{0x3, "reserved(0x3)", false, true},
		{0x7, "reserved(0x7)", false, true},
		{OpClose, "close", true, false},
		{OpPing, "ping", true, false},
		{OpPong, "pong", true, false},
		{0xB, "reserved(0xB)", true, true},
		{0xF, "reserved(0xF)", true, true},
		{0x10, "reserved(0x10)", false, true},
	}
	for _, tt := range tests {
		if got := tt.op.String(); got != tt.name {
			t.Errorf("Opcode(%#x).String() = %q, want %q", uint8(tt.op), got, tt.name)
		}
		if got := tt.op.IsControl(); got != tt.control {
			t.Errorf("Opcode(%#x).IsControl() = %v, want %v", uint8(tt.op), got, tt.control)
		}
		if got := tt.op.IsReserved(); got != tt.reserved {
			t.Errorf("Opcode(%#x).IsReserved() = %v, want %v", uint8(tt.op), got, tt.reserved)
		}
	}
}
