package frame

import (
	"errors"
	"strconv"
)

// Close codes (RFC 6455 7.4.1 and the IANA WebSocket Close Code registry).
// 1005, 1006 and 1015 are reported locally and never sent on the wire.
const (
	CloseNormal             uint16 = 1000 // the purpose of the connection is fulfilled
	CloseGoingAway          uint16 = 1001 // server shutting down, browser leaving the page
	CloseProtocolError      uint16 = 1002 // the peer broke the protocol
	CloseUnsupportedData    uint16 = 1003 // a data type the endpoint cannot accept
	CloseNoStatus           uint16 = 1005 // a close frame with an empty body was received
	CloseAbnormal           uint16 = 1006 // the connection ended without a close frame
	CloseInvalidPayload     uint16 = 1007 // data inconsistent with its type, e.g. invalid UTF-8 text
	ClosePolicyViolation    uint16 = 1008 // a message violating the endpoint's policy
	CloseTooBig             uint16 = 1009 // a message too big to process
	CloseMandatoryExtension uint16 = 1010 // the client needed an extension the server did not negotiate
	CloseInternalError      uint16 = 1011 // the server hit an unexpected condition
	CloseServiceRestart     uint16 = 1012 // the service is restarting
	CloseTryAgainLater      uint16 = 1013 // temporary overload, try again later
	CloseBadGateway         uint16 = 1014 // a gateway got an invalid response upstream
	CloseTLSHandshake       uint16 = 1015 // the TLS handshake failed
)

// ValidCloseCode reports whether code may appear in a close frame on the wire,
// sent or received: 1000-1003, 1007-1014 and 3000-4999. All others are
// invalid: 0-999, 1004 (reserved), 1005, 1006 and 1015 (local only),
// 1016-2999 (unassigned protocol range) and 5000 and above.
func ValidCloseCode(code uint16) bool {
	switch {
	case code >= 1000 && code <= 1003:
		return true
	case code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

var errReasonWithoutCode = errors.New("frame: close reason given with close code 0 (no code)")

// AppendClosePayload appends the body of a close frame to dst: the code in 2
// bytes (big endian) followed by the reason. Code 0 with an empty reason
// appends nothing (an empty close body, which the peer reports as 1005).
// Otherwise code must satisfy ValidCloseCode and reason must be valid UTF-8 of
// at most MaxCloseReason bytes, else dst is returned unchanged with an error
// naming the wrong value. These are the caller's mistakes, so the error is not
// a *ProtocolError. It allocates only if dst lacks the capacity, or to build
// an error.
func AppendClosePayload(dst []byte, code uint16, reason []byte) ([]byte, error) {
	if code == 0 {
		if len(reason) == 0 {
			return dst, nil
		}
		return dst, errReasonWithoutCode
	}
	if !ValidCloseCode(code) {
		return dst, errors.New("frame: close code " + strconv.Itoa(int(code)) + " may not be sent")
	}
	if len(reason) > MaxCloseReason {
		return dst, errors.New("frame: close reason of " + strconv.Itoa(len(reason)) + " bytes is longer than 123")
	}
	if s, i := scan(sAccept, reason); s != sAccept {
		if i < 0 { // only truncated: the reason ends inside a character
			i = len(reason)
		}
		return dst, errors.New("frame: close reason is not valid utf-8 at byte " + strconv.Itoa(i))
	}
	dst = append(dst, byte(code>>8), byte(code))
	return append(dst, reason...), nil
}

var (
	errCloseCode = &ProtocolError{Code: CloseProtocolError, Rule: "invalid close code"}
	errCloseUTF8 = &ProtocolError{Code: CloseInvalidPayload, Rule: "close reason is not valid utf-8"}
)

// ParseClosePayload reads the body of a received close frame. An empty body
// gives (CloseNoStatus, nil, nil). A 1-byte body or a code that fails
// ValidCloseCode is a *ProtocolError with Code 1002; a reason that is not
// valid UTF-8 is one with Code 1007 (RFC 6455 5.5.1, 7.4). reason aliases p.
func ParseClosePayload(p []byte) (code uint16, reason []byte, err error) {
	switch len(p) {
	case 0:
		return CloseNoStatus, nil, nil
	case 1:
		return 0, nil, errCloseOneByte
	}
	code = uint16(p[0])<<8 | uint16(p[1])
	if !ValidCloseCode(code) {
		return 0, nil, errCloseCode
	}
	reason = p[2:]
	if !ValidUTF8(reason) {
		return 0, nil, errCloseUTF8
	}
	return code, reason, nil
}
