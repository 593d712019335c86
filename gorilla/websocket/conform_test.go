package websocket_test

import (
	"context"
	"fmt"
	"github.com/rallyws/rally/gorilla/websocket"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/conform"
	"github.com/rallyws/rally/internal/slowness"
)

// The classic conformance cases, strict (every case OK or
// INFORMATIONAL), against gorilla's autobahn example written for this
// package: each of its echo endpoints, permessage-deflate included (the
// example enables compression), section 9 at small sizes.
func TestConformanceOfTheAutobahnExample(t *testing.T) {
	addr := freeAddr(t)
	startExample(t, "autobahn", addr)
	for _, path := range []string{"/c", "/f", "/r", "/m", "/p"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			rep, err := conform.RunServer(ctx, "ws://"+addr+path, &conform.Options{
				Agent: "gorilla-api-on-rally" + path,
				Scale: 1.0 / 64,
				Cases: []string{"*"},
				// Strict peers answer each case: the waits scale with the
				// load, so that a verdict does not depend on the machine.
				Timeout:      slowness.Scale(2 * time.Second),
				CloseTimeout: slowness.Scale(2 * time.Second),
				FailFastWait: slowness.Scale(time.Second),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", rep.Counts())
			if !rep.Passed() {
				t.Fatalf("not strict: %s", strings.Join(rep.Failures(), "; "))
			}
		})
	}
}

// The same cases against this package's client, driven the way gorilla's
// users write a client: Dial, then a ReadMessage / WriteMessage loop.
// Sections 12, 13 and 106 (permessage-deflate) are left out: gorilla's
// client offers server_no_context_takeover, and the suite's fixed answers
// to clients leave it out, which RFC 7692 7.1.1.1 makes a failed
// handshake for the client. The server side runs them (above).
func TestConformanceOfTheClient(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := conform.RunClient(ctx, &conform.Options{Agent: "gorilla-api-client", Scale: 1.0 / 64,
		Timeout: slowness.Scale(2 * time.Second), CloseTimeout: slowness.Scale(2 * time.Second),
		FailFastWait: slowness.Scale(time.Second)}, driveClient)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep.Counts())
	if !rep.Passed() {
		t.Fatalf("not strict: %s", strings.Join(rep.Failures(), "; "))
	}
}

// driveClient follows the fuzzing-server protocol: the case count, every
// case echoed, then the reports.
func driveClient(ctx context.Context, addr string) error {
	base := "ws://" + addr
	var count int
	if err := echoSession(ctx, base+"/getCaseCount", func(p []byte) {
		count, _ = strconv.Atoi(string(p))
	}); err != nil {
		return err
	}
	for i := 1; i <= count; i++ {
		echoSession(ctx, fmt.Sprintf("%s/runCase?case=%d&agent=gorilla-api-client", base, i), nil)
	}
	return echoSession(ctx, base+"/updateReports?agent=gorilla-api-client", nil)
}

// echoSession dials url with compression offered and echoes every message
// (or hands it to onMessage) until the connection ends.
func echoSession(ctx context.Context, url string, onMessage func([]byte)) error {
	d := websocket.Dialer{EnableCompression: true, HandshakeTimeout: wait}
	c, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		mt, p, err := c.ReadMessage()
		if err != nil {
			return nil // how the connection ended is the suite's to judge
		}
		if onMessage != nil {
			onMessage(p)
			continue
		}
		if err := c.WriteMessage(mt, p); err != nil {
			return nil
		}
	}
}
