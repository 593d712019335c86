package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/internal/slowness"
)

// The conformance gate: rally's server and rally's client, strict (every
// case OK or INFORMATIONAL), with section 9 at small sizes.

func conformOptions(agent string) *conform.Options {
	// Every section, permessage-deflate's 12, 13 and 106 (compressed text
	// that must fail at its first bad byte) included.
	// The peer is strict and answers each case: the waits for its answers
	// scale with the load, so that a verdict does not depend on how long a
	// loaded machine takes to echo 1 MiB (1.1.9 "observed nothing" at load
	// 13 with the default 2 s).
	return &conform.Options{Agent: agent, Scale: 1.0 / 64, Cases: []string{"*"},
		Timeout: slowness.Scale(2 * time.Second), CloseTimeout: slowness.Scale(2 * time.Second),
		FailFastWait: slowness.Scale(time.Second)}
}

func TestConformanceOfRallyServe(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	for _, mode := range serveModes {
		t.Run(mode.name, func(t *testing.T) {
			addr, stop := serveConfig(t, Config{ShutdownTimeout: 2 * time.Second, EventLoop: mode.eventLoop})
			defer stop()
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer rcancel()
			rep, err := conform.RunServer(rctx, "ws://"+addr+"/echo", conformOptions("rally-serve-"+mode.name))
			if err != nil {
				t.Fatal(err)
			}
			report(t, rep)
		})
	}
}

func TestConformanceOfRallyClient(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := conform.RunClient(ctx, conformOptions("rally-client"), driveRallyClient)
	if err != nil {
		t.Fatal(err)
	}
	report(t, rep)
}

func report(t *testing.T, rep *conform.Report) {
	t.Helper()
	c := rep.Counts()
	t.Logf("%+v", c)
	if !rep.Passed() {
		t.Fatalf("not strict: %s", strings.Join(rep.Failures(), "; "))
	}
	compressedUTF8 := 0
	for _, r := range rep.Results {
		if strings.HasPrefix(r.ID, "106.") {
			compressedUTF8++
		}
	}
	if compressedUTF8 == 0 {
		t.Fatal("section 106 (compressed text failing fast) did not run")
	}
}

// driveRallyClient follows the fuzzing-server protocol with rally's client:
// ask for the case count, run every case echoing each message back, then
// ask for the reports.
func driveRallyClient(ctx context.Context, addr string) error {
	base := "ws://" + addr
	var count int
	err := session(ctx, base+"/getCaseCount", func(c *rally.Conn, typ rally.MessageType, p []byte) error {
		n, err := strconv.Atoi(string(p))
		count = n
		return err
	})
	if err != nil {
		return fmt.Errorf("case count: %w", err)
	}
	for i := 1; i <= count; i++ {
		url := fmt.Sprintf("%s/runCase?case=%d&agent=rally-client", base, i)
		session(ctx, url, func(c *rally.Conn, typ rally.MessageType, p []byte) error {
			return c.Write(ctx, typ, p)
		})
	}
	return session(ctx, base+"/updateReports?agent=rally-client", nil)
}

// session opens one connection and hands every message to onMessage until
// the connection ends. Ends of the connection are the suite's to judge.
func session(ctx context.Context, url string, onMessage func(*rally.Conn, rally.MessageType, []byte) error) error {
	c, _, err := rally.Dial(ctx, url, &rally.DialOptions{ConnOptions: rally.ConnOptions{ReadLimit: 64 << 20}})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	for {
		typ, p, err := c.Read(ctx)
		if err != nil {
			if errors.Is(err, rally.ErrClosed) {
				return nil
			}
			return err
		}
		if onMessage != nil {
			if err := onMessage(c, typ, p); err != nil {
				return err
			}
		}
	}
}
