package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// WebSockets over HTTP/2 (RFC 8441) that never read, as an attacker opens
// them: one TCP connection (HTTP/2 by prior knowledge for ws://, TLS with
// ALPN h2 for wss://) whose SETTINGS give every stream an initial window
// of 0, so that the server can send no DATA on any of them; on it, n
// extended CONNECTs to the /ws endpoint, each subscribing to a topic once
// accepted (if one is given), and never a WINDOW_UPDATE. The connection itself is read
// (SETTINGS and PING are acknowledged, as a live client does): only the
// streams do not read. The frames are written by hand (RFC 9113 4.1,
// HPACK literals without indexing, RFC 7541 6.2.2), as an attacker's
// would be.

// HTTP/2 frame types and flags used here (RFC 9113 6).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2WindowUpdate = 0x8
	h2FlagAck      = 0x1
	h2FlagEndStrm  = 0x1
	h2FlagEndHdrs  = 0x4
	h2FlagPadded   = 0x8
	h2FlagPriority = 0x20
)

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Frame returns one HTTP/2 frame.
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream&0x7fffffff)
	return append(b, payload...)
}

// hpackLiteral appends a header field as a literal without indexing, with
// a new name and no Huffman coding (RFC 7541 6.2.2, 5.1, 5.2).
func hpackLiteral(b []byte, name, value string) []byte {
	b = append(b, 0)
	for _, s := range []string{name, value} {
		n := len(s)
		if n < 127 {
			b = append(b, byte(n))
		} else {
			b = append(b, 127)
			for n -= 127; n >= 128; n >>= 7 {
				b = append(b, byte(n&0x7f|0x80))
			}
			b = append(b, byte(n))
		}
		b = append(b, s...)
	}
	return b
}

// h2NonReaders is one TCP connection of never-reading streams.
type h2NonReaders struct {
	h       *hostileRun
	conn    net.Conn
	wmu     sync.Mutex
	sub     []byte // the WebSocket frame each stream sends once accepted
	waiting map[uint32]bool
	// what the server did with the streams: accepted (200), refused
	// (another status, or RST_STREAM before an answer), and accepted then
	// reset (RST_STREAM: the server let the stream go).
	accepted, refused, cut atomic.Int64
	// senders, when set (h2-partial), sends on each accepted stream what
	// its behaviour sends, within the server's flow-control windows,
	// and reads what the server sends on it; nil: the streams never read.
	senders *h2Senders
}

func (s *h2NonReaders) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.conn.Write(b)
	return err
}

// h2NonReader opens a connection of streams never-reading streams
// subscribed to topic (none if empty), their requests naming the client
// address from in X-Forwarded-For (none if empty), and keeps it until ctx ends or the server ends it;
// what the server did with each stream is counted in h's answers
// ("h2 200", "h2 refused", "h2 reset", "h2c not offered", ...). It returns
// once the connection is established and its streams requested.
func (h *hostileRun) h2NonReader(ctx context.Context, path string, streams int, topic, from string) *h2NonReaders {
	var sub []byte
	if topic != "" {
		sub = subscribeFrame(topic)
	}
	return h.h2Streams(ctx, path, streams, from, sub, nil)
}

// h2Streams opens a connection of streams to path. Without senders they
// never read (their window is 0) and each sends sub once accepted, if
// set; with senders, each accepted stream sends what senders makes of it
// and reads up to 64 KiB of the server's answer.
func (h *hostileRun) h2Streams(ctx context.Context, path string, streams int, from string, sub []byte, senders *h2Senders) *h2NonReaders {
	conn, err := h.dialH2(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.answer("h2 dial error")
		}
		return nil
	}
	h.keep(conn)
	context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Now()) })
	s := &h2NonReaders{h: h, conn: conn, waiting: map[uint32]bool{}, sub: sub, senders: senders}
	// SETTINGS_ENABLE_PUSH 0, SETTINGS_INITIAL_WINDOW_SIZE 0 (RFC 9113
	// 6.5.2); a stream that sends keeps the default window (65,535).
	settings := []byte{0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0}
	if senders != nil {
		settings = settings[:6]
		context.AfterFunc(ctx, senders.stopAll)
	}
	out := append([]byte(h2Preface), h2Frame(h2Settings, 0, 0, settings)...)
	scheme := "http"
	if h.t.tls {
		scheme = "https"
	}
	for i := range streams {
		id := uint32(2*i + 1)
		var block []byte
		block = hpackLiteral(block, ":method", "CONNECT")
		block = hpackLiteral(block, ":protocol", "websocket")
		block = hpackLiteral(block, ":scheme", scheme)
		block = hpackLiteral(block, ":path", path)
		block = hpackLiteral(block, ":authority", h.t.addr)
		block = hpackLiteral(block, "sec-websocket-version", "13")
		if from != "" {
			block = hpackLiteral(block, "x-forwarded-for", from)
		}
		out = append(out, h2Frame(h2Headers, h2FlagEndHdrs, id, block)...)
		s.waiting[id] = true
	}
	go s.readFrames(ctx)
	if err := s.write(out); err != nil {
		conn.Close()
	}
	return s
}

// dialH2 opens a TCP connection to the server, with TLS offering only h2
// when the URL is wss://.
func (h *hostileRun) dialH2(ctx context.Context) (net.Conn, error) {
	conn, err := h.dialRaw(ctx)
	if err != nil || !h.t.tls {
		return conn, err
	}
	tc := tls.Client(conn, &tls.Config{ServerName: h.t.host, InsecureSkipVerify: h.t.insecure, NextProtos: []string{"h2"}})
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, err
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, errors.New("the server did not negotiate h2")
	}
	return tc, nil
}

// readFrames reads the connection's frames until it ends: it acknowledges
// SETTINGS and PING, sends each accepted stream's subscribe, and counts
// the answers.
func (s *h2NonReaders) readFrames(ctx context.Context) {
	h := s.h
	r := bufio.NewReaderSize(s.conn, 16<<10)
	var head [9]byte
	payload := make([]byte, 0, 16<<10)
	sawSettings := false
	defer func() {
		if !sawSettings && ctx.Err() == nil {
			h.answer("h2c not offered")
		}
	}()
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		typ, flags := head[3], head[4]
		id := binary.BigEndian.Uint32(head[5:]) & 0x7fffffff
		if cap(payload) < n {
			payload = make([]byte, n)
		}
		p := payload[:n]
		if _, err := io.ReadFull(r, p); err != nil {
			return
		}
		switch typ {
		case h2Settings:
			if flags&h2FlagAck != 0 {
				continue
			}
			if !sawSettings {
				sawSettings = true
				if !enablesConnect(p) {
					h.answer("h2: no extended CONNECT")
				}
			}
			if s.senders != nil {
				s.senders.settings(p)
			}
			s.write(h2Frame(h2Settings, h2FlagAck, 0, nil))
		case h2Ping:
			if flags&h2FlagAck == 0 {
				s.write(h2Frame(h2Ping, h2FlagAck, 0, p))
			}
		case h2Headers:
			if !s.waiting[id] {
				continue
			}
			delete(s.waiting, id)
			block := p
			if flags&h2FlagPadded != 0 && len(block) > 0 {
				block = block[1 : len(block)-min(int(block[0]), len(block)-1)]
			}
			if flags&h2FlagPriority != 0 && len(block) >= 5 {
				block = block[5:]
			}
			// :status 200 is entry 8 of HPACK's static table, which
			// net/http sends indexed (RFC 7541 appendix A).
			if len(block) > 0 && block[0] == 0x88 {
				s.accepted.Add(1)
				h.answer("h2 200")
				if s.sub != nil {
					s.write(h2Frame(h2Data, 0, id, s.sub))
				}
				if s.senders != nil {
					s.senders.start(s, id)
				}
			} else {
				s.refused.Add(1)
				h.answer("h2 refused")
			}
		case h2RSTStream:
			code := uint32(0)
			if len(p) >= 4 {
				code = binary.BigEndian.Uint32(p)
			}
			if s.waiting[id] {
				delete(s.waiting, id)
				s.refused.Add(1)
				h.answer("h2 refused (RST_STREAM " + h2ErrorName(code) + ")")
				continue
			}
			s.cut.Add(1)
			if s.senders == nil || s.senders.end(id) {
				h.answer("h2 reset (" + h2ErrorName(code) + ")")
			}
		case h2Data:
			if s.senders != nil {
				s.senders.data(id, p, flags)
			}
		case h2WindowUpdate:
			if s.senders != nil && len(p) >= 4 {
				s.senders.window(id, int64(binary.BigEndian.Uint32(p)&0x7fffffff))
			}
		case h2GoAway:
			h.answer("h2 GOAWAY")
			return
		}
	}
}

// enablesConnect reports whether a SETTINGS payload carries
// SETTINGS_ENABLE_CONNECT_PROTOCOL 1 (RFC 8441 3).
func enablesConnect(p []byte) bool {
	for ; len(p) >= 6; p = p[6:] {
		if binary.BigEndian.Uint16(p) == 0x8 && binary.BigEndian.Uint32(p[2:]) == 1 {
			return true
		}
	}
	return false
}

// h2ErrorName names an HTTP/2 error code (RFC 9113 7).
func h2ErrorName(code uint32) string {
	names := []string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
		"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR",
		"ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}
	if int(code) < len(names) {
		return names[code]
	}
	return "0x" + strconv.FormatUint(uint64(code), 16)
}

// String sums up what the server did with the connection's streams.
func (s *h2NonReaders) String() string {
	return fmt.Sprintf("%d accepted, %d refused, %d reset", s.accepted.Load(), s.refused.Load(), s.cut.Load())
}

// h2SlowRead is the h2-slow-read scenario: the fast pair of the adversary
// (a publisher flooding floodTopic, a subscriber reading it) alone for a
// sixth of the window, then cfg.Conns HTTP/2 connections of cfg.Size
// never-reading streams subscribed to floodTopic; the fast subscriber is
// measured over the last third.
func (h *hostileRun) h2SlowRead(ctx context.Context) {
	f := h.fastSubscriber(ctx)
	if f == nil {
		return
	}
	defer f.close()
	h.yieldCPU()
	h.res.FastSoloRate = f.rate(ctx, h.cfg.Duration/6)
	for range h.cfg.Conns {
		h.h2NonReader(ctx, pathOf(h.cfg.URL), h.cfg.Size, floodTopic, "")
	}
	h.measureUnderAttack(ctx, f)
}
