package rally

import (
	"errors"
	"fmt"

	"github.com/rallyws/rally/frame"
)

// MessageType is the type of a data message: Text or Binary. It is always
// the caller's explicit choice on send, never inferred from the payload.
type MessageType int

const (
	// Text is a message of UTF-8 text (opcode 0x1). Received text is
	// validated; text sent goes out as the caller's bytes, unchanged.
	Text MessageType = MessageType(frame.OpText)
	// Binary is a message of arbitrary bytes (opcode 0x2).
	Binary MessageType = MessageType(frame.OpBinary)
)

// String returns "text", "binary" or "MessageType(n)".
func (t MessageType) String() string {
	switch t {
	case Text:
		return "text"
	case Binary:
		return "binary"
	}
	return fmt.Sprintf("MessageType(%d)", int(t))
}

func (t MessageType) valid() bool { return t == Text || t == Binary }

// Close codes a caller may pass to Close, and that CloseError reports
// (RFC 6455 7.4.1). Codes 3000-4999 are free for applications.
const (
	CloseNormal             = frame.CloseNormal
	CloseGoingAway          = frame.CloseGoingAway
	CloseProtocolError      = frame.CloseProtocolError
	CloseUnsupportedData    = frame.CloseUnsupportedData
	CloseNoStatus           = frame.CloseNoStatus // reported only: the peer's close frame had no body
	CloseAbnormal           = frame.CloseAbnormal // reported only: no close frame arrived
	CloseInvalidPayload     = frame.CloseInvalidPayload
	ClosePolicyViolation    = frame.ClosePolicyViolation
	CloseTooBig             = frame.CloseTooBig
	CloseMandatoryExtension = frame.CloseMandatoryExtension
	CloseInternalError      = frame.CloseInternalError
	CloseServiceRestart     = frame.CloseServiceRestart
	CloseTryAgainLater      = frame.CloseTryAgainLater
	CloseBadGateway         = frame.CloseBadGateway
)

// InvalidUTF8Error is returned by a send of text that is not valid UTF-8
// when ConnOptions.ValidateUTF8OnSend is set. Nothing of the message was
// accepted (for a Writer: nothing of that Write call).
type InvalidUTF8Error struct {
	// Offset is the index, in the bytes passed to the call, of the first
	// byte that makes the text invalid (its length when the text ends
	// inside a character). A Writer's Close reports 0: the message ended
	// inside a character, and was sent without that character's bytes.
	Offset int
}

func (e *InvalidUTF8Error) Error() string {
	return fmt.Sprintf("rally: text is not valid UTF-8 (first bad byte at offset %d)", e.Offset)
}

// ErrClosed is returned by an operation on a connection that has already
// closed, or that closed while the operation waited. errors.Is(err,
// ErrClosed) also holds for every *CloseError.
var ErrClosed = errors.New("rally: connection closed")

// ErrControlRate is the cause (CloseError.Err) of a connection closed with
// 1008 because its peer sent ping and pong frames faster than
// ConnOptions.ControlRate allows.
var ErrControlRate = errors.New("rally: the peer sent ping and pong frames faster than ConnOptions.ControlRate allows")

// ErrWriteStalled is the cause (CloseError.Err) of a connection let go
// with 1006 because bytes waited ConnOptions.WriteStallTimeout to be sent
// without its peer taking a single one.
var ErrWriteStalled = errors.New("rally: write stalled: the peer took no byte for the write-stall timeout")

// ProtocolError is a rule of RFC 6455 or RFC 7692 that the peer broke. It
// names the rule and carries the close code rally sent because of it
// (1002, 1007, 1008 or 1009). It reaches the caller inside a *CloseError.
type ProtocolError = frame.ProtocolError

// CloseError tells how a connection ended. It is returned by the read
// methods and passed to Server.Close, exactly once per connection.
//
//   - The peer sent a close frame: Code and Reason are the peer's (Code is
//     CloseNoStatus for an empty close body), Err is nil.
//   - The peer broke the protocol: Code is the code rally sent it (1002,
//     1007, 1008, 1009), Reason is what rally sent, and Err is the
//     *ProtocolError that names the rule.
//   - The TCP connection ended without a close frame: Code is
//     CloseAbnormal (1006) and Err is the I/O error, if any.
//   - This side closed first (Close, CloseNow, a timeout): Code and Reason
//     are what the peer answered, or CloseAbnormal if it never did.
type CloseError struct {
	Code   uint16
	Reason string
	Err    error
}

// Error describes the close: code, its meaning, the reason and the cause.
func (e *CloseError) Error() string {
	s := fmt.Sprintf("rally: connection closed with %d (%s)", e.Code, closeCodeName(e.Code))
	if e.Reason != "" {
		s += fmt.Sprintf(": %q", e.Reason)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause (a *ProtocolError, an I/O error) or nil.
func (e *CloseError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrClosed) hold for every close.
func (e *CloseError) Is(target error) bool { return target == ErrClosed }

func closeCodeName(code uint16) string {
	switch code {
	case CloseNormal:
		return "normal closure"
	case CloseGoingAway:
		return "going away"
	case CloseProtocolError:
		return "protocol error"
	case CloseUnsupportedData:
		return "unsupported data"
	case CloseNoStatus:
		return "no status"
	case CloseAbnormal:
		return "abnormal closure"
	case CloseInvalidPayload:
		return "invalid payload"
	case ClosePolicyViolation:
		return "policy violation"
	case CloseTooBig:
		return "message too big"
	case CloseMandatoryExtension:
		return "mandatory extension"
	case CloseInternalError:
		return "internal error"
	case CloseServiceRestart:
		return "service restart"
	case CloseTryAgainLater:
		return "try again later"
	case CloseBadGateway:
		return "bad gateway"
	}
	if code >= 3000 && code <= 4999 {
		return "application"
	}
	return "unknown"
}
