// Package rally is a WebSocket implementation (RFC 6455, with
// permessage-deflate from RFC 7692) for servers and clients, built on
// net/http and context.
//
// # A server
//
// A Server is an http.Handler that accepts WebSocket connections and
// calls you for each event: no read loop to write. Answer with Conn.Send,
// which never blocks:
//
//	http.Handle("/echo", &rally.Server{
//		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
//			c.Send(typ, p) // p is valid during the call only; Send copies what it keeps
//		},
//		Close: func(c *rally.Conn, err *rally.CloseError) {
//			log.Printf("%v closed: %v", c.RemoteAddr(), err)
//		},
//	})
//	log.Fatal(http.ListenAndServe("127.0.0.1:9000", nil))
//
// Send returns at once with what became of the message (Sent, Queued
// behind bytes the kernel would not take yet, or Dropped past the
// connection's buffer limit). The sends of one batch of reads leave in one
// system call. Use Conn.Write instead when the caller must wait until
// its message has reached the kernel, for example to pace a producer by
// the slowest peer.
//
// To run your own read loop, call Accept from any handler and then
// Conn.Read (or Conn.ReadAppend into your buffer, or Conn.Reader to
// stream) until it returns an error. Server.Shutdown closes every
// connection with 1001 (going away) and waits for them.
//
// # A client
//
// Dial opens a connection to a ws:// or wss:// URL (http:// and https://
// mean the same); the same Conn methods apply:
//
//	ctx := context.Background()
//	c, _, err := rally.Dial(ctx, "ws://127.0.0.1:9000/echo", nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Close(rally.CloseNormal, "bye")
//	c.Write(ctx, rally.Text, []byte("hello"))
//	typ, p, err := c.Read(ctx)
//
// # Who owns the bytes
//
//   - A payload handed to a Server callback is valid during the callback
//     only; it is a slice of the connection's read buffer. Copy it to keep
//     it.
//   - Conn.Read returns a payload that is the caller's: one allocation,
//     grown as the message arrives, never sized from what a header claims.
//     Conn.ReadAppend appends to the caller's slice and allocates nothing
//     when it is large enough.
//   - No send (Conn.Send, Conn.Write, Conn.Writer, Conn.Ping)
//     keeps or changes the caller's slice after it returns: what the kernel
//     did not take was copied, and a client masks into its own buffer.
//   - A PreparedMessage is framed (and compressed) once and may be sent to
//     many connections.
//
// # Concurrency
//
//   - Every send method may be called from many goroutines at once; frames
//     leave in the order the sends were accepted, never interleaved.
//   - One goroutine reads a connection at a time: a Server's callbacks of
//     one connection never run concurrently, and a second Conn.Read
//     waits for the first.
//   - A callback may Send, Write or Close on its own connection (or any
//     other) without deadlock; Close from a callback sends the close frame
//     and returns.
//   - A context passed to Read or Write ends the call, not the connection:
//     a Read cut short keeps the message that was arriving for the next
//     Read.
//
// # Errors
//
// Every end of a connection is reported once as a *CloseError with the
// close code (1006 when no close frame came); after that calls return
// ErrClosed, and errors.Is(err, ErrClosed) holds for both. When the
// peer broke the protocol, rally has sent the matching close code (1002,
// 1007, 1008 or 1009) and the CloseError's Err is a ProtocolError naming
// the rule. Text is checked as valid UTF-8 as it arrives and fails at the
// first bad byte. Messages are limited to DefaultReadLimit (16 MiB) unless
// configured, checked on each frame header before memory is spent.
package rally
