package frame

import "encoding/binary"

// RSV bits, as they sit in the first header byte (RFC 6455 5.2). RFC 7692
// (permessage-deflate) gives RSV1 a meaning; RSV2 and RSV3 have none today.
const (
	Rsv1 byte = 0x40
	Rsv2 byte = 0x20
	Rsv3 byte = 0x10
)

const rsvBits = Rsv1 | Rsv2 | Rsv3

// Sizes fixed by RFC 6455.
const (
	// MaxHeaderSize is the longest frame header: 2 bytes, an 8-byte
	// extended length and a 4-byte masking key.
	MaxHeaderSize = 14
	// MaxControlPayload is the longest payload of a control frame (RFC 6455 5.5).
	MaxControlPayload = 125
	// MaxCloseReason is the longest close reason: a control payload minus
	// the 2-byte close code.
	MaxCloseReason = 123
)

// Header is a decoded frame header. The zero value is a non-final,
// unmasked continuation frame with an empty payload.
type Header struct {
	Fin    bool    // last frame of its message
	Rsv    byte    // any of Rsv1|Rsv2|Rsv3, in their wire positions
	Opcode Opcode  // frame type; 4 bits on the wire
	Masked bool    // the payload is masked with Mask
	Mask   [4]byte // masking key, meaningful only when Masked
	Length int64   // payload length in bytes; never negative
}

// Size returns the number of bytes Put writes for h: 2 to 14, using the
// shortest length form (7-bit up to 125, 16-bit up to 65535, else 64-bit).
func (h Header) Size() int {
	n := 2
	switch {
	case h.Length > 0xFFFF:
		n += 8
	case h.Length > 125:
		n += 2
	}
	if h.Masked {
		n += 4
	}
	return n
}

// Put encodes h at the start of b in the shortest length form and returns the
// number of bytes written (h.Size()). Bits of h.Rsv outside Rsv1|Rsv2|Rsv3 and
// of h.Opcode above 0xF are ignored. Put panics if len(b) < h.Size() or if
// h.Length is negative.
func Put(b []byte, h Header) int {
	b0 := byte(h.Opcode&0x0F) | h.Rsv&rsvBits
	if h.Fin {
		b0 |= 0x80
	}
	var b1 byte
	if h.Masked {
		b1 = 0x80
	}
	var n int
	switch l := uint64(h.Length); {
	case l <= 125:
		_ = b[1]
		b[0] = b0
		b[1] = b1 | byte(l)
		n = 2
	case l <= 0xFFFF:
		_ = b[3]
		b[0] = b0
		b[1] = b1 | 126
		binary.BigEndian.PutUint16(b[2:4], uint16(l))
		n = 4
	case l < 1<<63:
		_ = b[9]
		b[0] = b0
		b[1] = b1 | 127
		binary.BigEndian.PutUint64(b[2:10], l)
		n = 10
	default:
		panic("frame: Put with a negative payload length")
	}
	if h.Masked {
		m := b[n:]
		_ = m[3]
		m[0], m[1], m[2], m[3] = h.Mask[0], h.Mask[1], h.Mask[2], h.Mask[3]
		n += 4
	}
	return n
}

// Append appends the encoding of h (as Put writes it) to dst and returns the
// extended slice. It allocates only if dst lacks the capacity.
func Append(dst []byte, h Header) []byte {
	var a [MaxHeaderSize]byte
	n := Put(a[:], h)
	return append(dst, a[:n]...)
}

// errLength64 is returned by Parse for a 64-bit length with its most
// significant bit set.
var errLength64 = &ProtocolError{Code: CloseProtocolError, Rule: "64-bit payload length with the most significant bit set"}

// Parse decodes the frame header at the start of b and returns it with its
// encoded size n. n == 0 && err == nil means b is too short: call again with
// more bytes. Parse never reads beyond b and never needs more than
// MaxHeaderSize bytes.
//
// Parse reports only structural errors: a 64-bit length with the most
// significant bit set is a *ProtocolError with Code 1002 (RFC 6455 5.2),
// reported as soon as that bit is in b. Non-minimal length encodings are
// accepted, as npm ws and browsers accept them. The receiving rules of
// RFC 6455 5.2-5.5 are CheckHeader's.
func Parse(b []byte) (h Header, n int, err error) {
	if len(b) < 2 {
		return Header{}, 0, nil
	}
	b0, b1 := b[0], b[1]
	h.Fin = b0&0x80 != 0
	h.Rsv = b0 & rsvBits
	h.Opcode = Opcode(b0 & 0x0F)
	h.Masked = b1&0x80 != 0
	n = 2
	switch l := b1 & 0x7F; l {
	case 126:
		if len(b) < 4 {
			return Header{}, 0, nil
		}
		h.Length = int64(binary.BigEndian.Uint16(b[2:4]))
		n = 4
	case 127:
		if len(b) < 10 {
			if len(b) > 2 && b[2]&0x80 != 0 {
				return Header{}, 0, errLength64
			}
			return Header{}, 0, nil
		}
		l64 := binary.BigEndian.Uint64(b[2:10])
		if l64>>63 != 0 {
			return Header{}, 0, errLength64
		}
		h.Length = int64(l64)
		n = 10
	default:
		h.Length = int64(l)
	}
	if h.Masked {
		if len(b) < n+4 {
			return Header{}, 0, nil
		}
		m := b[n : n+4]
		h.Mask = [4]byte{m[0], m[1], m[2], m[3]}
		n += 4
	}
	return h, n, nil
}
