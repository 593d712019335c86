package rally_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/conform"
)

// The conformance suite against Serve on a raw listener with event loops:
// the loops read and answer the handshakes too (on Linux).
func TestEventLoopServeOnARawListenerPassesTheConformanceSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	s := &rally.Server{
		EventLoop: true,
		Options: &rally.AcceptOptions{
			Compression: &rally.CompressionOptions{ServerNoContextTakeover: true},
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Write(context.Background(), typ, p)
		},
	}
	ln := listen(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := conform.RunServer(ctx, "ws://"+ln.Addr().String()+"/", &conform.Options{Agent: "rally-event-loop-serve", Scale: 1.0 / 64, Cases: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep.Counts())
	if !rep.Passed() {
		t.Fatalf("not strict: %s", strings.Join(rep.Failures(), "; "))
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}
