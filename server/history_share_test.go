package server

import (
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rallyws/rally"
)

// A delivery of a topic with history is framed once: subscribers that do
// not read keep the same frame in their queues, and the memory budget
// charges it once, not once a subscriber (each queue used to keep a copy:
// 5 HTTP/2 connections of 100 never-reading streams held 760-820 MiB).
func TestAHistoryDeliveryWaitingForManySubscribersIsHeldOnce(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 30)
	cfg := Config{History: HistoryConfig{Topics: []string{"h"}}, MaxMessageBytes: 1 << 20, SubscriberSendBuffer: 4 << 10}
	cfg.Protection.MemoryBudget = budget
	ts := serve(t, cfg)
	addr := strings.TrimPrefix(ts.http, "http://")
	const subscribers = 4
	for range subscribers {
		neverReading(t, addr, "/ws", `{"type":"subscribe","topic":"h"}`)
	}
	pub := dial(t, ts.ws+"/ws", nil)
	const size = 256 << 10
	data := strings.Repeat("x", size)
	for range 2 {
		pub.send(`{"type":"publish","topic":"h","id":2,"data":"` + data + `"}`)
		pub.next() // the ack: the message went to every subscriber's queue before it
	}
	used := budget.Stats()[rally.MemorySendQueues].Used
	t.Logf("%d KiB charged for send queues", used>>10)
	if used < size {
		t.Fatalf("%d bytes charged for send queues: the subscribers' queues hold less than a message", used)
	}
	if used > 3*size {
		t.Errorf("%d subscribers wait for 2 messages of %d KiB: %d KiB charged for send queues, want the 2 frames once (copies: about %d KiB)",
			subscribers, size>>10, used>>10, subscribers*2*size>>10)
	}
}

// neverReading opens a WebSocket on path by hand with a 4 KiB receive
// buffer, sends text (under 126 bytes) as one message, reads the server's
// first message (the ack of a subscribe), and nothing after it.
func neverReading(t *testing.T, addr, path, text string) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
		return err
	}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	br := rawHandshake(t, nc, addr, path)
	// FIN text, masked with the key 0 (RFC 6455 5.2): the payload as it is.
	msg := append([]byte{0x81, 0x80 | byte(len(text)), 0, 0, 0, 0}, text...)
	if _, err := nc.Write(msg); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil || head[1] >= 126 {
		t.Fatalf("the answer's frame header: %x, %v", head, err)
	}
	if _, err := io.ReadFull(br, make([]byte, head[1])); err != nil {
		t.Fatal(err)
	}
}
