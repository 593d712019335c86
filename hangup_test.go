package rally_test

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/internal/slowness"
)

// deflateBest is p as a permessage-deflate message compressed as tightly
// as deflate allows.
func deflateBest(p []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(p)
	w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
}

// zeroBomb is a permessage-deflate message of n zero bytes (a whole
// number of MiB) compressed as tightly as deflate allows (about 1,000 to
// 1): a few KiB on the wire for each MiB it inflates to. It is one
// compressed MiB repeated: each copy ends in a sync flush and refers to no
// byte before it, so the copies make one valid stream, built at once
// (compressing 512 MiB took minutes under the race detector on a busy
// machine).
func zeroBomb(n int64) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	io.CopyN(w, zeroReader{}, 1<<20)
	w.Flush()
	return bytes.TrimSuffix(bytes.Repeat(b.Bytes(), int(n>>20)), []byte{0, 0, 0xff, 0xff})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// hangupModes are the ways a Server holds a connection: a goroutine of
// its own, an event loop, a stream of an HTTP/2 connection (h2c).
var hangupModes = []struct {
	name     string
	loop, h2 bool
}{{"Goroutines", false, false}, {"EventLoop", true, false}, {"HTTP2", false, true}}

// hangupPeer serves s (EventLoop set as loop says) over HTTP/1.1, or over
// h2c when h2 is set, and returns a function that opens a raw client peer
// with header h, a connection of its own, and makes it go away without a
// word (its TCP connection closed: no close frame, no GOAWAY).
func hangupPeer(t *testing.T, s *rally.Server, loop, h2 bool) func(h http.Header) (p *rawpeer.Peer, gone func()) {
	t.Helper()
	s.EventLoop = loop
	if !h2 {
		addr := serve(t, s)
		return func(h http.Header) (*rawpeer.Peer, func()) {
			p, _ := dialPeerWith(t, addr, h)
			return p, func() { p.Close() }
		}
	}
	requireH2(t)
	addr := startH2Server(t, s, nil).Listener.Addr().String()
	return func(h http.Header) (*rawpeer.Peer, func()) {
		hc, err := rawpeer.DialH2(addr, nil, wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hc.Drop)
		p, _, err := hc.DialClient("/", h, wireTimeout())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, hc.Drop
	}
}

// awaitReleased waits until the server counts no open connection and the
// budget holds nothing, with a generous bound for a busy machine.
func awaitReleased(t *testing.T, open *atomic.Int64, budget *rally.MemoryBudget) {
	t.Helper()
	wait := slowness.Scale(60 * time.Second)
	deadline := time.Now().Add(wait)
	for open.Load() != 0 || budget.Used() != 0 {
		if time.Now().After(deadline) {
			var held []string
			for _, st := range budget.Stats() {
				if st.Used != 0 {
					held = append(held, fmt.Sprintf("%v %d", st.Category, st.Used))
				}
			}
			t.Fatalf("%v after the peers went: %d connections open, %d bytes charged (%s)",
				wait, open.Load(), budget.Used(), strings.Join(held, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One way out: a peer that sends a compression bomb and goes away leaves
// nothing behind, in every mode: every connection is released
// (Server.Close is called for each) and what their inflating charged to
// the memory budget is given back, however far each got.
func TestPeersThatSendACompressionBombAndGoAwayAreReleased(t *testing.T) {
	for _, mode := range hangupModes {
		t.Run(mode.name, func(t *testing.T) {
			const peers = 8
			budget := rally.NewMemoryBudget(64 << 20)
			var open atomic.Int64
			s := echoServer()
			s.Options = &rally.AcceptOptions{
				ConnOptions: rally.ConnOptions{MemoryBudget: budget, ReadLimit: 1 << 30},
				Compression: &rally.CompressionOptions{},
			}
			s.Open = func(*rally.Conn) { open.Add(1) }
			s.Close = func(*rally.Conn, *rally.CloseError) { open.Add(-1) }
			dial := hangupPeer(t, s, mode.loop, mode.h2)
			frame := rawpeer.Build(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpBinary,
				Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: zeroBomb(512 << 20)})
			var wg sync.WaitGroup
			for range peers {
				p, gone := dial(extHeader("permessage-deflate; client_no_context_takeover; server_no_context_takeover"))
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.WriteRaw(frame)
					gone()
				}()
			}
			wg.Wait()
			awaitReleased(t, &open, budget)
		})
	}
}

// One way out: a peer that stopped reading and goes away while messages
// for it wait behind a full send queue is released in every mode, with
// no write-stall timeout to cut it: its connection ends (Server.Close),
// and what its queue held is no longer charged.
func TestPeersThatGoAwayBehindAFullSendQueueAreReleased(t *testing.T) {
	for _, mode := range hangupModes {
		t.Run(mode.name, func(t *testing.T) {
			const peers = 4
			budget := rally.NewMemoryBudget(256 << 20)
			var open atomic.Int64
			conns := make(chan *rally.Conn, peers)
			s := &rally.Server{
				Options: &rally.AcceptOptions{ConnOptions: rally.ConnOptions{MemoryBudget: budget, BufferLimit: 1 << 20}},
				Open:    func(c *rally.Conn) { open.Add(1); conns <- c },
				Close:   func(*rally.Conn, *rally.CloseError) { open.Add(-1) },
			}
			dial := hangupPeer(t, s, mode.loop, mode.h2)
			msg := make([]byte, 32<<10)
			var gones []func()
			for range peers {
				_, gone := dial(nil)
				gones = append(gones, gone)
				c := <-conns
				// Sent until one is dropped: the queue is at its limit,
				// behind what the kernel (or the stream's window) holds.
				deadline := time.Now().Add(slowness.Scale(60 * time.Second))
				for {
					st, err := c.Send(rally.Binary, msg)
					if err != nil {
						t.Fatalf("send: %v", err)
					}
					if st == rally.Dropped {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the send queue of a peer that does not read never filled (%d bytes buffered)", c.BufferedAmount())
					}
				}
			}
			for _, gone := range gones {
				gone()
			}
			awaitReleased(t, &open, budget)
		})
	}
}

// An event loop inflates a large compressed message a share at a time,
// going on with its other connections in between: what it resumes from
// (the rest of the frame, and what arrived behind it in the same read)
// is kept whole, so the message, the one behind it and a ping are echoed
// and answered exactly, in order.
func TestEventLoopInflatesALargeMessageInSharesAndLosesNothingBehindIt(t *testing.T) {
	s := loopEcho(nil)
	s.Options = &rally.AcceptOptions{Compression: &rally.CompressionOptions{}}
	p, _ := deflateServer(t, s, "permessage-deflate; client_no_context_takeover; server_no_context_takeover")
	// The large message is a few KiB on the wire: it arrives in one read
	// with what follows it.
	large, small := bytes.Repeat([]byte("rally "), 8<<20/6), jsonish(2, 1000)
	var wire []byte
	for _, f := range []rawpeer.Frame{
		compressedFrame(rawpeer.OpText, deflateBest(large)),
		compressedFrame(rawpeer.OpText, deflateOnce(small)),
		rawpeer.Ping([]byte("behind")),
	} {
		f.Masked, f.Mask = true, [4]byte{9, 8, 7, 6}
		wire = append(wire, rawpeer.Build(f)...)
	}
	go p.WriteRaw(wire)
	// A pong goes ahead of data that waits to be sent (pong.go): it may
	// come before the echoes.
	echoes, pongs := [][]byte{}, 0
	for len(echoes) < 2 || pongs == 0 {
		f, err := p.ReadFrame()
		switch {
		case err != nil:
			t.Fatalf("after %d echoes and %d pongs: %v", len(echoes), pongs, err)
		case f.Opcode == rawpeer.OpPong && string(f.Payload) == "behind":
			pongs++
		case f.Opcode == rawpeer.OpText && f.Fin && f.Rsv&rawpeer.Rsv1 != 0:
			echoes = append(echoes, inflateOnce(t, f.Payload))
		case f.Opcode == rawpeer.OpText && f.Fin: // too small to be worth compressing
			echoes = append(echoes, f.Payload)
		default:
			t.Fatalf("got opcode %d (%d bytes), want the echoes and the pong \"behind\"", f.Opcode, len(f.Payload))
		}
	}
	for i, want := range [][]byte{large, small} {
		if !bytes.Equal(echoes[i], want) {
			t.Fatalf("echo %d inflates to %d bytes, want the %d sent", i, len(echoes[i]), len(want))
		}
	}
}
