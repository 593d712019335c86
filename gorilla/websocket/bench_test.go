package websocket_test

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/rallyws/rally/gorilla/websocket"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The allocations per message of gorilla's four message methods, on the
// server's side of a loopback connection whose other end is a raw peer
// (discarding what it gets, or sending pre-built frames). Run with
// -benchmem: WriteMessage, NextWriter and NextReader into the caller's
// buffer cost 0 allocs/op; ReadMessage returns a payload the caller owns
// (one allocation).

var benchSizes = []int{16, 1 << 10, 16 << 10, 64 << 10}

func benchName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// benchServerConn returns the server's side of a connection whose peer
// discards everything it receives.
func benchSink(b *testing.B) *websocket.Conn {
	url, conns := upgraded(b, &websocket.Upgrader{})
	p := rawDial(b, url)
	s := receive(b, conns)
	s.SetReadDeadline(timeZero)
	p.nc.SetDeadline(timeZero)
	p.SetTimeout(0)
	go io.Copy(io.Discard, p.Peer)
	return s
}

// benchSource returns the server's side of a connection whose peer sends
// binary messages of n bytes, as fast as they are taken.
func benchSource(b *testing.B, n int) *websocket.Conn {
	url, conns := upgraded(b, &websocket.Upgrader{})
	p := rawDial(b, url)
	s := receive(b, conns)
	s.SetReadDeadline(timeZero)
	p.nc.SetDeadline(timeZero)
	var frames bytes.Buffer
	capture := &rawPeer{t: b, Peer: rawpeer.NewPeer(writerConn{p.nc, &frames}, true)}
	for frames.Len() < 256<<10 {
		capture.frame(true, 0x2, make([]byte, n))
	}
	go func() {
		for {
			if _, err := p.nc.Write(frames.Bytes()); err != nil {
				return
			}
		}
	}()
	return s
}

func BenchmarkWriteMessage(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(benchName(n), func(b *testing.B) {
			s := benchSink(b)
			p := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.WriteMessage(websocket.BinaryMessage, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNextWriter(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(benchName(n), func(b *testing.B) {
			s := benchSink(b)
			p := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w, err := s.NextWriter(websocket.BinaryMessage)
				if err != nil {
					b.Fatal(err)
				}
				w.Write(p)
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNextReader(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(benchName(n), func(b *testing.B) {
			s := benchSource(b, n)
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, r, err := s.NextReader()
				if err != nil {
					b.Fatal(err)
				}
				for {
					_, err := r.Read(buf)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func BenchmarkReadMessage(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(benchName(n), func(b *testing.B) {
			s := benchSource(b, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := s.ReadMessage(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
