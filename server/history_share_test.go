package server

import (
	"bufio"
	"fmt"
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

// A replay shares the history's frames the same way: clients that
// recover the same messages and read slowly keep one frame between them
// in their queues, not a copy each.
func TestReplaysOfTheSameMessagesToSlowReadersHoldThemOnce(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 30)
	cfg := Config{History: HistoryConfig{Topics: []string{"h"}}, MaxMessageBytes: 1 << 20}
	cfg.Protection.MemoryBudget = budget
	ts := serve(t, cfg)
	addr := strings.TrimPrefix(ts.http, "http://")
	pub := dial(t, ts.ws+"/ws", nil)
	const size = 256 << 10
	data := strings.Repeat("x", size)
	pub.send(`{"type":"publish","topic":"h","id":1,"data":"` + data + `"}`)
	ack := pub.frame()
	if ack.Type != "ack" || ack.Offset == nil {
		t.Fatalf("got %+v, want the publish's ack with its position", ack)
	}
	const subscribers = 4
	from := fmt.Sprintf(`{"type":"subscribe","topic":"h","offset":%d,"epoch":%q}`, *ack.Offset-1, ack.Epoch)
	for range subscribers {
		br := neverReading(t, addr, "/ws", from)
		// The replay has begun: the message is in this client's queue.
		if _, err := br.ReadByte(); err != nil {
			t.Fatal(err)
		}
	}
	used := budget.Stats()[rally.MemorySendQueues].Used
	t.Logf("%d KiB charged for send queues", used>>10)
	if used < size/2 {
		t.Fatalf("%d bytes charged for send queues: the replays' queues hold less than half the message", used)
	}
	if used > 3*size/2 {
		t.Errorf("%d clients wait for the replay of a message of %d KiB: %d KiB charged for send queues, want the frame once (copies: about %d KiB)",
			subscribers, size>>10, used>>10, subscribers*size>>10)
	}
}

// neverReading opens a WebSocket on path by hand with a 4 KiB receive
// buffer, sends text (under 126 bytes) as one message, reads the server's
// first message (the ack of a subscribe), and nothing after it unless
// its caller reads on from the reader it returns.
func neverReading(t *testing.T, addr, path, text string) *bufio.Reader {
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
	return br
}
