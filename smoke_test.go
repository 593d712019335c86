package rally

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSmokeEcho(t *testing.T) {
	s := &Server{Message: func(c *Conn, typ MessageType, p []byte) { c.Write(context.Background(), typ, p) }}
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx := context.Background()
	c, _, err := Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		p := bytes.Repeat([]byte("a"), n)
		if err := c.Write(ctx, Text, p); err != nil {
			t.Fatal(err)
		}
		typ, got, err := c.Read(ctx)
		if err != nil || typ != Text || !bytes.Equal(got, p) {
			t.Fatalf("n=%d typ=%v len=%d err=%v", n, typ, len(got), err)
		}
	}
	if err := c.Close(1000, "bye"); err != nil {
		t.Fatal(err)
	}
}
