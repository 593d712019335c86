// Package deflate is permessage-deflate (RFC 7692) for WebSocket
// connections: the negotiation of its parameters in the opening handshake,
// and the codecs that compress and inflate message payloads, with pooled
// state and size limits.
//
// Negotiation: a client sends Offer(cfg) in Sec-WebSocket-Extensions; a
// server answers with Negotiate, which takes the first offer it can
// honour; the client checks the answer with Accept. All four parameters
// (server/client_no_context_takeover, server/client_max_window_bits, 8 to
// 15 bits) are supported; what cannot be honoured is declined, never
// answered falsely.
//
// Codecs: each direction of a connection has a Compressor on the sending
// side and a Decompressor on the receiving side, built from the negotiated
// Params. With context takeover, the messages of a direction form one
// DEFLATE stream; without it, each message stands alone, and a message for
// many receivers can be compressed once (CompressOnce) and the same bytes
// sent to all. Memory is part of the design: the large DEFLATE state is
// pooled and lent per message, or, with context takeover, while a
// connection is busy; an idle connection keeps at most its window (Idle).
//
// The package is not a connection: it does not read or write frames, set
// or check RSV1, decide which messages to compress (a size threshold, a
// per-message choice), or validate UTF-8. The connection does, and turns
// the errors here into close codes: the errors of Inflate and Next are
// *frame.ProtocolError values carrying 1009 (ErrTooBig) or 1007
// (ErrCorrupt).
//
// A message can be inflated whole (Inflate) or as its frames arrive
// (Feed each frame's payload, then Next until it returns no piece): the
// output comes in pieces of at most MaxPiece bytes, so that the connection
// can check the read limit and validate UTF-8 as it goes and fail a
// message at its first bad byte.
//
// A server's side of one connection, in outline:
//
//	p, answer, err := deflate.Negotiate(r.Header.Values("Sec-WebSocket-Extensions"), cfg)
//	// err: answer 400. answer == "": no compression. Otherwise send the answer, then:
//	send := deflate.NewCompressor(level, p.ServerMaxWindowBits, !p.ServerNoContextTakeover)
//	recv := deflate.NewDecompressor(p.ClientMaxWindowBits, !p.ClientNoContextTakeover)
//	payload := send.Compress(buf[:0], msg)        // sent with RSV1 set
//	msg, err = recv.Inflate(out[:0], payload, limit) // for a message that arrived with RSV1
//
// or, for a message that arrived with RSV1, frame by frame:
//
//	recv.Feed(framePayload, fin) // each frame as it arrives
//	for {
//		piece, err := recv.Next() // err: fail the connection (1007)
//		if piece == nil {
//			break // wait for the next frame; after fin, the message is whole
//		}
//		// count piece against the limit (1009), validate UTF-8 (1007),
//		// deliver it; on a failure call recv.Abort() and fail the connection
//	}
//
// This package compresses with github.com/klauspost/compress/flate, which
// is faster than compress/flate and supports small windows and
// dictionaries. It inflates with a DEFLATE decoder of its own (stream.go),
// a push decoder that can stop at any byte of its input and go on when the
// next frame arrives, which a pull decoder reading an io.Reader cannot.
package deflate
