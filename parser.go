package rally

import (
	"github.com/rallyws/rally/frame"
)

// The receive engine. A parser is a push state machine: the caller hands it
// whatever bytes arrived, it returns events, and it never does I/O. A
// reader goroutine drives it today; an event loop can drive it tomorrow.
// It keeps no reference to the input between calls: a header or a control
// frame split across reads is copied into the parser's own small arrays,
// and data payload is handed out as it arrives.

type eventKind uint8

const (
	evNone    eventKind = iota // more input is needed
	evData                     // a chunk of a data message
	evControl                  // a whole control frame
)

// event is one thing the parser found. payload aliases the input (unmasked
// in place) or the parser's control buffer; it is valid until the next call.
type event struct {
	kind    eventKind
	op      frame.Opcode // message type (text/binary) for data; ping/pong/close for control
	payload []byte
	first   bool // data: the first chunk of a message
	fin     bool // data: the last chunk of a message
	// compressed: the message is compressed (RSV1 on its first frame,
	// RFC 7692 6.1); its chunks are deflate data, to be gathered and
	// inflated, and its UTF-8 is checked after inflating.
	compressed bool
}

type parser struct {
	// The small fields first, so that they pack: an idle connection
	// carries its parser.
	server     bool // frames come from clients, so they must be masked; set once by newConn, read by the write side too (Conn has no copy)
	allowedRsv byte // RSV bits negotiated extensions allow on data frames
	inFrame    bool
	inMessage  bool
	msgOp      frame.Opcode
	msgFirst   bool // the next data event is the message's first
	msgZ       bool // the message is compressed
	closed     bool // a close frame arrived: RFC 6455 5.5.1, nothing after it counts

	hdr       [frame.MaxHeaderSize]byte // a header split across inputs
	hdrN      uint8
	ctlN      uint8  // bytes of ctl filled
	maskPos   uint8  // the mask key's position of the next payload byte (0-3)
	fragments uint32 // frames of the message so far (packs with the fields above; readLimits caps the limit at 1<<31-1, so a count past it never wraps first)

	h         frame.Header
	remaining int64 // payload bytes of the current frame still to come

	msgLen int64
	utf8   frame.UTF8

	ctl *[frame.MaxControlPayload]byte // a control payload split across inputs (made when first needed)
}

// readLimits are the limits the parser checks a message's frames
// against. They are the connection's options' (ConnOptions.readLimits),
// passed in rather than kept in the parser: every connection, an idle one
// too, carries its parser, and connections with the same options share
// them.
type readLimits struct {
	size      int64  // largest message; <= 0 means no limit
	fragments uint32 // frames per message; 0 means no limit
}

func violation(code uint16, rule string) error {
	return &frame.ProtocolError{Code: code, Rule: rule}
}

// next consumes bytes from b and returns the next event and how many bytes
// it consumed. kind == evNone with n == len(b) means: all input used, give
// me more. After an error the parser must not be used again.
func (p *parser) next(b []byte, lim readLimits) (ev event, n int, err error) {
	if p.closed {
		return event{}, len(b), nil
	}
	for {
		if !p.inFrame {
			m, err := p.readHeader(b[n:], lim)
			n += m
			if err != nil || !p.inFrame {
				return event{}, n, err
			}
		}
		if p.h.Opcode.IsControl() {
			return p.controlPayload(b, n)
		}
		// Data payload.
		avail := int64(len(b) - n)
		if avail > p.remaining {
			avail = p.remaining
		}
		if avail == 0 && p.remaining > 0 {
			return event{}, n, nil
		}
		chunk := b[n : n+int(avail)]
		n += int(avail)
		p.remaining -= avail
		if p.msgOp == frame.OpText && !p.msgZ {
			// Text: unmask and validate in one pass over the payload.
			var i int
			if p.h.Masked {
				var pos int
				pos, i = p.utf8.FeedMasked(p.h.Mask, int(p.maskPos), chunk)
				p.maskPos = uint8(pos)
			} else {
				i = p.utf8.Feed(chunk)
			}
			if i >= 0 {
				return event{}, n, violation(frame.CloseInvalidPayload, "text message is not valid UTF-8")
			}
		} else if p.h.Masked {
			p.maskPos = uint8(frame.Mask(p.h.Mask, int(p.maskPos), chunk))
		}
		frameDone := p.remaining == 0
		fin := frameDone && p.h.Fin
		if frameDone {
			p.inFrame = false
		}
		if fin {
			if p.msgOp == frame.OpText && !p.msgZ && !p.utf8.Complete() {
				return event{}, n, violation(frame.CloseInvalidPayload, "text message ends inside a UTF-8 sequence")
			}
			p.inMessage = false
		}
		if len(chunk) == 0 && !fin && !p.msgFirst {
			// An empty non-final fragment carries nothing to report.
			continue
		}
		ev = event{kind: evData, op: p.msgOp, payload: chunk, first: p.msgFirst, fin: fin, compressed: p.msgZ}
		p.msgFirst = false
		return ev, n, nil
	}
}

// readHeader collects and checks one frame header.
func (p *parser) readHeader(b []byte, lim readLimits) (int, error) {
	var h frame.Header
	var used int
	if p.hdrN == 0 {
		hh, m, err := frame.Parse(b)
		if err != nil {
			return 0, err
		}
		if m == 0 {
			p.hdrN = uint8(copy(p.hdr[:], b))
			return len(b), nil
		}
		h, used = hh, m
	} else {
		k := copy(p.hdr[p.hdrN:], b)
		hh, m, err := frame.Parse(p.hdr[:int(p.hdrN)+k])
		if err != nil {
			return 0, err
		}
		if m == 0 {
			p.hdrN += uint8(k)
			return k, nil
		}
		h, used = hh, m-int(p.hdrN)
		p.hdrN = 0
	}
	if err := p.startFrame(h, lim); err != nil {
		return used, err
	}
	return used, nil
}

func (p *parser) startFrame(h frame.Header, lim readLimits) error {
	if err := frame.CheckHeader(h, p.server, p.allowedRsv); err != nil {
		return err
	}
	if !h.Opcode.IsControl() {
		if h.Opcode == frame.OpContinuation {
			if !p.inMessage {
				return violation(frame.CloseProtocolError, "continuation frame without a message in progress")
			}
			if h.Rsv&frame.Rsv1 != 0 {
				return violation(frame.CloseProtocolError, "RSV1 set on a continuation frame")
			}
		} else {
			if p.inMessage {
				return violation(frame.CloseProtocolError, "new data frame inside a fragmented message")
			}
			p.inMessage = true
			p.msgOp = h.Opcode
			p.msgLen = 0
			p.fragments = 0
			p.msgFirst = true
			p.msgZ = h.Rsv&frame.Rsv1 != 0
			p.utf8.Reset()
		}
		p.fragments++
		if lim.fragments > 0 && p.fragments > lim.fragments {
			return violation(frame.ClosePolicyViolation, "message split into too many fragments")
		}
		// RFC 6455 10.4: check the size on the header, before any payload is kept.
		if lim.size > 0 && h.Length > lim.size-p.msgLen {
			return violation(frame.CloseTooBig, "message larger than the read limit")
		}
		p.msgLen += h.Length
	}
	p.h = h
	p.inFrame = true
	p.remaining = h.Length
	p.maskPos = 0
	p.ctlN = 0
	return nil
}

// controlPayload gathers a control frame (<= 125 bytes) and returns it whole.
func (p *parser) controlPayload(b []byte, n int) (event, int, error) {
	avail := len(b) - n
	if int64(avail) >= p.remaining && p.ctlN == 0 {
		// Whole payload in the input: no copy.
		pl := b[n : n+int(p.remaining)]
		n += int(p.remaining)
		return p.finishControl(pl, n)
	}
	if p.ctl == nil {
		p.ctl = new([frame.MaxControlPayload]byte)
	}
	k := copy(p.ctl[p.ctlN:p.h.Length], b[n:])
	p.ctlN += uint8(k)
	n += k
	p.remaining -= int64(k)
	if p.remaining > 0 {
		return event{}, n, nil
	}
	return p.finishControl(p.ctl[:p.ctlN], n)
}

func (p *parser) finishControl(pl []byte, n int) (event, int, error) {
	if p.h.Masked {
		frame.Mask(p.h.Mask, 0, pl)
	}
	p.inFrame = false
	p.remaining = 0
	p.ctlN = 0
	if p.h.Opcode == frame.OpClose {
		p.closed = true
	}
	return event{kind: evControl, op: p.h.Opcode, payload: pl}, n, nil
}
