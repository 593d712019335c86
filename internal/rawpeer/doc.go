// Package rawpeer is a raw WebSocket test peer: it writes exact bytes and
// reads exact frames over a TCP connection, so a test states what is on the
// wire instead of what a WebSocket library believes.
//
// It is the project's independent oracle. It builds frames, masks payloads,
// computes Sec-WebSocket-Accept and validates UTF-8 from RFC 6455 and
// RFC 3629 on its own, and imports nothing of rally (neither frame/ nor the
// root package), so it cannot share their bugs.
//
// It is for tests and for the conformance suite (conform/). It is not a
// WebSocket implementation: it never answers pings, never reassembles
// messages, never closes on its own and enforces nothing it is not asked to.
// A Peer is used by one goroutine at a time.
package rawpeer
