package frame

import "strconv"

// ProtocolError is a rule of RFC 6455 / RFC 7692 broken by the peer, with the
// close code it calls for. The values this package returns may be shared
// between calls: compare and read them, do not modify them.
type ProtocolError struct {
	Code uint16 // the close code to send: 1002, 1007, 1008 or 1009
	Rule string // what was broken, lower case, e.g. "control frame payload longer than 125 bytes"
}

// Error returns "websocket: protocol error (<code>): <rule>".
func (e *ProtocolError) Error() string {
	return "websocket: protocol error (" + strconv.Itoa(int(e.Code)) + "): " + e.Rule
}

func protocolError(rule string) *ProtocolError {
	return &ProtocolError{Code: CloseProtocolError, Rule: rule}
}

// The errors of CheckHeader, built once so that a failing check does not
// allocate either.
var (
	errReservedOpcode = func() (e [16]*ProtocolError) {
		for o := range e {
			if Opcode(o).IsReserved() {
				e[o] = protocolError("reserved opcode 0x" + "0123456789ABCDEF"[o:o+1])
			}
		}
		return e
	}()
	errOpcodeRange    = protocolError("opcode above 0xF")
	errRsv            = protocolError("rsv bits set that no negotiated extension allows")
	errControlRsv     = protocolError("rsv bits set on a control frame")
	errControlFin     = protocolError("fragmented control frame")
	errControlLength  = protocolError("control frame payload longer than 125 bytes")
	errCloseOneByte   = protocolError("close frame payload of 1 byte")
	errClientUnmasked = protocolError("client frame not masked")
	errServerMasked   = protocolError("server frame masked")
)

// CheckHeader applies the stateless receiving rules of RFC 6455 5.2-5.5 to a
// header that arrived. fromClient says the frame was sent by a client, so it
// must be masked; a frame from a server must not be (RFC 6455 5.1). allowedRsv
// holds the RSV bits the negotiated extensions allow on data frames (0 without
// extensions, Rsv1 with permessage-deflate).
//
// It returns a *ProtocolError with Code 1002 for a reserved opcode, RSV bits
// outside allowedRsv, any RSV bit on a control frame, a control frame without
// FIN, a control payload over 125 bytes, a close payload of exactly 1 byte, or
// wrong masking; otherwise nil. Rules that depend on state (a continuation
// frame with no message open, a data frame while one is open, RSV1 on a
// continuation frame, size limits) are the caller's.
func CheckHeader(h Header, fromClient bool, allowedRsv byte) error {
	if h.Opcode.IsReserved() {
		if h.Opcode > 0xF {
			return errOpcodeRange
		}
		return errReservedOpcode[h.Opcode]
	}
	if h.Opcode.IsControl() {
		// RFC 6455 5.5: control frames are not fragmented, carry at
		// most 125 bytes, and no extension defines RSV bits on them.
		switch {
		case h.Rsv != 0:
			return errControlRsv
		case !h.Fin:
			return errControlFin
		case h.Length > MaxControlPayload:
			return errControlLength
		case h.Opcode == OpClose && h.Length == 1:
			// RFC 6455 5.5.1: a close body starts with a 2-byte code.
			return errCloseOneByte
		}
	} else if h.Rsv&^allowedRsv != 0 {
		return errRsv
	}
	if h.Masked != fromClient {
		if fromClient {
			return errClientUnmasked
		}
		return errServerMasked
	}
	return nil
}
