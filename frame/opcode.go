package frame

import "strconv"

// Opcode is the 4-bit frame type of RFC 6455 5.2.
type Opcode uint8

// The opcodes RFC 6455 5.2 defines. Any other value is reserved.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

// IsControl reports whether o is a control opcode (its high bit 0x8 is set):
// close, ping, pong and the reserved 0xB-0xF. RFC 6455 5.5.
func (o Opcode) IsControl() bool { return o&0x8 != 0 }

// IsReserved reports whether o is not one of the six opcodes RFC 6455 defines:
// 0x3-0x7 and 0xB-0xF (and any value above 0xF, which no frame can carry).
func (o Opcode) IsReserved() bool {
	return o > 0xF || (o >= 0x3 && o <= 0x7) || o >= 0xB
}

var opcodeNames = [16]string{
	"continuation", "text", "binary",
	"reserved(0x3)", "reserved(0x4)", "reserved(0x5)", "reserved(0x6)", "reserved(0x7)",
	"close", "ping", "pong",
	"reserved(0xB)", "reserved(0xC)", "reserved(0xD)", "reserved(0xE)", "reserved(0xF)",
}

// String returns the lower-case name of o ("continuation", "text", "binary",
// "close", "ping", "pong"), or "reserved(0x3)" and so on for the others.
func (o Opcode) String() string {
	if o <= 0xF {
		return opcodeNames[o]
	}
	return "reserved(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}
