package rally_test

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/rallyws/rally"
)

// Every function OnClose registered runs once the connection has ended,
// in the order they were registered, each recovered on its own: a panic
// in one does not keep the next from running. One registered after the
// end runs at once.
func TestOnCloseFunctionsRunInOrderEachRecoveredOnItsOwn(t *testing.T) {
	c, peer, err := rally.ServerConnPairForTest(&rally.ConnOptions{
		BufferLimit: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var mu sync.Mutex
	var ran []int
	note := func(i int) {
		mu.Lock()
		ran = append(ran, i)
		mu.Unlock()
	}
	c.OnClose(func(*rally.CloseError) { note(1) })
	c.OnClose(func(*rally.CloseError) { note(2); panic("the second function panics") })
	last := make(chan struct{})
	c.OnClose(func(*rally.CloseError) { note(3); close(last) })
	c.CloseNow()
	<-last
	c.OnClose(func(*rally.CloseError) { note(4) })
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 3, 4}; !slices.Equal(ran, want) {
		t.Fatalf("the OnClose functions ran as %v, want %v", ran, want)
	}
}
