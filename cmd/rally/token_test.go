package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

func TestTokenIsAcceptedByRallyServeForTheGrantedTopicsAndNoOthers(t *testing.T) {
	secret := strings.Repeat("s3cr3t", 8)
	t.Setenv("RALLY_TOKEN_SECRET", secret) // rally serve, started below, reads it too
	var out, errOut bytes.Buffer
	if code := run([]string{"token", "--subscribe", "chat.*", "--publish", "news", "--subject", "alice", "--expires", "1h"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	tok := lines[len(lines)-1]
	if !strings.Contains(errOut.String(), "token for alice: subscribe chat.*; publish news; expires ") {
		t.Errorf("stderr %q does not say what the token grants", errOut.String())
	}

	base := startRally(t)
	ws := "ws" + strings.TrimPrefix(base, "http") + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, resp, err := rally.Dial(ctx, ws, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("without a token: %v, want 401", err)
	}
	c, _, err := rally.Dial(ctx, ws+"?token="+tok, nil)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	defer c.CloseNow()
	for _, tc := range []struct{ send, want string }{
		{`{"type":"subscribe","topic":"chat.room1","id":1}`, `"type":"ack","id":1`},
		{`{"type":"subscribe","topic":"admin","id":2}`, `"code":"forbidden"`},
		{`{"type":"publish","topic":"news","data":"hi","id":3}`, `"type":"ack","id":3`},
		{`{"type":"publish","topic":"chat.room1","data":"hi","id":4}`, `"code":"forbidden"`},
	} {
		if err := c.Write(ctx, rally.Text, []byte(tc.send)); err != nil {
			t.Fatal(err)
		}
		_, p, err := c.Read(ctx)
		if err != nil || !strings.Contains(string(p), tc.want) {
			t.Fatalf("%s: got %s, %v; want %s", tc.send, p, err, tc.want)
		}
	}
}

func TestTokenReadsTheSecretFromAFileAndRefusesAShortOrMissingOne(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	short := filepath.Join(dir, "short")
	os.WriteFile(good, []byte(strings.Repeat("k", 32)+"\n"), 0o600)
	os.WriteFile(short, []byte("k\n"), 0o600)
	t.Setenv("RALLY_TOKEN_SECRET", "")
	for _, tc := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"--subscribe", "a", "--secret-file", good}, 0, ""},
		{[]string{"--subscribe", "a", "--secret-file", short}, 2, "the secret is 1 bytes"},
		{[]string{"--subscribe", "a"}, 2, "no secret: set RALLY_TOKEN_SECRET"},
		{[]string{"--subscribe", "a", "--secret-file", filepath.Join(dir, "none")}, 1, "--secret-file"},
		{[]string{"--secret-file", good}, 2, "grants nothing"},
		{[]string{"--subscribe", "bad topic", "--secret-file", good}, 2, `pattern "bad topic" can never match`},
		{[]string{"--subscribe", "a", "--expires", "0s", "--secret-file", good}, 2, "--expires is 0s"},
	} {
		var out, errOut bytes.Buffer
		status := run(append([]string{"token"}, tc.args...), &out, &errOut)
		if status != tc.status || !strings.Contains(errOut.String(), tc.says) {
			t.Errorf("rally token %q: exit %d, stderr %q; want %d saying %q", tc.args, status, errOut.String(), tc.status, tc.says)
		}
		if status == 0 && strings.Count(strings.TrimSpace(out.String()), ".") != 2 {
			t.Errorf("rally token %q: stdout %q is not a JWT", tc.args, out.String())
		}
	}
}
