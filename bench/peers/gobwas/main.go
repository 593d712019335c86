// Command gobwas is the gobwas/ws peer, written at the low level its
// README shows for speed: zero-copy upgrade on the raw connection (no
// net/http), then ReadHeader, unmask with Cipher, and WriteHeader plus the
// payload, frame by frame, through one buffered reader and writer per
// connection. The chat room compiles each message once (CompileFrame) and
// writes those bytes to every member. Messages are expected unfragmented,
// as the load generator sends them. This peer has no permessage-deflate:
// it rejects -compress, and the runner leaves it out of the compressed
// scenarios.
package main

import (
	"bufio"
	"io"
	"net"
	"sync"

	"github.com/gobwas/ws"
	"github.com/rallyws/rally/bench/internal/peerflag"
	"github.com/rallyws/rally/bench/internal/room"
)

type member struct {
	nc net.Conn
	mu sync.Mutex
}

var chat room.Room[*member]

func main() {
	ln, err := net.Listen("tcp", peerflag.Addr())
	if err != nil {
		peerflag.Fail(err)
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			peerflag.Fail(err)
		}
		go serve(nc)
	}
}

func serve(nc net.Conn) {
	defer nc.Close()
	var path string
	up := ws.Upgrader{OnRequest: func(uri []byte) error {
		path = string(uri)
		return nil
	}}
	if _, err := up.Upgrade(nc); err != nil {
		return
	}
	me := &member{nc: nc}
	isChat := path == "/chat"
	if isChat {
		chat.Join(me)
		defer chat.Leave(me)
	}
	br := bufio.NewReaderSize(nc, 4096)
	bw := bufio.NewWriterSize(nc, 4096)
	var buf []byte
	for {
		h, err := ws.ReadHeader(br)
		if err != nil {
			return
		}
		if int64(cap(buf)) < h.Length {
			buf = make([]byte, h.Length)
		}
		p := buf[:h.Length]
		if _, err := io.ReadFull(br, p); err != nil {
			return
		}
		if h.Masked {
			ws.Cipher(p, h.Mask, 0)
			h.Masked = false
		}
		switch h.OpCode {
		case ws.OpClose:
			me.mu.Lock()
			ws.WriteFrame(nc, ws.NewCloseFrame(p))
			me.mu.Unlock()
			return
		case ws.OpPing:
			h.OpCode = ws.OpPong
		case ws.OpPong:
			continue
		default:
			if isChat {
				f, err := ws.CompileFrame(ws.NewFrame(h.OpCode, h.Fin, p))
				if err != nil {
					return
				}
				for _, m := range chat.Members() {
					m.mu.Lock()
					m.nc.Write(f)
					m.mu.Unlock()
				}
				continue
			}
		}
		me.mu.Lock()
		ws.WriteHeader(bw, h)
		bw.Write(p)
		err = bw.Flush()
		me.mu.Unlock()
		if err != nil {
			return
		}
	}
}
