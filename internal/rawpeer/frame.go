package rawpeer

import (
	"encoding/binary"
)

// Opcodes of RFC 6455 5.2. Values 0x3-0x7 and 0xB-0xF are reserved; a test
// puts them in Frame.Opcode directly.
const (
	OpContinuation byte = 0x0
	OpText         byte = 0x1
	OpBinary       byte = 0x2
	OpClose        byte = 0x8
	OpPing         byte = 0x9
	OpPong         byte = 0xA
)

// Reserved bits of the first header byte (RFC 6455 5.2), for Frame.Rsv.
const (
	Rsv1 byte = 0x40
	Rsv2 byte = 0x20
	Rsv3 byte = 0x10
)

// Length forms for BuildLen: the payload length is written in the 7-bit
// field, in the 16-bit extended field (marker 126) or in the 64-bit extended
// field (marker 127).
const (
	Len7  = 7
	Len16 = 16
	Len64 = 64
)

// Frame is one WebSocket frame as it is on the wire, before masking.
//
// Rsv holds the reserved bits in their wire positions (Rsv1|Rsv2|Rsv3 =
// 0x70); other bits are ignored by Build. Opcode is the low 4 bits. When
// Masked is set, Payload is sent XORed with Mask; a frame returned by
// ReadFrame has Masked and Mask as they were on the wire and Payload already
// unmasked.
type Frame struct {
	Fin     bool
	Rsv     byte
	Opcode  byte
	Masked  bool
	Mask    [4]byte
	Payload []byte
}

// Build returns the exact wire bytes of f with the payload length in its
// minimal form (RFC 6455 5.2). If f.Masked is set the payload is masked with
// f.Mask into the returned slice; f.Payload is never modified. Build makes
// no judgement: reserved opcodes, set Rsv bits and oversized control frames
// are built as asked.
func Build(f Frame) []byte {
	n := len(f.Payload)
	switch {
	case n <= 125:
		return BuildLen(f, Len7)
	case n <= 0xFFFF:
		return BuildLen(f, Len16)
	default:
		return BuildLen(f, Len64)
	}
}

// BuildLen is Build with the length written in a forced form: Len7, Len16
// or Len64. It is for tests of non-minimal lengths, which RFC 6455 5.2
// forbids ("the minimal number of bytes MUST be used"). It panics if the
// payload does not fit the form or the form is none of the three.
func BuildLen(f Frame, lenForm int) []byte {
	n := len(f.Payload)
	b := make([]byte, 0, 14+n)
	b0 := f.Rsv&(Rsv1|Rsv2|Rsv3) | f.Opcode&0x0F
	if f.Fin {
		b0 |= 0x80
	}
	b = append(b, b0)
	var maskBit byte
	if f.Masked {
		maskBit = 0x80
	}
	switch lenForm {
	case Len7:
		if n > 125 {
			panic("rawpeer: payload too long for the 7-bit length form")
		}
		b = append(b, maskBit|byte(n))
	case Len16:
		if n > 0xFFFF {
			panic("rawpeer: payload too long for the 16-bit length form")
		}
		b = append(b, maskBit|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	case Len64:
		b = append(b, maskBit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	default:
		panic("rawpeer: length form must be Len7, Len16 or Len64")
	}
	if f.Masked {
		b = append(b, f.Mask[:]...)
	}
	start := len(b)
	b = append(b, f.Payload...)
	if f.Masked {
		mask(b[start:], f.Mask)
	}
	return b
}

// mask XORs p in place with key, starting at key[0] (RFC 6455 5.3).
func mask(p []byte, key [4]byte) {
	for i := range p {
		p[i] ^= key[i&3]
	}
}

// Text returns a final, unmasked text frame carrying s.
func Text(s string) Frame { return Frame{Fin: true, Opcode: OpText, Payload: []byte(s)} }

// Binary returns a final, unmasked binary frame carrying b (not copied).
func Binary(b []byte) Frame { return Frame{Fin: true, Opcode: OpBinary, Payload: b} }

// Ping returns an unmasked ping frame carrying b (not copied).
func Ping(b []byte) Frame { return Frame{Fin: true, Opcode: OpPing, Payload: b} }

// Pong returns an unmasked pong frame carrying b (not copied).
func Pong(b []byte) Frame { return Frame{Fin: true, Opcode: OpPong, Payload: b} }

// Continuation returns an unmasked continuation frame carrying b (not
// copied), final when fin is set.
func Continuation(b []byte, fin bool) Frame {
	return Frame{Fin: fin, Opcode: OpContinuation, Payload: b}
}

// Fragment returns an unmasked frame of a fragmented message: opcode op for
// the first fragment, OpContinuation for the others, fin as given.
func Fragment(op byte, b []byte, fin bool) Frame {
	return Frame{Fin: fin, Opcode: op, Payload: b}
}

// Close returns an unmasked close frame whose body is the 2-byte code
// followed by reason (RFC 6455 5.5.1). Code 0 gives an empty body and then
// reason is ignored. Neither code nor reason is checked.
func Close(code uint16, reason string) Frame {
	return Frame{Fin: true, Opcode: OpClose, Payload: CloseBody(code, reason)}
}

// CloseBody returns the body of a close frame: code big-endian then reason,
// or nothing when code is 0.
func CloseBody(code uint16, reason string) []byte {
	if code == 0 {
		return []byte{}
	}
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), code)
	return append(b, reason...)
}

// ParseClose splits a close frame's body into code and reason. An empty
// body gives code 0 and ok. A 1-byte body is not a valid close body (RFC
// 6455 5.5.1) and gives ok false. The reason is returned as it was, valid
// UTF-8 or not.
func ParseClose(body []byte) (code uint16, reason []byte, ok bool) {
	switch len(body) {
	case 0:
		return 0, nil, true
	case 1:
		return 0, nil, false
	}
	return binary.BigEndian.Uint16(body), body[2:], true
}
