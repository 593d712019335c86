package rally_test

import (
	"bytes"
	"compress/flate"
	"io"
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

// One way out: a peer that sends a compression bomb and goes away leaves
// nothing behind, in goroutine and event-loop mode: every connection is
// released (Server.Close is called for each) and what their inflating
// charged to the memory budget is given back, however far each got.
func TestPeersThatSendACompressionBombAndGoAwayAreReleased(t *testing.T) {
	for _, mode := range []struct {
		name string
		loop bool
	}{{"Goroutines", false}, {"EventLoop", true}} {
		t.Run(mode.name, func(t *testing.T) {
			const peers = 8
			budget := rally.NewMemoryBudget(64 << 20)
			var open atomic.Int64
			s := echoServer()
			s.EventLoop = mode.loop
			s.Options = &rally.AcceptOptions{
				ConnOptions: rally.ConnOptions{MemoryBudget: budget, ReadLimit: 1 << 30},
				Compression: &rally.CompressionOptions{},
			}
			s.Open = func(*rally.Conn) { open.Add(1) }
			s.Close = func(*rally.Conn, *rally.CloseError) { open.Add(-1) }
			addr := serve(t, s)
			frame := rawpeer.Build(rawpeer.Frame{Fin: true, Rsv: rawpeer.Rsv1, Opcode: rawpeer.OpBinary,
				Masked: true, Mask: [4]byte{1, 2, 3, 4}, Payload: zeroBomb(512 << 20)})
			var wg sync.WaitGroup
			for range peers {
				p, _ := dialPeerWith(t, addr, extHeader("permessage-deflate; client_no_context_takeover; server_no_context_takeover"))
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.WriteRaw(frame)
					p.Close()
				}()
			}
			wg.Wait()
			wait := slowness.Scale(60 * time.Second)
			deadline := time.Now().Add(wait)
			for open.Load() != 0 || budget.Used() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%v after the peers went: %d connections open, %d bytes charged (inflate %d)",
						wait, open.Load(), budget.Used(), budget.Stats()[rally.MemoryInflate].Used)
				}
				time.Sleep(20 * time.Millisecond)
			}
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
