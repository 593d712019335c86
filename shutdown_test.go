package rally_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

func wsURL(ts *httptest.Server) string { return "ws" + strings.TrimPrefix(ts.URL, "http") }

func TestShutdownSendsGoingAwayToAThousandConnections(t *testing.T) {
	const n = 1000
	var closed sync.WaitGroup
	closed.Add(n)
	s := &rally.Server{Close: func(c *rally.Conn, err *rally.CloseError) { closed.Done() }}
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	codes := make(chan uint16, n)
	for range n {
		c, _, err := rally.Dial(ctx, wsURL(ts), nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _, err := c.Read(ctx)
			var ce *rally.CloseError
			if errors.As(err, &ce) {
				codes <- ce.Code
			} else {
				codes <- 0
			}
		}()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v, want nil (every client answers)", err)
	}
	for range n {
		if code := <-codes; code != rally.CloseGoingAway {
			t.Fatalf("a client saw close code %d, want 1001", code)
		}
	}
	closed.Wait()
}

func TestShutdownCutsAClientThatNeverAnswersAtTheDeadline(t *testing.T) {
	s := &rally.Server{}
	ts := httptest.NewServer(s)
	defer ts.Close()
	p, _, err := rawpeer.DialClient(ts.Listener.Addr().String(), "/", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	p.ExpectClose(t, rally.CloseGoingAway)
	p.ExpectEOF(t)
}

func TestUpgradeAfterShutdownIsRefusedWith503(t *testing.T) {
	s := &rally.Server{}
	ts := httptest.NewServer(s)
	defer ts.Close()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, resp, err := rally.Dial(context.Background(), wsURL(ts), nil)
	if err == nil {
		t.Fatal("Dial after Shutdown succeeded")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("response %v, want 503", resp)
	}
}
