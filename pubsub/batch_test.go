package pubsub_test

import (
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
	"github.com/rallyws/rally/pubsub"
)

// The batching of deliveries is counted in writes. The connections run
// over SOCK_SEQPACKET Unix sockets, where rally writes as on TCP but every
// write stays one record: each Read of a client returns exactly one write
// of the server's, and one write of a client is one read batch of the
// server's.

// packetServe serves h on a SOCK_SEQPACKET Unix socket; it returns the
// socket's path.
func packetServe(t testing.TB, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pubsub") // short: a socket path has at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unixpacket", path)
	if err != nil {
		t.Skipf("SOCK_SEQPACKET Unix sockets are not available: %v", err)
	}
	ts := httptest.NewUnstartedServer(h)
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	return path
}

// packetJoin connects a client to the chat served at path, handshake done
// and Open run. It sends nothing before the 101 has arrived, so that
// everything after it is frames.
func (ch *chat) packetJoin(t testing.TB, path string) (net.Conn, *rally.Conn) {
	t.Helper()
	nc, err := net.DialTimeout("unixpacket", path, wireTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	p := rawpeer.NewPeer(nc, true)
	p.SetTimeout(wireTimeout)
	key := rawpeer.NewKey()
	if err := p.WriteRaw(rawpeer.HandshakeRequest("localhost", "/", key, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadResponse(key); err != nil {
		t.Fatalf("handshake over a packet socket: %v", err)
	}
	c := receive(t, ch.opened, "Server.Open")
	t.Cleanup(func() { c.CloseNow() })
	return nc, c
}

// readWrite reads one write of the server's and returns its frames as
// "text:..." or "binary:...".
func readWrite(t testing.TB, nc net.Conn) []string {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(wireTimeout))
	buf := make([]byte, 1<<20)
	n, err := nc.Read(buf)
	if err != nil {
		t.Fatalf("reading one write: %v", err)
	}
	var out []string
	for b := buf[:n]; len(b) > 0; {
		// An unmasked server frame (RFC 6455 5.2), small in these tests.
		if len(b) < 2 || b[1]&0x80 != 0 {
			t.Fatalf("write %x: not an unmasked frame", buf[:n])
		}
		size, hl := int(b[1]&0x7f), 2
		if size == 126 {
			size, hl = int(binary.BigEndian.Uint16(b[2:4])), 4
		}
		if size == 127 || len(b) < hl+size {
			t.Fatalf("write %x: a frame cut short or too long for the test", buf[:n])
		}
		out = append(out, describe(rawpeer.Frame{Fin: b[0]&0x80 != 0, Opcode: b[0] & 0x0f, Payload: b[hl : hl+size]}))
		b = b[hl+size:]
	}
	return out
}

// batch returns the messages as masked text frames, back to back.
func batch(msgs ...string) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, rawpeer.Build(rawpeer.Frame{Fin: true, Opcode: rawpeer.OpText, Masked: true, Mask: [4]byte{7, 7, 7, 7}, Payload: []byte(m)})...)
	}
	return b
}

func TestPublishesFromOneReadBatchReachEachSubscriberInOneWrite(t *testing.T) {
	for _, self := range []bool{false, true} {
		t.Run(map[bool]string{false: "WithoutPublishToSelf", true: "WithPublishToSelf"}[self], func(t *testing.T) {
			hub := mustHub(t, &pubsub.Options{PublishToSelf: self})
			ch := newChat(hub, "room")
			ch.publish = "room"
			path := packetServe(t, ch.server())
			sender, _ := ch.packetJoin(t, path)
			var others []net.Conn
			for range 3 {
				nc, _ := ch.packetJoin(t, path)
				others = append(others, nc)
			}
			if _, err := sender.Write(batch("one", "two", "three")); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				receive(t, ch.results, "a publish")
			}
			want := []string{"text:one", "text:two", "text:three"}
			for i, nc := range others {
				if got := readWrite(t, nc); !slices.Equal(got, want) {
					t.Fatalf("subscriber %d: the batch's publishes came as the write %q, want one write %q", i, got, want)
				}
			}
			if self {
				if got := readWrite(t, sender); !slices.Equal(got, want) {
					t.Fatalf("the sender: its publishes came back as the write %q, want one write %q", got, want)
				}
			}
			// Nothing else reached anyone: the next write is the next message.
			hub.Publish("room", rally.Binary, []byte("end"))
			for i, nc := range append(others, sender) {
				if got := readWrite(t, nc); !slices.Equal(got, []string{"binary:end"}) {
					t.Fatalf("connection %d: write %q, want just binary:end", i, got)
				}
			}
		})
	}
}

func TestPublishOutsideACallbackSendsEachMessageAtOnce(t *testing.T) {
	hub := mustHub(t, nil)
	ch := newChat(hub, "room")
	path := packetServe(t, ch.server())
	_, from := ch.packetJoin(t, path)
	other, _ := ch.packetJoin(t, path)
	for _, m := range []string{"a", "b"} {
		if r, err := hub.PublishFrom(from, "room", rally.Text, []byte(m)); err != nil || r.Sent != 1 {
			t.Fatalf("PublishFrom outside a callback = %+v, %v; want sent at once", r, err)
		}
	}
	for _, m := range []string{"a", "b"} {
		if got := readWrite(t, other); !slices.Equal(got, []string{"text:" + m}) {
			t.Fatalf("write %q, want just text:%s", got, m)
		}
	}
}
