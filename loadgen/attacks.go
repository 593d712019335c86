package loadgen

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The hostile scenarios that each hold one of the adversary's behaviours
// alone, at the size an attacker would pick: a ping flood, many long
// subscriptions, a reconnect storm recovering from an old position, and
// compression bombs.

// frameFrom reads the next frame from br and returns its opcode and its
// payload if it is at most max bytes (longer payloads are skipped and
// returned as nil). Server frames are not masked.
func frameFrom(br *bufio.Reader, max int) (op byte, payload []byte, err error) {
	var head [8]byte
	if _, err := io.ReadFull(br, head[:2]); err != nil {
		return 0, nil, err
	}
	op = head[0] & 0x0f
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(br, head[:2]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(head[:2]))
	case 127:
		if _, err := io.ReadFull(br, head[:8]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(head[:8])
	}
	if n > uint64(max) {
		_, err := io.CopyN(io.Discard, br, int64(min(n, 1<<40)))
		return op, nil, err
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	return op, payload, err
}

// closeCode returns the code of a close frame's payload as a string.
// closeCode renders a close frame's payload as an answer: its code, and
// its reason in parentheses when it has one (answers with different
// reasons are counted apart: "1008 (message too slow)").
func closeCode(payload []byte) string {
	if len(payload) < 2 {
		return "without code"
	}
	code := strconv.Itoa(int(binary.BigEndian.Uint16(payload)))
	if len(payload) == 2 {
		return code
	}
	return code + " (" + string(payload[2:]) + ")"
}

// readerOf returns a buffered reader of what the server sends on c after
// the handshake (rest: what came with it).
func readerOf(c net.Conn, rest []byte) *bufio.Reader {
	return bufio.NewReader(&prefixed{Conn: c, rest: rest})
}

// endOnCancel unblocks c's reads and writes when ctx ends.
func endOnCancel(ctx context.Context, c net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
}

// pingFlood: --conns connections to the echo endpoint, each sending pings
// (batches of 100) as fast as the socket takes them and reading what
// comes back; the pongs are counted, and how the server ended each
// connection.
func (h *hostileRun) pingFlood(ctx context.Context) {
	var batch []byte
	for i := range 100 {
		batch = append(batch, clientFrame(opPing, []byte("flood-"+strconv.Itoa(i)), [4]byte{})...)
	}
	var pings, pongs atomic.Int64
	each(ctx, h.cfg.Conns, func(int) {
		c, rest, err := h.t.dial(ctx, true)
		if err != nil {
			h.answer(handshakeAnswer(err))
			return
		}
		h.keep(c)
		endOnCancel(ctx, c)
		go func() {
			br := readerOf(c, rest)
			for {
				op, payload, err := frameFrom(br, 1<<10)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						h.answer("closed")
						h.drop(c)
					}
					return
				case op == opPong:
					pongs.Add(1)
				case op == opClose:
					h.answer("close " + closeCode(payload))
					h.drop(c)
					return
				}
			}
		}()
		go func() {
			for ctx.Err() == nil {
				if _, err := c.Write(batch); err != nil {
					return
				}
				pings.Add(100)
			}
		}()
	})
	<-ctx.Done()
	h.mu.Lock()
	h.res.Answers["pings sent"] = pings.Load()
	h.res.Answers["pongs received"] = pongs.Load()
	h.mu.Unlock()
}

// wsReply is the part of a /ws reply the scenarios read.
type wsReply struct {
	Type      string          `json:"type"`
	ID        json.RawMessage `json:"id"`
	Code      string          `json:"code"`
	Offset    uint64          `json:"offset"`
	Epoch     string          `json:"epoch"`
	Recovered *bool           `json:"recovered"`
	Reason    string          `json:"reason"`
}

// manySubs: --conns connections to /ws, each subscribing to --size
// (100) topics of its own whose names are 128 bytes long, then reading
// until the end. Each subscription's answer is counted: "subscribed", or
// "refused (CODE)" with the error's code.
func (h *hostileRun) manySubs(ctx context.Context) {
	each(ctx, h.cfg.Conns, func(i int) {
		c, rest, err := h.t.dial(ctx, true)
		if err != nil {
			h.answer(handshakeAnswer(err))
			return
		}
		h.keep(c)
		endOnCancel(ctx, c)
		var batch []byte
		for k := range h.cfg.Size {
			topic := fmt.Sprintf("subs-%d-%d-", i, k)
			topic += strings.Repeat("t", max(0, 128-len(topic)))
			batch = append(batch, clientFrame(opText, []byte(`{"type":"subscribe","topic":"`+topic+`","id":`+strconv.Itoa(k)+`}`), [4]byte{})...)
		}
		if _, err := c.Write(batch); err != nil {
			return
		}
		go func() {
			br := readerOf(c, rest)
			answered := 0
			for {
				op, payload, err := frameFrom(br, 64<<10)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						h.answer("closed")
						h.drop(c)
					}
					return
				case op == opClose:
					h.answer("close " + closeCode(payload))
					h.drop(c)
					return
				case op != opText || answered == h.cfg.Size:
					continue
				}
				var r wsReply
				if json.Unmarshal(payload, &r) != nil || r.ID == nil {
					continue
				}
				answered++
				switch r.Type {
				case "ack":
					h.answer("subscribed")
				case "error":
					h.answer("refused (" + r.Code + ")")
				}
			}
		}()
	})
}

// historyTopic is the topic reconnect-old recovers: serve with
// --history hostile-history --history-size 1000 (or more than --size).
// It is not the topic of slow-read ("hostile"), whose fast subscriber
// does not recover: `make hostile` serves both.
const historyTopic = "hostile-history"

// reconnectOld: a client publishes --size (999) messages on a history
// topic, then --conns clients reconnect to /ws at once, each asking for
// what it missed since the position before them, reading the whole
// replay, and then doing it again until the attack ends. Each recovery
// is counted: "recovered exactly" (every message, in order), "short
// replay", "not recovered (REASON)" or "no ack".
func (h *hostileRun) reconnectOld(ctx context.Context) {
	pub, rest, err := h.t.dial(ctx, false)
	if err != nil {
		h.answer("publisher: " + handshakeAnswer(err))
		return
	}
	defer pub.Close()
	endOnCancel(ctx, pub)
	br := readerOf(pub, rest)
	pub.Write(clientFrame(opText, []byte(`{"type":"subscribe","topic":"`+historyTopic+`","id":"s"}`), [4]byte{}))
	start, ok := nextReply(br, "ack")
	if !ok || start.Epoch == "" {
		h.answer("no history: serve with --history " + historyTopic)
		return
	}
	var batch []byte
	for i := range h.cfg.Size {
		batch = append(batch, clientFrame(opText, []byte(`{"type":"publish","topic":"`+historyTopic+`","data":`+strconv.Itoa(i)+`,"id":`+strconv.Itoa(i)+`}`), [4]byte{})...)
	}
	if _, err := pub.Write(batch); err != nil {
		return
	}
	// Every publish acked, so that the history holds them all.
	for acked := 0; acked < h.cfg.Size; {
		r, ok := nextReply(br, "ack")
		if !ok {
			h.answer("publisher: not acked")
			return
		}
		if r.ID != nil && string(r.ID) != `"s"` {
			acked++
		}
	}
	subscribe := clientFrame(opText, []byte(`{"type":"subscribe","topic":"`+historyTopic+`","id":"r","offset":`+
		strconv.FormatUint(start.Offset, 10)+`,"epoch":"`+start.Epoch+`"}`), [4]byte{})
	again(ctx, h.cfg.Conns, func() bool {
		c, rest, err := h.t.dial(ctx, true)
		if err != nil {
			return h.refused(ctx, err)
		}
		h.keep(c)
		stop := endOnCancel(ctx, c)
		h.answer(h.recoverOnce(ctx, c, readerOf(c, rest), subscribe))
		stop()
		h.drop(c)
		return true
	})
}

// refused counts a connection the server refused (unless the attack
// is over) and, after a pause, lets its client try again.
func (h *hostileRun) refused(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	h.answer(handshakeAnswer(err))
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
	return true
}

// again runs f in n goroutines at once, each calling it again and again
// until ctx ends or f returns false, and returns when all have stopped.
func again(ctx context.Context, n int, f func() bool) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil && f() {
			}
		})
	}
	wg.Wait()
}

// recoverOnce subscribes on c with subscribe and reads the ack and the
// replay, and says how it went.
func (h *hostileRun) recoverOnce(ctx context.Context, c net.Conn, br *bufio.Reader, subscribe []byte) string {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(subscribe); err != nil {
		return "closed"
	}
	ack, ok := nextReply(br, "ack")
	switch {
	case !ok && ctx.Err() != nil:
		return "open"
	case !ok:
		return "no ack"
	case ack.Recovered == nil || !*ack.Recovered:
		return "not recovered (" + ack.Reason + ")"
	}
	for want := 0; want < h.cfg.Size; want++ {
		r, ok := nextReply(br, "message")
		if !ok {
			if ctx.Err() != nil {
				return "open"
			}
			return "short replay"
		}
		var m struct {
			Data json.RawMessage `json:"data"`
		}
		json.Unmarshal(r.raw, &m)
		if string(m.Data) != strconv.Itoa(want) {
			return "replay out of order"
		}
	}
	return "recovered exactly"
}

// reply is a /ws reply and its bytes.
type reply struct {
	wsReply
	raw []byte
}

// nextReply reads text frames from br until one of type typ, and returns
// it; ok is false if the connection ended first.
func nextReply(br *bufio.Reader, typ string) (reply, bool) {
	for {
		op, payload, err := frameFrom(br, 64<<10)
		if err != nil || op == opClose {
			return reply{}, false
		}
		if op != opText {
			continue
		}
		var r wsReply
		if json.Unmarshal(payload, &r) == nil && r.Type == typ {
			return reply{r, payload}, true
		}
	}
}

// bombs: --conns clients of the echo endpoint, each sending one
// compressed message (permessage-deflate) that inflates to --size (2 GiB)
// of zeros in a few KiB per inflated MiB, reading the server's answer, and
// doing it again on a new connection until the attack ends.
func (h *hostileRun) bombs(ctx context.Context) {
	bt, err := newTarget(h.cfg.URL, true, true)
	if err != nil {
		h.answer("bad URL")
		return
	}
	frame := bombPayload(h.cfg.Size)
	again(ctx, h.cfg.Conns, func() bool {
		c, rest, err := bt.dial(ctx, true)
		if err != nil {
			return h.refused(ctx, err)
		}
		if _, ok := c.(*compressedConn); !ok {
			c.Close()
			h.answer("no permessage-deflate")
			return false
		}
		h.keep(c)
		stop := endOnCancel(ctx, c)
		go c.Write(frame)
		answer := "closed"
		br := readerOf(c, rest)
		for {
			op, payload, err := frameFrom(br, 1<<10)
			if err != nil {
				if ctx.Err() != nil {
					answer = "open"
				}
				break
			}
			if op == opClose {
				answer = "close " + closeCode(payload)
				break
			}
		}
		stop()
		if answer != "open" {
			h.answer(answer)
			h.drop(c)
		}
		return true
	})
}
