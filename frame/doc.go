// Package frame is the RFC 6455 wire format of WebSocket: frame headers,
// opcodes, masking, close codes and close bodies, and UTF-8 validation that
// runs incrementally across fragments.
//
// Everything here is a pure value or function over byte slices: no I/O, no
// goroutines, no allocation on the success path, nothing kept between calls
// except what a UTF8 validator holds. It is the bottom layer of rally, usable
// and fuzzable on its own.
//
// It is for building and checking frames. It is not a connection: it does not
// read or write sockets, reassemble messages, track whether a fragmented
// message is open, inflate permessage-deflate payloads, or enforce size
// limits. Rules that depend on that state (a continuation frame without a
// message, RSV1 on a continuation frame, message size) belong to the caller.
//
// A receiver typically does, for each frame:
//
//	h, n, err := frame.Parse(buf)       // n == 0 && err == nil: read more bytes
//	err = frame.CheckHeader(h, true, 0) // server side, no extensions
//	payload := buf[n : n+int(h.Length)] // once that many bytes are there
//	frame.Mask(h.Mask, 0, payload)      // unmask in place
//
// and a sender builds the header in a fixed array:
//
//	var hdr [frame.MaxHeaderSize]byte
//	n := frame.Put(hdr[:], frame.Header{Fin: true, Opcode: frame.OpText, Length: int64(len(p))})
//
// Errors that the peer caused are *ProtocolError values carrying the close
// code to send (1002, 1007); mistakes of the caller (an invalid close code to
// send) are plain errors.
package frame
