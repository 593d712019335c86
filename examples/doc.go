// Package examples holds complete programs that use rally, one per
// directory, each built with `go build ./examples/...` and run by
// examples_test.go:
//
//	echo-server  a WebSocket echo server (rally.Server)
//	echo-client  a client that sends messages and prints the replies (rally.Dial)
//	chat         a chat room with a browser page (rally.Server, pubsub.Hub)
//	pubsub-hub   topic pub/sub: WebSocket subscribers, HTTP publishers (pubsub.Hub)
//	reconnect    a client that reconnects, with backoff, when its server goes away
//
// Every server takes --addr (127.0.0.1:0 picks a free port) and prints
// "listening on http://HOST:PORT" first; every client takes --url.
package examples
