package natsbroker

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/rallyws/rally"
)

const (
	wireVersion = 1
	// wireSigned is the version of a message that ends with its MAC.
	wireSigned = 2
	macLen     = 32 // HMAC-SHA256
	wireText   = 1
	wireBinary = 2
	// maxNodeName is the longest node name the header can carry.
	maxNodeName = 255
)

// headerLen returns the length of the header for a node name of n bytes.
func headerLen(n int) int { return 3 + n + 4 + 8 }

// head is the header of one message on the wire.
type head struct {
	typ    rally.MessageType
	node   string
	stream uint32
	seq    uint64
}

// appendMessage appends the header of h and then payload to dst. The
// caller has checked h.node (1..255 bytes) and h.typ (Text or Binary).
func appendMessage(dst []byte, h head, payload []byte) []byte {
	t := byte(wireText)
	if h.typ == rally.Binary {
		t = wireBinary
	}
	dst = append(dst, wireVersion, t, byte(len(h.node)))
	dst = append(dst, h.node...)
	dst = binary.BigEndian.AppendUint32(dst, h.stream)
	dst = binary.BigEndian.AppendUint64(dst, h.seq)
	return append(dst, payload...)
}

var errShort = errors.New("shorter than its header")

// maxSeq is the largest sequence number believed: a node publishing ten
// million messages a second on one topic reaches it in 28 years.
const maxSeq = 1 << 53

// printableName reports whether a node name is valid UTF-8 without
// control characters (it reaches logs and metrics).
func printableName(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// printable quotes a name for an error message whatever its bytes.
func printable(b []byte) string { return strconv.QuoteToASCII(string(b)) }

// sign turns msg, made by appendMessage, into a signed message: version
// wireSigned, then the HMAC of subject, a zero byte and the message,
// appended. mac is keyed with the cluster secret; the caller owns it.
func sign(mac hash.Hash, subject string, msg []byte) []byte {
	msg[0] = wireSigned
	mac.Reset()
	mac.Write([]byte(subject))
	mac.Write([]byte{0})
	mac.Write(msg)
	return mac.Sum(msg)
}

var errUnsigned = errors.New("not signed with the cluster secret")

// verify checks the MAC of a signed message that came on subject and
// returns the message without it.
func verify(mac hash.Hash, subject string, p []byte) ([]byte, error) {
	if len(p) < 1+macLen || p[0] != wireSigned {
		return nil, errUnsigned
	}
	body := p[:len(p)-macLen]
	var sum [macLen]byte
	mac.Reset()
	mac.Write([]byte(subject))
	mac.Write([]byte{0})
	mac.Write(body)
	if !hmac.Equal(mac.Sum(sum[:0]), p[len(body):]) {
		return nil, errUnsigned
	}
	return body, nil
}

// parseMessage splits a message of format version (wireVersion, or
// wireSigned once its MAC is checked and cut off) into its header and
// payload, which aliases p. The node name is returned as bytes aliasing p
// too, so that a receiver can compare it without allocating.
func parseMessage(p []byte, version byte) (typ rally.MessageType, node []byte, stream uint32, seq uint64, payload []byte, err error) {
	if len(p) < 3 {
		return 0, nil, 0, 0, nil, errShort
	}
	if p[0] != version {
		return 0, nil, 0, 0, nil, fmt.Errorf("format version %d, this node reads %d", p[0], version)
	}
	switch p[1] {
	case wireText:
		typ = rally.Text
	case wireBinary:
		typ = rally.Binary
	default:
		return 0, nil, 0, 0, nil, fmt.Errorf("message type %d is neither text (1) nor binary (2)", p[1])
	}
	n := int(p[2])
	if n == 0 {
		return 0, nil, 0, 0, nil, errors.New("empty node name")
	}
	if len(p) < headerLen(n) {
		return 0, nil, 0, 0, nil, errShort
	}
	node = p[3 : 3+n]
	if !printableName(node) {
		return 0, nil, 0, 0, nil, fmt.Errorf("node name %q is not printable UTF-8", printable(node))
	}
	stream = binary.BigEndian.Uint32(p[3+n:])
	seq = binary.BigEndian.Uint64(p[3+n+4:])
	if seq == 0 || seq > maxSeq {
		return 0, nil, 0, 0, nil, fmt.Errorf("sequence number %d is not 1 to 2^53", seq)
	}
	return typ, node, stream, seq, p[headerLen(n):], nil
}
