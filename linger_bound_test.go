package rally_test

import (
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// After a violation, the server drops what the peer still sends for a
// bounded number of bytes, not for as long as the peer keeps sending (a
// client streaming the rest of a message refused at its header would
// otherwise keep the server copying until the close timeout).
func TestAPeerThatKeepsSendingAfterTheCloseIsCutNotReadForever(t *testing.T) {
	rec := newRecorder()
	s := echoServer()
	s.Options = &rally.AcceptOptions{ConnOptions: rally.ConnOptions{ReadLimit: 1 << 10, CloseTimeout: time.Hour}}
	s.Close = rec.close
	p := dialPeer(t, serve(t, s))
	// A binary frame claiming 1 GiB, masked with a zero key.
	hdr := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0}
	if err := p.WriteRaw(hdr); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	const most = 1 << 30
	sent := 0
	for ; sent < most; sent += len(chunk) {
		if err := p.WriteRaw(chunk); err != nil {
			break
		}
	}
	if sent >= most {
		t.Fatal("the server read 1 GiB sent after its close frame")
	}
	if ce := rec.waitClose(t); ce.Code != rally.CloseTooBig {
		t.Fatalf("Server.Close got %v, want 1009", ce)
	}
}
