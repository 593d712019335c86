package loadgen

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
)

// RFC 6455 5.2 opcodes and header bits.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA

	bitFin  = 0x80
	bitsRsv = 0x70
	bitRsv1 = 0x40
	bitMask = 0x80
)

// clientFrame returns one final frame of opcode op, masked with key as a
// client must (RFC 6455 5.3).
func clientFrame(op byte, payload []byte, key [4]byte) []byte {
	return clientFrameRsv(op, 0, payload, key)
}

// clientFrameRsv is clientFrame with the reserved bits rsv set (RSV1 for a
// compressed message).
func clientFrameRsv(op, rsv byte, payload []byte, key [4]byte) []byte {
	n := len(payload)
	f := make([]byte, 0, 14+n)
	f = append(f, bitFin|rsv|op)
	switch {
	case n <= 125:
		f = append(f, bitMask|byte(n))
	case n <= 0xFFFF:
		f = append(f, bitMask|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, bitMask|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, key[:]...)
	start := len(f)
	f = append(f, payload...)
	for i := range payload {
		f[start+i] ^= key[i&3]
	}
	return f
}

// closeFrame is a masked close frame with code 1000 and a zero key.
var closeFrame = clientFrame(opClose, []byte{0x03, 0xE8}, [4]byte{})

// errProtocol marks a reply that breaks RFC 6455: the connection cannot be
// read further.
var errProtocol = errors.New("protocol error")

// closedError is the server's close frame.
type closedError struct {
	code   int
	reason string
}

func (e *closedError) Error() string {
	if e.code == 0 {
		return "server closed the connection (close frame without code)"
	}
	return fmt.Sprintf("server closed the connection with %d %q", e.code, e.reason)
}

// reader parses server frames in place from a reused buffer. It reads
// whole messages (any fragmentation), answers pings, and compares payload
// bytes with an expected payload without copying them.
type reader struct {
	conn net.Conn
	buf  []byte
	r, w int
	// flush, when set, is called before the reader blocks on the network,
	// so that sends made while draining the buffer leave in one write.
	flush func() error
	// masked accepts masked frames (a verbatim echo of our own frames).
	masked bool
	// stopAtPong makes next return errPong when a pong arrives.
	stopAtPong bool
	// z inflates compressed replies when permessage-deflate was negotiated.
	z *inflater
	// pings and pongs, when set, count the control frames received.
	pings, pongs *atomic.Int64
	// keep makes next return each data message's payload (inflated if
	// compressed) in message.payload, gathered in kept. The frames must be
	// unmasked, as a server's are.
	keep bool
	kept []byte
}

// errPong is next's answer to a pong when the reader waits for one.
var errPong = errors.New("pong")

func newReader(conn net.Conn, size int, leftover []byte) *reader {
	if size < len(leftover) {
		size = len(leftover)
	}
	r := &reader{conn: conn, buf: make([]byte, size)}
	r.w = copy(r.buf, leftover)
	if cc, ok := conn.(*compressedConn); ok {
		r.z = &inflater{takeover: !cc.serverNoContext}
	}
	return r
}

// fill makes at least n bytes (n <= len(buf)) available at buf[r:w].
func (p *reader) fill(n int) error {
	if p.r == p.w {
		p.r, p.w = 0, 0
	}
	for p.w-p.r < n {
		if len(p.buf)-p.r < n {
			p.w = copy(p.buf, p.buf[p.r:p.w])
			p.r = 0
		}
		if p.flush != nil {
			if err := p.flush(); err != nil {
				return err
			}
		}
		m, err := p.conn.Read(p.buf[p.w:])
		p.w += m
		if err != nil && p.w-p.r < n {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// message is one data message as received.
type message struct {
	op   byte  // opText or opBinary
	size int64 // payload bytes over all fragments
	same bool  // the payload equals the expected one (when compared)
	// payload is the message's payload when the reader keeps it, valid
	// until the next call.
	payload []byte
}

// next reads one data message. When compare is set, same reports whether
// its payload equals expect. Pings are answered with pongs and pongs are
// skipped; a close frame ends with a *closedError, and anything RFC 6455
// forbids from a server (for a client that offered no extension) with an
// error wrapping errProtocol. A compressed message is inflated and its
// inflated payload counted and compared. With keep set, the payload is
// returned too.
func (p *reader) next(expect []byte, compare bool) (message, error) {
	var m message
	inMessage, compressed := false, false
	m.same = compare
	for {
		if err := p.fill(2); err != nil {
			return m, err
		}
		b0, b1 := p.buf[p.r], p.buf[p.r+1]
		hlen := 2
		switch b1 & 0x7F {
		case 126:
			hlen = 4
		case 127:
			hlen = 10
		}
		masked := b1&bitMask != 0
		if masked {
			if !p.masked {
				return m, fmt.Errorf("%w: masked frame from the server", errProtocol)
			}
			hlen += 4
		}
		if err := p.fill(hlen); err != nil {
			return m, err
		}
		h := p.buf[p.r : p.r+hlen]
		var length uint64
		switch b1 & 0x7F {
		case 126:
			length = uint64(binary.BigEndian.Uint16(h[2:]))
		case 127:
			length = binary.BigEndian.Uint64(h[2:])
			if length > 1<<62 {
				return m, fmt.Errorf("%w: frame length %d", errProtocol, length)
			}
		default:
			length = uint64(b1 & 0x7F)
		}
		var key [4]byte
		if masked {
			copy(key[:], h[hlen-4:])
		}
		p.r += hlen
		op := b0 & 0x0F
		fin := b0&bitFin != 0
		// RFC 7692 6.1: RSV1 marks the first frame of a compressed data
		// message, and only when permessage-deflate was negotiated.
		if rsv := b0 & bitsRsv; rsv != 0 && (rsv != bitRsv1 || p.z == nil || inMessage || (op != opText && op != opBinary)) {
			return m, fmt.Errorf("%w: reserved bits %#x set on opcode %#x", errProtocol, rsv, op)
		}
		if op >= opClose {
			if !fin || length > 125 {
				return m, fmt.Errorf("%w: control frame fragmented or longer than 125 bytes", errProtocol)
			}
			if err := p.control(op, int(length), masked, key); err != nil {
				return m, err
			}
			continue
		}
		switch {
		case op != opContinuation && op != opText && op != opBinary:
			return m, fmt.Errorf("%w: reserved opcode %#x", errProtocol, op)
		case op == opContinuation && !inMessage:
			return m, fmt.Errorf("%w: continuation frame outside a message", errProtocol)
		case op != opContinuation && inMessage:
			return m, fmt.Errorf("%w: new message inside a fragmented one", errProtocol)
		}
		if !inMessage {
			m.op = op
			inMessage = true
			compressed = b0&bitRsv1 != 0
			if compressed {
				p.z.zmsg = p.z.zmsg[:0]
			}
			p.kept = p.kept[:0]
		}
		if compressed {
			var err error
			if p.z.zmsg, err = p.gather(p.z.zmsg, length); err != nil {
				return m, err
			}
			if !fin {
				continue
			}
			out, err := p.z.inflate()
			if err != nil {
				return m, err
			}
			m.size = int64(len(out))
			m.same = compare && bytes.Equal(out, expect)
			if p.keep {
				m.payload = out
			}
			return m, nil
		}
		if p.keep {
			var err error
			if p.kept, err = p.gather(p.kept, length); err != nil {
				return m, err
			}
			m.size, m.payload = int64(len(p.kept)), p.kept
			m.same = compare && fin && bytes.Equal(p.kept, expect)
		} else if err := p.skipPayload(&m, length, expect); err != nil {
			return m, err
		}
		if fin {
			if m.same && m.size != int64(len(expect)) {
				m.same = false
			}
			return m, nil
		}
	}
}

// skipPayload consumes length payload bytes of the current frame,
// comparing them with expect from offset m.size while m.same holds.
func (p *reader) skipPayload(m *message, length uint64, expect []byte) error {
	for length > 0 {
		if p.r == p.w {
			if err := p.fill(1); err != nil {
				return err
			}
		}
		chunk := p.w - p.r
		if uint64(chunk) > length {
			chunk = int(length)
		}
		if m.same {
			off := m.size
			if off+int64(chunk) > int64(len(expect)) || !bytes.Equal(p.buf[p.r:p.r+chunk], expect[off:off+int64(chunk)]) {
				m.same = false
			}
		}
		m.size += int64(chunk)
		p.r += chunk
		length -= uint64(chunk)
	}
	return nil
}

// gather appends length payload bytes of the current (unmasked) frame to
// dst, the message being gathered, which may not grow past maxInflated.
func (p *reader) gather(dst []byte, length uint64) ([]byte, error) {
	if uint64(len(dst))+length > maxInflated {
		return dst, fmt.Errorf("%w: a reply of more than %d bytes", errProtocol, maxInflated)
	}
	for length > 0 {
		if p.r == p.w {
			if err := p.fill(1); err != nil {
				return dst, err
			}
		}
		chunk := min(uint64(p.w-p.r), length)
		dst = append(dst, p.buf[p.r:p.r+int(chunk)]...)
		p.r += int(chunk)
		length -= chunk
	}
	return dst, nil
}

// control handles a control frame whose header was consumed.
func (p *reader) control(op byte, n int, masked bool, key [4]byte) error {
	if err := p.fill(n); err != nil {
		return err
	}
	var body [125]byte
	copy(body[:], p.buf[p.r:p.r+n])
	p.r += n
	if masked {
		for i := 0; i < n; i++ {
			body[i] ^= key[i&3]
		}
	}
	switch op {
	case opPing:
		if p.pings != nil {
			p.pings.Add(1)
		}
		// RFC 6455 5.5.2: answer with a pong carrying the same data.
		_, err := p.conn.Write(clientFrame(opPong, body[:n], [4]byte{}))
		return err
	case opPong:
		if p.pongs != nil {
			p.pongs.Add(1)
		}
		if p.stopAtPong {
			return errPong
		}
		return nil
	case opClose:
		e := &closedError{}
		if n >= 2 {
			e.code = int(binary.BigEndian.Uint16(body[:2]))
			e.reason = string(body[2:n])
		}
		return e
	}
	return fmt.Errorf("%w: reserved control opcode %#x", errProtocol, op)
}
