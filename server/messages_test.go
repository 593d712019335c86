package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

func TestPublishNamesANonASCIICharacterOfATopicWhole(t *testing.T) {
	ts := serve(t, Config{})
	status, ans := post(t, ts.http+"/publish/caf%C3%A9", "text/plain", "", []byte("x"))
	if status != 400 || !strings.Contains(ans, `character 'é' at byte 3`) || strings.Contains(ans, "Ã") {
		t.Fatalf("answer %d %s, want 400 naming 'é' at byte 3", status, ans)
	}
}

func TestTopicErrorsNameInvalidUTF8AsABytes(t *testing.T) {
	err := validTopic("ab\xc3")
	if err == nil || !strings.Contains(err.Error(), `character '\xc3' at byte 2`) {
		t.Fatalf("error %v, want the byte \\xc3 at byte 2", err)
	}
}

func TestNewRefusesSettingsWithNoMeaningAsConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		says string
	}{
		{"short token secret", Config{TokenSecret: "short"}, "--token-secret is 5 bytes"},
		{"addr without a port", Config{Addr: "localhost"}, `--addr "localhost" is not HOST:PORT`},
		{"port past 65535", Config{Addr: "127.0.0.1:99999"}, `--addr "127.0.0.1:99999": the port must be a number from 0 to 65535`},
		{"history pattern with a space", Config{History: HistoryConfig{Topics: []string{"bad topic*"}}}, `--history: pattern "bad topic*" can never match: it has the character ' ' at byte 3`},
		{"presence pattern with a quote", Config{Presence: PresenceConfig{Topics: []string{`room"`}}}, `--presence: pattern "room\"" can never match`},
		{"empty history pattern", Config{History: HistoryConfig{Topics: []string{""}}}, "--history: a pattern is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New: %v, want a *ConfigError saying %q", err, tc.says)
			}
		})
	}
	for _, p := range []string{"*", "chat.*", "a*b*", "orders:eu/*"} {
		if err := validPattern(p); err != nil {
			t.Errorf("pattern %q refused: %v", p, err)
		}
	}
}

func TestEchoClosesAMessageOverItsLimitNamingTheLimitAndItsFlag(t *testing.T) {
	ts := serve(t, Config{Protection: Protection{EchoMaxMessageBytes: 1 << 20}})
	c := dial(t, ts.ws+"/echo", nil)
	if err := c.c.Write(testContext(t), rally.Binary, make([]byte, 1<<20+1)); err != nil {
		t.Fatal(err)
	}
	var ce *rally.CloseError
	_, _, err := c.c.Read(testContext(t))
	if !errors.As(err, &ce) {
		t.Fatalf("read: %v, want a close", err)
	}
	const want = "message larger than 1MiB, the limit of /echo (rally serve --echo-max-message-bytes)"
	if ce.Code != 1009 || ce.Reason != want || len(ce.Reason) > 123 {
		t.Fatalf("closed with %d %q, want 1009 %q", ce.Code, ce.Reason, want)
	}
	if r := tooBigReason("/ws and /chat", 1<<30-1, "max-message-bytes"); len(r) > 123 {
		t.Errorf("the longest reason is %d bytes: %q", len(r), r)
	}
}

func TestTheJSONLogSaysTheShutdownTimeoutAsADuration(t *testing.T) {
	var logged bytes.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Addr: ln.Addr().String(), ShutdownTimeout: 1500 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Serve(ctx, ln); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "shutting down" {
			if rec["timeout"] != "1.5s" {
				t.Fatalf("timeout logged as %v, want \"1.5s\"", rec["timeout"])
			}
			return
		}
	}
	t.Fatalf("no shutdown line in %s", logged.String())
}

// The banner says which endpoints need a token; each of them does.
func TestWithATokenSecretTheBannerNamesEveryEndpointThatNeedsAToken(t *testing.T) {
	secret := strings.Repeat("k", 32)
	ts := serve(t, Config{TokenSecret: secret})
	for _, ep := range []string{"/ws", "/chat", "/echo"} {
		_, resp, err := rally.Dial(testContext(t), ts.ws+ep, nil)
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Errorf("%s without a token: %v, want 401", ep, err)
		}
	}
	s, err := New(Config{Addr: "127.0.0.1:0", TokenSecret: secret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var banner bytes.Buffer
	if err := s.ListenAndServe(ctx, &banner); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(banner.String(), "auth:     /ws, /chat and /echo need a token") {
		t.Fatalf("banner:\n%s", banner.String())
	}
}
