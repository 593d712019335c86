// Package bench holds rally's side-by-side benchmarks: one WebSocket
// server per peer (Go libraries, npm ws on Node.js, Bun, a raw TCP echo as
// the physical floor, and rally itself), each written the way its own
// README recommends for speed, and a runner (cmd/runner) that drives them
// with rally's load generator and writes docs/BENCHMARKS-peers.md.
//
// It is a separate module so that the main module never depends on the
// libraries it is compared with. Every server answers the same protocol:
//
//   - /echo returns every message to its sender, with the same type.
//   - /chat puts the connection in one room and delivers every message to
//     every connection of the room, the sender included.
//
// It is not a test suite: the servers are as small as their libraries
// allow and check nothing beyond what the library does.
package bench
