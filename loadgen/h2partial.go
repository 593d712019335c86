package loadgen

import (
	"context"
	"encoding/binary"
	"sync"
)

// The h2-partial scenario: partial's attack over HTTP/2 (RFC 8441).
// Each WebSocket stream sends a binary frame that claims --size bytes and
// all of them but the last, in DATA frames within the flow-control
// windows the server grants (RFC 9113 6.9): what the server holds is
// what it read, as over HTTP/1.1, plus what net/http buffered for the
// streams before rally read it.

// h2PartialStreams is how many streams h2-partial opens on one HTTP/2
// connection: the most rally serve allows at once.
const h2PartialStreams = 100

// h2Partial opens cfg.Conns streams, h2PartialStreams to a connection,
// each sending a message of cfg.Size bytes but its last.
func (h *hostileRun) h2Partial(ctx context.Context) {
	path := pathOf(h.cfg.URL)
	for left := h.cfg.Conns; left > 0 && ctx.Err() == nil; left -= h2PartialStreams {
		h.h2Streams(ctx, path, min(left, h2PartialStreams), "", nil, newH2Senders(h, h.cfg.Size))
	}
}

// h2Senders sends a message that never ends on each accepted stream of
// one HTTP/2 connection, within the windows the server grants, and counts
// how the server answered each stream: a close frame ("close 1013
// (reason)"), the stream's end, or its reset.
type h2Senders struct {
	h       *hostileRun
	size    int
	mu      sync.Mutex
	cond    *sync.Cond
	conn    int64 // the connection's send window
	initial int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	frame   int   // the server's SETTINGS_MAX_FRAME_SIZE
	streams map[uint32]*h2Send
	stopped bool
}

// h2Send is one stream's state.
type h2Send struct {
	window int64
	ended  bool   // the server answered, ended or reset it
	got    []byte // what the server sent on it, until it is understood
}

func newH2Senders(h *hostileRun, size int) *h2Senders {
	// RFC 9113 6.5.2 and 6.9.2: the defaults until the server's SETTINGS.
	s := &h2Senders{h: h, size: size, conn: 65535, initial: 65535, frame: 16 << 10, streams: map[uint32]*h2Send{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// settings applies the server's SETTINGS: a new initial window changes
// every open stream's window by the difference (RFC 9113 6.9.2).
func (s *h2Senders) settings(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; len(p) >= 6; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch binary.BigEndian.Uint16(p) {
		case 0x4:
			delta := int64(v) - s.initial
			s.initial = int64(v)
			for _, st := range s.streams {
				st.window += delta
			}
		case 0x5:
			s.frame = int(v)
		}
	}
	s.cond.Broadcast()
}

// window applies a WINDOW_UPDATE: stream 0 is the connection.
func (s *h2Senders) window(id uint32, inc int64) {
	s.mu.Lock()
	if id == 0 {
		s.conn += inc
	} else if st := s.streams[id]; st != nil {
		st.window += inc
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

// start sends on stream id, on a goroutine of its own.
func (s *h2Senders) start(c *h2NonReaders, id uint32) {
	s.mu.Lock()
	st := &h2Send{window: s.initial}
	s.streams[id] = st
	s.mu.Unlock()
	go s.send(c, id, st)
}

// h2Zeros is the payload every stream sends (masked with a zero key: the
// bytes as they are), shared.
var h2Zeros = make([]byte, 64<<10)

func (s *h2Senders) send(c *h2NonReaders, id uint32, st *h2Send) {
	hdr := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(hdr[2:10], uint64(s.size))
	total := len(hdr) + s.size - 1
	for off := 0; off < total; {
		s.mu.Lock()
		for !s.stopped && !st.ended && (s.conn <= 0 || st.window <= 0) {
			s.cond.Wait()
		}
		if s.stopped || st.ended {
			s.mu.Unlock()
			return
		}
		n := int(min(int64(total-off), s.conn, st.window, int64(s.frame), int64(len(h2Zeros))))
		s.conn -= int64(n)
		st.window -= int64(n)
		s.mu.Unlock()
		p := h2Zeros[:n]
		if off < len(hdr) {
			p = append(hdr[off:min(len(hdr), off+n):min(len(hdr), off+n)], h2Zeros[:max(0, n-(len(hdr)-off))]...)
		}
		if c.writeData(id, p) != nil {
			return
		}
		off += n
	}
}

// data takes what the server sent on stream id: the first close frame
// among its WebSocket frames is the stream's answer, and so is its end.
func (s *h2Senders) data(id uint32, p []byte, flags byte) {
	s.mu.Lock()
	st := s.streams[id]
	if st == nil || st.ended {
		s.mu.Unlock()
		return
	}
	if len(st.got) < 256 {
		st.got = append(st.got, p[:min(len(p), 256-len(st.got))]...)
	}
	answer := ""
	for b := st.got; len(b) >= 2; {
		n := int(b[1] & 0x7f)
		if n > 125 || len(b) < 2+n {
			break // a data frame (rally serve sends none to a partial message), or not all here yet
		}
		if b[0]&0x0f == 0x8 {
			answer = "close " + closeCode(b[2:2+n])
			break
		}
		b = b[2+n:]
	}
	if answer == "" && flags&h2FlagEndStrm != 0 {
		answer = "h2 ended without a close"
	}
	if answer != "" {
		st.ended = true
	}
	s.mu.Unlock()
	if answer != "" {
		s.cond.Broadcast()
		s.h.answer(answer)
	}
}

// end is told that stream id was reset, and reports whether that is its
// answer (it had none before).
func (s *h2Senders) end(id uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return true
	}
	first := !st.ended
	st.ended = true
	s.cond.Broadcast()
	return first
}

// stopAll ends every stream's sending (the attack is over).
func (s *h2Senders) stopAll() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// writeData writes one DATA frame on stream id, its header and payload
// under the connection's write lock, without copying the payload.
func (c *h2NonReaders) writeData(id uint32, p []byte) error {
	var head [9]byte
	head[0], head[1], head[2] = byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
	head[3] = h2Data
	binary.BigEndian.PutUint32(head[5:], id&0x7fffffff)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.conn.Write(head[:]); err != nil {
		return err
	}
	_, err := c.conn.Write(p)
	return err
}
