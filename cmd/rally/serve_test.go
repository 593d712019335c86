package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServeHelpListsEveryFlagWithItsEnvironmentVariable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := out.String()
	listed := 0
	for _, g := range serveGroups {
		for _, f := range g.flags {
			listed++
			if !strings.Contains(help, "--"+f.name) || !strings.Contains(help, "env "+f.env) {
				t.Errorf("help does not show --%s with %s", f.name, f.env)
			}
		}
	}
	// Every flag the command defines is in a group.
	defined := strings.Count(help, "\n  --")
	if defined != listed {
		t.Errorf("help shows %d flags, the groups list %d", defined, listed)
	}
}

func TestServeRefusesABadEnvironmentValueWithoutRepeatingIt(t *testing.T) {
	t.Setenv("RALLY_MAX_CONNECTIONS", "s3cret-looking")
	var out, errOut bytes.Buffer
	if code := run([]string{"serve"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if msg := errOut.String(); !strings.Contains(msg, "RALLY_MAX_CONNECTIONS") || strings.Contains(msg, "s3cret-looking") {
		t.Fatalf("message %q, want one naming the variable but not its value", msg)
	}
}

func TestServeRefusesAPublicAddressWithoutAuth(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "--addr", "0.0.0.0:0"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "--insecure-no-auth") {
		t.Fatalf("message %q does not say how to allow it", errOut.String())
	}
}

// writeConfig writes a config file for rally serve and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rally.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeConfigFileSetsEveryFlag(t *testing.T) {
	file := writeConfig(t, `
# every flag of rally serve, none at its default
addr = "127.0.0.1:9999"
tls-cert = "c.pem"
tls-key = "k.pem"
h2c = true
reuse-port = true
event-loop = true
event-loops = 3
token-secret = "0123456789abcdef0123456789abcdef"
api-key = "key"
origins = ["a.example", "*.b.example"]
insecure-no-auth = true
max-connections = 7
handshake-rate = 2.5
rate-limit-loopback = true
trusted-proxies = "10.0.0.0/8,loopback"
max-subscriptions = -1
max-message-bytes = 1000
buffer-limit = 2000
header-timeout = "3s"
ping-interval = "4s"
idle-timeout = "-1s"
write-stall-timeout = "7s"
slow-subscriber-timeout = "3s"
subscriber-send-buffer = "32KiB"
shutdown-timeout = "6s"
node = "n1"
nats = "nats://127.0.0.1:4222"
embedded-nats = "127.0.0.1:4223"
nats-cluster = "127.0.0.1:6222"
nats-routes = "nats://127.0.0.1:6223,nats://127.0.0.1:6224"
log-format = "json"
log-level = "debug"
pusher-app = ["1:k1:s1", "2:k2:s2:max-connections=5:client-event-rate=2"]
pusher-webhook = ["2=http://127.0.0.1:1/hook"]
`+protectConfigFile+historyConfigFile)
	var out, errOut bytes.Buffer
	s, status := parseServe([]string{"--config", file}, &out, &errOut)
	if status >= 0 {
		t.Fatalf("exit %d: %s", status, errOut.String())
	}
	c := s.cfg
	checks := map[string]bool{
		"addr":                    c.Addr == "127.0.0.1:9999",
		"tls-cert":                c.TLSCert == "c.pem",
		"tls-key":                 c.TLSKey == "k.pem",
		"h2c":                     c.H2C,
		"reuse-port":              c.ReusePort,
		"event-loop":              c.EventLoop,
		"event-loops":             c.EventLoops == 3,
		"token-secret":            c.TokenSecret == "0123456789abcdef0123456789abcdef",
		"api-key":                 c.APIKey == "key",
		"origins":                 strings.Join(c.Origins, " ") == "a.example *.b.example",
		"insecure-no-auth":        c.InsecureNoAuth,
		"max-connections":         c.MaxConnections == 7,
		"handshake-rate":          c.HandshakeRate == 2.5,
		"rate-limit-loopback":     c.RateLimitLoopback,
		"trusted-proxies":         c.TrustedProxies == "10.0.0.0/8,loopback",
		"max-subscriptions":       c.MaxSubscriptions == -1,
		"max-message-bytes":       c.MaxMessageBytes == 1000,
		"buffer-limit":            c.BufferLimit == 2000,
		"header-timeout":          c.HeaderReadTimeout == 3*time.Second,
		"ping-interval":           c.PingInterval == 4*time.Second,
		"idle-timeout":            c.IdleTimeout == -time.Second,
		"write-stall-timeout":     c.WriteStallTimeout == 7*time.Second,
		"slow-subscriber-timeout": c.SlowSubscriberTimeout == 3*time.Second,
		"subscriber-send-buffer":  c.SubscriberSendBuffer == 32<<10,
		"shutdown-timeout":        c.ShutdownTimeout == 6*time.Second,
		"node":                    c.Node == "n1",
		"nats":                    c.NATS.URL == "nats://127.0.0.1:4222",
		"embedded-nats":           c.NATS.Embedded == "127.0.0.1:4223",
		"nats-cluster":            c.NATS.Cluster == "127.0.0.1:6222",
		"nats-routes":             strings.Join(c.NATS.Routes, " ") == "nats://127.0.0.1:6223 nats://127.0.0.1:6224",
		"log-format":              s.logFormat == "json",
		"log-level":               s.logLevel == slog.LevelDebug,
		"pusher-app": len(c.PusherApps) == 2 && c.PusherApps[0].Key == "k1" && c.PusherApps[0].Secret == "s1" &&
			c.PusherApps[1].MaxConnections == 5 && c.PusherApps[1].ClientEventRate == 2,
		"pusher-webhook": len(c.PusherApps) == 2 && slices.Equal(c.PusherApps[1].Webhooks, []string{"http://127.0.0.1:1/hook"}),
	}
	maps.Copy(checks, protectConfigChecks(s))
	maps.Copy(checks, historyConfigChecks(s))
	for _, g := range serveGroups {
		for _, f := range g.flags {
			if f.name == "config" {
				continue
			}
			ok, tested := checks[f.name]
			switch {
			case !tested:
				t.Errorf("--%s is not tested here: add it to the file and the checks", f.name)
			case !ok:
				t.Errorf("--%s was not set from the config file: %+v", f.name, c)
			}
		}
	}
}

func TestServeTakesTheFlagOverTheEnvironmentOverTheConfigFile(t *testing.T) {
	file := writeConfig(t, "max-connections = 5\n")
	for _, tc := range []struct {
		env  string
		args []string
		want int
	}{
		{"", nil, 5},
		{"6", nil, 6},
		{"6", []string{"--max-connections", "7"}, 7},
		{"", []string{"--max-connections=7"}, 7},
	} {
		t.Setenv("RALLY_MAX_CONNECTIONS", tc.env)
		t.Setenv("RALLY_CONFIG", file)
		var out, errOut bytes.Buffer
		s, status := parseServe(tc.args, &out, &errOut)
		if status >= 0 || s.cfg.MaxConnections != tc.want {
			t.Errorf("env %q, args %q: exit %d, max-connections %v, want %d (%s)", tc.env, tc.args, status, s, tc.want, errOut.String())
		}
	}
}

func TestServeRefusesAConfigFileWithAnUnknownKeyOrABadValueInOneLine(t *testing.T) {
	for _, tc := range []struct{ text, says string }{
		{"max-conections = 5\n", `unknown key "max-conections"`},
		{"[limits]\nmax-connections = 5\n", `unknown key "limits"`},
		{"config = \"other.toml\"\n", `unknown key "config"`},
		{"idle-timeout = 90\n", `idle-timeout: a duration is a string such as "30s"`},
		{"max-message-bytes = -5\n", "--max-message-bytes is -5"},
		{"token-secret = 12345678901234567890123456789012345\n", "token-secret"},
		{"api-key = \"s3cret\"\nmax-connections = \"s3cret\"\n", "max-connections"},
		{"addr = \n", "line 1"},
	} {
		file := writeConfig(t, tc.text)
		args := []string{"serve", "--config", file}
		status, stdout, stderr := runRally(t, nil, args...)
		oneLine(t, args, status, stdout, stderr, "rally serve")
		if !strings.Contains(stderr, tc.says) || strings.Contains(stderr, "s3cret") || strings.Count(stderr, "--help") != 1 {
			t.Errorf("config %q: stderr %q, want it to say %q without any value", tc.text, stderr, tc.says)
		}
	}
}

func TestServeReusePortWithoutAFixedPortIsAUsageError(t *testing.T) {
	args := []string{"serve", "--reuse-port", "--addr", "127.0.0.1:0"}
	status, stdout, stderr := runRally(t, nil, args...)
	oneLine(t, args, status, stdout, stderr, "rally serve")
	if !strings.Contains(stderr, "--reuse-port needs a fixed port") {
		t.Errorf("stderr %q does not say why", stderr)
	}
}

func TestServeEventLoopAndReusePortComeFromTheEnvironment(t *testing.T) {
	t.Setenv("RALLY_EVENT_LOOP", "true")
	t.Setenv("RALLY_REUSE_PORT", "1")
	var out, errOut bytes.Buffer
	s, status := parseServe([]string{"--addr", "127.0.0.1:9999"}, &out, &errOut)
	if status >= 0 || !s.cfg.EventLoop || !s.cfg.ReusePort {
		t.Fatalf("exit %d (%s), want both set: %+v", status, errOut.String(), s)
	}
}

// Every byte-size flag of rally serve takes the same sizes, from the
// command line, the environment and the config file alike.
func TestServeSizeFlagsTakeUnitsFromEverySource(t *testing.T) {
	sizes := func(s *serveSetup) map[string]int64 {
		return map[string]int64{
			"max-message-bytes":      int64(s.cfg.MaxMessageBytes),
			"buffer-limit":           int64(s.cfg.BufferLimit),
			"memory-limit":           s.cfg.Protection.MemoryLimit,
			"max-header-bytes":       int64(s.cfg.Protection.MaxHeaderBytes),
			"echo-max-message-bytes": int64(s.cfg.Protection.EchoMaxMessageBytes),
		}
	}
	given := map[string]struct {
		value string
		want  int64
	}{
		"max-message-bytes":      {"64KiB", 64 << 10},
		"buffer-limit":           {"1MiB", 1 << 20},
		"memory-limit":           {"512MB", 512e6},
		"max-header-bytes":       {"32768", 32 << 10},
		"echo-max-message-bytes": {"16MiB", 16 << 20},
	}
	for name, g := range given {
		env := "RALLY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		for _, src := range []struct {
			how  string
			args func(t *testing.T) []string
		}{
			{"flag", func(*testing.T) []string { return []string{"--" + name, g.value} }},
			{"env", func(t *testing.T) []string { t.Setenv(env, g.value); return nil }},
			{"file", func(t *testing.T) []string {
				return []string{"--config", writeConfig(t, fmt.Sprintf("%s = %q\n", name, g.value))}
			}},
		} {
			t.Run(name+"/"+src.how, func(t *testing.T) {
				var out, errOut bytes.Buffer
				s, status := parseServe(src.args(t), &out, &errOut)
				if status >= 0 {
					t.Fatalf("%s %s: exit %d: %s", src.how, g.value, status, errOut.String())
				}
				if got := sizes(s)[name]; got != g.want {
					t.Errorf("%s %s: %d, want %d", src.how, g.value, got, g.want)
				}
			})
		}
	}
	t.Run("buffer-limit -1 is still no limit", func(t *testing.T) {
		var out, errOut bytes.Buffer
		s, status := parseServe([]string{"--buffer-limit", "-1"}, &out, &errOut)
		if status >= 0 || s.cfg.BufferLimit != -1 {
			t.Fatalf("exit %d: %s", status, errOut.String())
		}
	})
}

// --help and docs/SERVE.md say the same of what the code does: the
// token is needed on /ws, /chat and /echo (server tests pin that), and
// handshakes get 503 past 90% of --memory-limit (rally.MemoryBudget).
func TestServeHelpAndTheDocsAgreeOnTokensAndTheMemoryLimit(t *testing.T) {
	var help bytes.Buffer
	if code := run([]string{"serve", "--help"}, &help, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	doc, err := os.ReadFile("../../docs/SERVE.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, tc := range []struct{ text, says string }{
		{flat(help.String()), "/ws, /chat and /echo clients must present"},
		{flat(help.String()), "past 90% of it new WebSocket handshakes get 503"},
		{flat(string(doc)), "`/ws`, `/chat` and `/echo` need a JWT"},
		{flat(string(doc)), "past 90% of it, or the process holds all of it, new WebSocket handshakes get 503"},
	} {
		if !strings.Contains(tc.text, tc.says) {
			t.Errorf("does not say %q", tc.says)
		}
	}
}

func TestServePusherAppsFromFlagsAndEnvironment(t *testing.T) {
	var out, errOut bytes.Buffer
	s, status := parseServe([]string{"--pusher-app", "a:ka:sa", "--pusher-app", "b:kb:sb", "--pusher-webhook", "b=https://example.com/h"}, &out, &errOut)
	if status >= 0 {
		t.Fatalf("exit %d: %s", status, errOut.String())
	}
	if len(s.cfg.PusherApps) != 2 || s.cfg.PusherApps[1].ID != "b" || len(s.cfg.PusherApps[1].Webhooks) != 1 {
		t.Fatalf("apps %+v", s.cfg.PusherApps)
	}
	t.Setenv("RALLY_PUSHER_APPS", "c:kc:sc,d:kd:sd")
	s, status = parseServe(nil, &out, &errOut)
	if status >= 0 || len(s.cfg.PusherApps) != 2 || s.cfg.PusherApps[1].Key != "kd" {
		t.Fatalf("from the environment: exit %d, %s", status, errOut.String())
	}
	for _, bad := range [][]string{{"--pusher-app", "a:ka"}, {"--pusher-app", "a:ka:sa:nolimit=1"}, {"--pusher-webhook", "x=http://h"}} {
		errOut.Reset()
		if _, status := parseServe(bad, &out, &errOut); status != 2 {
			t.Errorf("%v: exit %d, want 2", bad, status)
		}
	}
}
