package conform

import (
	"bytes"
	"compress/flate"
	"context"
	wire "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// refEcho is a small echo endpoint written for these tests on the raw peer:
// strict by default (streaming, fail-fast UTF-8 validation, exact close
// codes), or deliberately broken through its knobs. It shows that the suite
// can rate a strict peer OK everywhere and that it catches the bugs.
type refEcho struct {
	skipUTF8     bool // never validate UTF-8 (text echoed as is)
	lateUTF8     bool // validate UTF-8 only once a message is complete
	blindClose   bool // echo any close body back, valid or not
	wrongMasking bool // mask as the other side would

	// deflate negotiates permessage-deflate: a compressed message is
	// inflated and its text validated as its bytes arrive, at every sync
	// flush (unless lateUTF8); echoes go back uncompressed. As a server it answers every
	// offer with no context takeover either way.
	deflate bool
	// takeover: the peer keeps its compression context between messages
	// (set per connection from the negotiation).
	takeover bool
	// lastPongOnly: answer only the last ping of what arrived together.
	lastPongOnly bool
}

// refDeflateAnswer is the reference server's answer to any
// permessage-deflate offer.
const refDeflateAnswer = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"

// inflateSoFar inflates the compressed bytes of a message received so far
// (RFC 7692 7.2.2), with the previous messages' last 32 KiB as dictionary;
// at the end of the message it appends the 00 00 ff ff tail and an empty
// final block. It returns all that the bytes so far inflate to, and an
// error only for corrupt data.
func inflateSoFar(z, dict []byte, end bool) ([]byte, error) {
	if end {
		z = append(append(bytes.Clone(z), tail...), 0x01, 0x00, 0x00, 0xff, 0xff)
	}
	out, err := io.ReadAll(flate.NewReaderDict(bytes.NewReader(z), dict))
	if errors.Is(err, io.ErrUnexpectedEOF) && !end {
		err = nil
	}
	return out, err
}

// refTimeout bounds each wait of the reference peers (a handshake, the
// next frame): the suite's own waits scale with the load, so do theirs, or
// a loaded machine has them drop TCP while the suite is still busy.
var refTimeout = slowness.Scale(10 * time.Second)

type protoErr struct{ code uint16 }

func (e protoErr) Error() string { return fmt.Sprintf("fail with %d", e.code) }

// serve runs the echo loop over p until the connection ends. client says
// whether this endpoint is the client (it masks, and waits for the server
// to close TCP).
func (r refEcho) serve(p *rawpeer.Peer, client bool) {
	defer p.Close()
	p.SetTimeout(refTimeout)
	send := func(f rawpeer.Frame) error {
		if client != r.wrongMasking {
			f.Masked, f.Mask = true, [4]byte{0x11, 0x22, 0x33, 0x44}
		}
		return p.WriteRaw(rawpeer.Build(f))
	}
	// Failing the connection (RFC 6455 7.1.7): a close frame, then TCP
	// closed at once; nothing more is read.
	closeWith := func(code uint16) { send(rawpeer.Close(code, "")) }
	var (
		inMsg      bool
		msgOp      byte
		msg        []byte
		pending    []byte // a character cut by a fragment or read boundary
		compressed bool   // the message has RSV1: msg holds its compressed bytes
		history    []byte // the last 32 KiB inflated, with context takeover
	)
	// checkCompressed inflates what has arrived of a compressed message
	// and validates the text so far (all of it at the end). Before the end
	// it does so only when the bytes so far end in a sync flush (00 00 ff
	// ff): there everything sent so far inflates, and inflating the message
	// again from its start at every read would cost too much.
	checkCompressed := func(final bool) ([]byte, error) {
		if !final && (r.lateUTF8 || r.skipUTF8 || msgOp != rawpeer.OpText || !bytes.HasSuffix(msg, tail)) {
			return nil, nil
		}
		var dict []byte
		if r.takeover {
			dict = history
		}
		out, err := inflateSoFar(msg, dict, final)
		if err != nil {
			return nil, protoErr{1007}
		}
		if r.skipUTF8 || msgOp != rawpeer.OpText {
			return out, nil
		}
		if n, ok := rawpeer.ScanUTF8(out); !ok || final && n != len(out) {
			return nil, protoErr{1007}
		}
		return out, nil
	}
	checkUTF8 := func(chunk []byte, final bool) error {
		if r.skipUTF8 || msgOp != rawpeer.OpText {
			return nil
		}
		pending = append(pending, chunk...)
		if r.lateUTF8 && !final {
			return nil
		}
		n, ok := rawpeer.ScanUTF8(pending)
		if !ok || final && n != len(pending) {
			return protoErr{1007}
		}
		pending = append(pending[:0], pending[n:]...)
		return nil
	}
	for {
		err := func() error {
			var h [2]byte
			if _, err := io.ReadFull(p, h[:]); err != nil {
				return err
			}
			fin, rsv, op := h[0]&0x80 != 0, h[0]&0x70, h[0]&0x0f
			masked, n := h[1]&0x80 != 0, uint64(h[1]&0x7f)
			var ext [8]byte
			switch n {
			case 126:
				if _, err := io.ReadFull(p, ext[:2]); err != nil {
					return err
				}
				n = uint64(wire.BigEndian.Uint16(ext[:2]))
			case 127:
				if _, err := io.ReadFull(p, ext[:8]); err != nil {
					return err
				}
				n = wire.BigEndian.Uint64(ext[:8])
			}
			var key [4]byte
			if masked {
				if _, err := io.ReadFull(p, key[:]); err != nil {
					return err
				}
			}
			control := op >= 8
			firstCompressed := r.deflate && rsv == rawpeer.Rsv1 && (op == 1 || op == 2)
			switch {
			case masked == client, rsv != 0 && !firstCompressed:
				return protoErr{1002}
			case op > 2 && op < 8, op > 10:
				return protoErr{1002}
			case control && (!fin || n > 125):
				return protoErr{1002}
			case op == 0 && !inMsg, (op == 1 || op == 2) && inMsg:
				return protoErr{1002}
			case n > 64<<20:
				return protoErr{1009}
			}
			if op == 1 || op == 2 {
				inMsg, msgOp, msg, pending, compressed = true, op, nil, nil, firstCompressed
			}
			// Read the payload as it arrives, validating each piece.
			payload := make([]byte, 0, min(n, 1<<16))
			buf := make([]byte, 32<<10)
			for uint64(len(payload)) < n {
				k, err := p.Read(buf[:min(uint64(len(buf)), n-uint64(len(payload)))])
				for i := range k {
					buf[i] ^= key[(len(payload)+i)&3]
				}
				if !control && compressed {
					msg = append(msg, buf[:k]...)
					if _, err := checkCompressed(false); err != nil {
						return err
					}
				} else if !control {
					if err := checkUTF8(buf[:k], false); err != nil {
						return err
					}
				}
				payload = append(payload, buf[:k]...)
				if err != nil {
					return err
				}
			}
			switch op {
			case 9:
				if r.lastPongOnly && p.Buffered() > 0 {
					return nil // a later ping supersedes this one
				}
				return send(rawpeer.Pong(payload))
			case 10:
				return nil
			case 8:
				if r.blindClose {
					send(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpClose, Payload: payload})
					if client {
						p.WaitEOF()
					}
					return io.EOF
				}
				code, reason, ok := rawpeer.ParseClose(payload)
				switch {
				case !ok, len(payload) >= 2 && !validCloseCode(code):
					return protoErr{1002}
				case !r.skipUTF8 && !rawpeer.ValidUTF8(reason):
					return protoErr{1007}
				}
				send(rawpeer.Close(code, ""))
				if client {
					p.WaitEOF()
				}
				return io.EOF
			}
			if !compressed {
				msg = append(msg, payload...)
			}
			if !fin {
				return nil
			}
			if compressed {
				out, err := checkCompressed(true)
				if err != nil {
					return err
				}
				if r.takeover {
					history = append(history, out...)
					history = history[max(0, len(history)-32<<10):]
				}
				msg = out
			} else if err := checkUTF8(nil, true); err != nil {
				return err
			}
			inMsg = false
			return send(rawpeer.Frame{Fin: true, Opcode: msgOp, Payload: msg})
		}()
		var pe protoErr
		if errors.As(err, &pe) {
			closeWith(pe.code)
			return
		}
		if err != nil {
			return
		}
	}
}

// startRefServer serves r on a loopback port and returns its URL; it stops
// when the test ends.
func startRefServer(t *testing.T, r refEcho) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				var h http.Header
				if r.deflate {
					h = http.Header{"Sec-WebSocket-Extensions": {refDeflateAnswer}}
				}
				p, _, err := rawpeer.AcceptServer(nc, h, refTimeout)
				if err == nil {
					r.serve(p, false)
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "ws://" + ln.Addr().String() + "/echo"
}

// refClient drives r as a client through the fuzzing-server protocol.
func refClient(r refEcho) func(ctx context.Context, addr string) error {
	return func(ctx context.Context, addr string) error {
		p, _, err := rawpeer.DialClient(addr, "/getCaseCount", nil, refTimeout)
		if err != nil {
			return err
		}
		f, err := p.ReadFrame()
		p.Close()
		if err != nil {
			return err
		}
		count, err := strconv.Atoi(string(f.Payload))
		if err != nil {
			return err
		}
		for i := 1; i <= count; i++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var offer http.Header
			if r.deflate {
				offer = http.Header{"Sec-WebSocket-Extensions": {"permessage-deflate"}}
			}
			p, resp, err := rawpeer.DialClient(addr, "/runCase?case="+strconv.Itoa(i)+"&agent=ref", offer, refTimeout)
			if err != nil {
				return err
			}
			rc := r
			rc.takeover = r.deflate && !strings.Contains(resp.Header.Get("Sec-WebSocket-Extensions"), "server_no_context_takeover")
			rc.serve(p, true)
		}
		p, _, err = rawpeer.DialClient(addr, "/updateReports?agent="+url.QueryEscape("ref"), nil, refTimeout)
		if err != nil {
			return err
		}
		p.Close()
		return nil
	}
}
