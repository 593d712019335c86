package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// Over TLS rally cannot reach the socket, so writes take the portable
// path: a blocking Write writes from its own goroutine, sends queue behind
// it, a flusher takes over what is left. Every message must still arrive
// whole, in order per sender, with its type.
func TestConcurrentWritersOverTLSEachMessageArrivesWholeInOrder(t *testing.T) {
	s := &rally.Server{Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
		c.Write(context.Background(), typ, p)
	}}
	ts := httptest.NewTLSServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := rally.Dial(ctx, "wss"+strings.TrimPrefix(ts.URL, "https"), &rally.DialOptions{
		TLSConfig:   &tls.Config{InsecureSkipVerify: true},
		ConnOptions: rally.ConnOptions{BufferLimit: -1}, // no Send may be dropped here
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				typ := rally.Text
				if i%3 == 0 {
					typ = rally.Binary
				}
				msg := fmt.Appendf(nil, "%d:%d:", w, i)
				msg = append(msg, bytes.Repeat([]byte{'x'}, (i*97)%20000)...)
				var err error
				if i%2 == 0 {
					err = c.Write(ctx, typ, msg)
				} else {
					_, err = c.Send(typ, msg)
				}
				if err != nil {
					t.Errorf("writer %d message %d: %v", w, i, err)
					return
				}
			}
		})
	}
	next := make([]int, writers)
	for range writers * each {
		typ, p, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var w, i int
		if _, err := fmt.Sscanf(string(p), "%d:%d:", &w, &i); err != nil {
			t.Fatalf("unparsable echo %.30q", p)
		}
		want := rally.Text
		if i%3 == 0 {
			want = rally.Binary
		}
		if i != next[w] || typ != want || len(p) != len(fmt.Sprintf("%d:%d:", w, i))+(i*97)%20000 {
			t.Fatalf("writer %d: got message %d (%v, %d bytes), want message %d (%v)", w, i, typ, len(p), next[w], want)
		}
		next[w]++
	}
	wg.Wait()
}
