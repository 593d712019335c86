// Command rawtcp is the physical floor of the comparison: after the
// smallest opening handshake that satisfies a client, it returns every
// byte it reads unchanged, one read and one write per batch, with no
// WebSocket framing at all. The load generator runs it with
// loadgen.Config.VerbatimEcho and checks that its own masked frames come
// back. It serves echo and throughput only, uncompressed.
package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"net"
	"net/http"

	"github.com/rallyws/rally/bench/internal/peerflag"
)

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
	br := bufio.NewReaderSize(nc, 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if _, err := nc.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(h[:]) + "\r\n\r\n")); err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	n := copy(buf, peek(br))
	for {
		if n > 0 {
			if _, err := nc.Write(buf[:n]); err != nil {
				return
			}
		}
		if n, err = nc.Read(buf); err != nil {
			return
		}
	}
}

// peek returns what the reader had already buffered past the request.
func peek(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}
