// Package websocket is gorilla/websocket's API on rally's engine: a
// program written for github.com/gorilla/websocket compiles and runs with
// only its import path changed,
//
//	import "github.com/rallyws/rally/gorilla/websocket"
//
// and gets rally's RFC 6455 checks, throughput and memory behind the same
// Upgrader, Dialer and Conn. The path says what the package replaces and
// its name stays websocket, so websocket.Upgrader{...} is unchanged. It is
// not for new code: rally's own API (rally.Accept, rally.Dial, Conn.Read,
// Conn.Write, the Server callbacks) does more with less.
//
// # Same as gorilla
//
// One goroutine reads and one writes at a time; Close and WriteControl may
// be called concurrently with everything. A read deadline that passes
// during a read fails it and every later read (a net.Error whose Timeout
// is true); so does a write deadline for writes. After a read error, every
// read returns the same error. The default ping handler answers with a
// pong, the default close handler answers with the peer's code, and their
// errors end the read. CheckOrigin nil accepts only same-origin browsers.
// NextWriter streams fragments; a new NextWriter or WriteMessage closes the
// previous writer; NextReader discards the unread rest of the previous
// message. Compression is negotiated only with EnableCompression.
//
// # Different from gorilla
//
// Where gorilla breaks RFC 6455 or lets a peer hold memory, rally's rules
// apply (docs/MIGRATING.md has the table, each row with its test):
//
//   - Text messages and close reasons that are not valid UTF-8 fail the
//     read at the first bad byte, and the peer gets close 1007 (RFC 6455
//     8.1); gorilla delivers the bytes. The read returns a *CloseError
//     with code 1007; likewise 1002 for a protocol violation.
//   - Every ping is answered with a pong (RFC 6455 5.5.2), whatever the
//     ping handler does; a pong written from a ping handler is not sent
//     twice, and an unsolicited pong (WriteControl with PongMessage outside
//     a ping handler) is refused with an error.
//   - The peer's close is always answered (RFC 6455 5.5.1), whatever the
//     close handler does.
//   - A close message is checked before it is sent: a code that may not be
//     sent (1005, 1006, 1015, or outside the ranges of RFC 6455 7.4) or a
//     reason that is not UTF-8 is refused with an error.
//   - A message of more fragments than rally's limit (see
//     rally.DefaultMaxFragments) fails with 1008.
//   - Repeated reads after an error keep returning it; gorilla panics at
//     the thousandth.
//   - A panic in a handler is recovered and closes the connection with
//     1011 instead of crashing the program.
//   - An Upgrade request with a body is refused (400): its bytes would
//     otherwise be read as frames.
//   - NextReader returns the same reader each time (no allocation per
//     message); a reader kept past the next read call reads the current
//     message instead of returning io.EOF.
//   - Close after a close message waits (at most a second) for the close
//     handshake, so that the peer gets the close frame.
//   - ReadBufferSize, WriteBufferSize, WriteBufferPool,
//     Upgrader.HandshakeTimeout and SetCompressionLevel are accepted and
//     have no effect: rally sizes and pools its buffers itself, and
//     compresses at its own level.
package websocket
