package conform

import (
	"context"
	wire "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
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
	lastPongOnly bool // answer only the last ping of what arrived together
}

type protoErr struct{ code uint16 }

func (e protoErr) Error() string { return fmt.Sprintf("fail with %d", e.code) }

// serve runs the echo loop over p until the connection ends. client says
// whether this endpoint is the client (it masks, and waits for the server
// to close TCP).
func (r refEcho) serve(p *rawpeer.Peer, client bool) {
	defer p.Close()
	p.SetTimeout(10 * time.Second)
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
		inMsg   bool
		msgOp   byte
		msg     []byte
		pending []byte // a character cut by a fragment or read boundary
	)
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
			switch {
			case masked == client, rsv != 0:
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
				inMsg, msgOp, msg, pending = true, op, nil, nil
			}
			// Read the payload as it arrives, validating each piece.
			payload := make([]byte, 0, min(n, 1<<16))
			buf := make([]byte, 32<<10)
			for uint64(len(payload)) < n {
				k, err := p.Read(buf[:min(uint64(len(buf)), n-uint64(len(payload)))])
				for i := range k {
					buf[i] ^= key[(len(payload)+i)&3]
				}
				if !control {
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
			msg = append(msg, payload...)
			if !fin {
				return nil
			}
			if err := checkUTF8(nil, true); err != nil {
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
				p, _, err := rawpeer.AcceptServer(nc, nil, 10*time.Second)
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
		p, _, err := rawpeer.DialClient(addr, "/getCaseCount", nil, 10*time.Second)
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
			p, _, err := rawpeer.DialClient(addr, "/runCase?case="+strconv.Itoa(i)+"&agent=ref", nil, 10*time.Second)
			if err != nil {
				return err
			}
			r.serve(p, true)
		}
		p, _, err = rawpeer.DialClient(addr, "/updateReports?agent="+url.QueryEscape("ref"), nil, 10*time.Second)
		if err != nil {
			return err
		}
		p.Close()
		return nil
	}
}
