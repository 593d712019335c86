package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runUndici runs one case of interop-undici.mjs against the echo server at
// url and decodes what the client saw.
func runUndici(t *testing.T, url string, out any, name string, args ...any) {
	t.Helper()
	dir := nodeDir(t)
	argv := []string{"interop-undici.mjs", url, name}
	if len(args) > 0 {
		b, _ := json.Marshal(args)
		argv = append(argv, string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath(t), argv...)
	cmd.Dir = dir
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v (stdout %q, stderr %q)", strings.Join(argv, " "), err, stdout, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("node %s: decoding %q: %v", strings.Join(argv, " "), stdout, err)
	}
}

// TestUndiciClientTalksToRallyServer runs undici 7's WebSocket client (the
// one behind Node.js's global WebSocket) against rally.Server: connect,
// text, empty text, binary and Blob echo, close codes and reasons from both
// sides, and invalid UTF-8 from the server; with the server in each mode.
func TestUndiciClientTalksToRallyServer(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		httpURL, ends := echoServer(t, mode)
		url := "ws" + strings.TrimPrefix(httpURL, "http") + "/ws"

		t.Run("connects without extensions or subprotocol", func(t *testing.T) {
			var r struct {
				ReadyState int        `json:"readyState"`
				Protocol   string     `json:"protocol"`
				Extensions string     `json:"extensions"`
				Close      closeEvent `json:"close"`
				Error      string     `json:"error"`
			}
			runUndici(t, url, &r, "connect")
			if r.Error != "" || r.ReadyState != 1 || r.Protocol != "" || r.Extensions != "" {
				t.Errorf("undici saw %+v, want open (1) with no protocol and no extensions", r)
			}
			if r.Close != (closeEvent{Code: 1000, WasClean: true}) {
				t.Errorf("CloseEvent %+v, want 1000, clean", r.Close)
			}
			if ce := serverEnd(t, ends); ce.Code != 1000 {
				t.Errorf("server saw %v, want 1000", ce)
			}
		})

		for _, c := range []struct {
			kind     string
			wantType string
			wantLen  int
		}{
			{"text", "[object String]", 18},
			{"empty-text", "[object String]", 0},
			{"binary", "[object ArrayBuffer]", 70000},
			{"blob", "[object ArrayBuffer]", 300}, // binaryType is arraybuffer
		} {
			t.Run("echoes "+c.kind, func(t *testing.T) {
				var r struct {
					Type   string     `json:"type"`
					Equal  bool       `json:"equal"`
					Length int        `json:"length"`
					Close  closeEvent `json:"close"`
					Error  string     `json:"error"`
				}
				runUndici(t, url, &r, "echo", c.kind)
				if r.Error != "" || r.Type != c.wantType || !r.Equal || r.Length != c.wantLen {
					t.Errorf("undici saw %+v, want %s of length %d, equal to what it sent", r, c.wantType, c.wantLen)
				}
				if r.Close.Code != 1000 || !r.Close.WasClean {
					t.Errorf("CloseEvent %+v, want 1000, clean", r.Close)
				}
				serverEnd(t, ends)
			})
		}

		for _, c := range []struct {
			code   int
			reason string
			server uint16
		}{
			{1000, "", 1000},
			{1000, "done ✓", 1000},
			{3000, "registered", 3000},
			{4999, strings.Repeat("r", 123), 4999},
			{0, "", 1005},
		} {
			t.Run(fmt.Sprintf("client closes with %d and a reason of %d bytes", c.code, len(c.reason)), func(t *testing.T) {
				var r closeEvent
				runUndici(t, url, &r, "close", c.code, c.reason)
				// rally echoes the client's code and reason.
				want := closeEvent{Code: int(c.server), Reason: c.reason, WasClean: true}
				if r != want {
					t.Errorf("CloseEvent %+v, want %+v", r, want)
				}
				if ce := serverEnd(t, ends); ce.Code != c.server || ce.Reason != c.reason {
					t.Errorf("server saw %d %q, want %d %q", ce.Code, ce.Reason, c.server, c.reason)
				}
			})
		}

		for _, c := range []struct {
			name    string
			command string
			want    closeEvent
			server  uint16
		}{
			{"server closes with 1000", "close 1000 bye", closeEvent{Code: 1000, Reason: "bye", WasClean: true}, 1000},
			{"server closes with 4000 and a reason outside ASCII", "close 4000 adiós €", closeEvent{Code: 4000, Reason: "adiós €", WasClean: true}, 4000},
			{"server sends text that is not UTF-8", "bad-utf8", closeEvent{Code: 1006}, 1007},
		} {
			t.Run(c.name, func(t *testing.T) {
				var r closeEvent
				runUndici(t, url, &r, "serverClose", c.command)
				if r != c.want {
					t.Errorf("CloseEvent %+v, want %+v", r, c.want)
				}
				if ce := serverEnd(t, ends); ce.Code != c.server {
					t.Errorf("server saw %v, want %d", ce, c.server)
				}
			})
		}
	})
}
