package server

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

func TestEchoReturnsEveryMessageWithItsFrameType(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url, stop := start(t)
	defer stop()
	c, _, err := rally.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, m := range []struct {
		typ rally.MessageType
		p   []byte
	}{
		{rally.Text, []byte("héllo")},
		{rally.Binary, []byte{0, 1, 2, 0xff}},
		{rally.Text, nil},
		{rally.Binary, bytes.Repeat([]byte{7}, 1<<20)},
	} {
		if err := c.Write(ctx, m.typ, m.p); err != nil {
			t.Fatal(err)
		}
		typ, p, err := c.Read(ctx)
		if err != nil || typ != m.typ || !bytes.Equal(p, m.p) {
			t.Fatalf("echo of %v (%d bytes): got %v (%d bytes), %v", m.typ, len(m.p), typ, len(p), err)
		}
	}
}

func TestShutdownClosesEveryWebSocketWith1001(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url, stop := start(t)
	c, _, err := rally.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { _, _, err := c.Read(ctx); read <- err }()
	stop()
	var ce *rally.CloseError
	if err := <-read; !errors.As(err, &ce) || ce.Code != rally.CloseGoingAway {
		t.Fatalf("client saw %v, want a close with 1001", err)
	}
}

// start serves on a loopback port and returns the echo URL and a function
// that shuts the server down and waits for Serve to return.
func start(t *testing.T) (string, func()) {
	t.Helper()
	addr, stop := serveConfig(t, Config{ShutdownTimeout: 2 * time.Second})
	return "ws://" + addr + "/echo", stop
}

// serveConfig serves cfg on a loopback port and returns its address and a
// function that shuts the server down and waits for Serve to return
// cleanly.
func serveConfig(t *testing.T, cfg Config) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return ln.Addr().String(), func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}
