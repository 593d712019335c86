// Package loadgen is a WebSocket load generator: it opens connections to
// any WebSocket server, drives one of five scenarios (echo, chat,
// throughput, connect, idle) and reports the rate, latency percentiles and
// errors it measured, and, when the server runs on the same machine, the
// server's CPU time per message and its memory.
//
// It is built to cost less than the server it measures: the opening
// handshake is written by hand on a raw TCP connection, client frames are
// masked once before the run and then written from a pre-built batch, and
// replies are parsed in place in a reused read buffer without copying. The
// frame type and length of every reply are checked, and the bytes of a
// sample of them (the first reply of each connection, then one in
// SampleEvery) are compared with what was sent; a wrong reply is counted
// as an error, never as a message.
//
// The wire format is implemented here a second time on purpose, apart from
// rally's frame package: loadgen checks rally's replies, and a checker that
// shares the code under test shares its bugs.
//
// loadgen is for measuring servers: `rally bench` and the side-by-side
// benchmarks in the bench module use it. It is not a WebSocket client
// library (use rally.Dial). The one extension it negotiates, when asked
// (Config.Compress), is permessage-deflate, implemented on the standard
// library's compress/flate for the same reason: its messages are
// compressed once per run and sent without context takeover, and
// compressed replies are inflated before they are counted and compared.
//
// Scenarios and what they count:
//
//   - echo: Conns connections, each keeping InFlight messages of Size bytes
//     outstanding (closed loop); counts replies.
//   - chat: Conns clients of one room (the server delivers every message to
//     every client, the sender included, as Bun's bench/websocket-server
//     does); in rounds, every client sends InFlight messages and waits
//     until it has received all Conns*InFlight of the round; counts
//     deliveries. Latency runs from the start of the round.
//   - throughput: echo over a single connection, 256 KiB binary messages
//     by default (undici's method); reports MiB/s as well.
//   - connect: Conns workers, each repeating dial, opening handshake and
//     close handshake; counts completed opening handshakes, latency is dial
//     to 101.
//   - idle: opens Conns connections, holds them for the duration (answering
//     pings) and reports how many stayed open and, with ServerPID or
//     ServerPIDs, the servers' resident memory per connection. Its
//     IdleOptions dial from chosen source addresses, send pings, subscribe
//     every connection to a topic of rally serve's /ws and time one
//     broadcast to all of them; `rally bench idle --procs N` spreads the
//     connections over N processes of its own (procs.go), for more
//     connections than one process may hold files.
//
// The pusher scenario (pusher.go, RunPusher) stands apart: it measures the
// fan-out of rally serve's Pusher Channels endpoints, subscribers on
// /app/KEY and events triggered on the signed HTTP API, or with
// ClientEvents sent as client events by publisher sockets
// (pusher_client.go), and with Compare the same fan-out over /ws. It
// speaks JSON protocols and so uses rally's own client (rally.Dial)
// rather than the hand-written wire code; it costs more per message than
// the scenarios above, the same for both protocols.
package loadgen
