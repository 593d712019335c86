package interop_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// undiciPeer is interop-undici.mjs running against one echo server: one
// Node process for all the cases of a server mode, since starting Node
// and undici costs more than most cases take.
type undiciPeer struct {
	t       *testing.T
	stdin   io.WriteCloser
	stderr  *lockedBuffer
	results chan []byte
	exited  chan struct{}
	lastID  int
}

// startUndici starts interop-undici.mjs against the echo server at url
// and stops it when t ends.
func startUndici(t *testing.T, url string) *undiciPeer {
	t.Helper()
	cmd := exec.Command(nodePath(t), "interop-undici.mjs", url)
	cmd.Dir = nodeDir(t)
	stdin, stdout, stderr := startPiped(t, cmd)
	p := &undiciPeer{t: t, stdin: stdin, stderr: stderr, results: make(chan []byte, 64), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case p.results <- append([]byte(nil), sc.Bytes()...):
			default: // more lines than cases: the test fails on what it got
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // the peer exits once its last case is done
		select {
		case <-p.exited:
		case <-time.After(waitFor):
			cmd.Process.Kill()
		}
		cmd.Wait()
	})
	return p
}

// run runs one case of interop-undici.mjs in the peer and decodes what
// the client saw; t is the case's test. A late result of an earlier case
// that failed is passed over.
func (p *undiciPeer) run(t *testing.T, out any, name string, args ...any) {
	t.Helper()
	if args == nil {
		args = []any{}
	}
	p.lastID++
	id := p.lastID
	line, _ := json.Marshal(map[string]any{"id": id, "name": name, "args": args})
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		t.Fatalf("interop-undici.mjs: sending %s: %v (stderr %q)", line, err, p.stderr.String())
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-p.results:
			var got struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(r, &got); err != nil {
				t.Fatalf("interop-undici.mjs %s: decoding %q: %v", line, r, err)
			}
			if got.ID != id {
				continue
			}
			if err := json.Unmarshal(got.Result, out); err != nil {
				t.Fatalf("interop-undici.mjs %s: decoding %q: %v", line, got.Result, err)
			}
			return
		case <-p.exited:
			t.Fatalf("interop-undici.mjs exited during %s (stderr %q)", line, p.stderr.String())
		case <-deadline:
			t.Fatalf("interop-undici.mjs: no result for %s within 30s (stderr %q)", line, p.stderr.String())
		}
	}
}

// TestUndiciClientTalksToRallyServer runs undici 7's WebSocket client (the
// one behind Node.js's global WebSocket) against rally.Server: connect,
// text, empty text, binary and Blob echo, close codes and reasons from both
// sides, and invalid UTF-8 from the server; with the server in each mode.
func TestUndiciClientTalksToRallyServer(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		httpURL, ends := echoServer(t, mode)
		undici := startUndici(t, "ws"+strings.TrimPrefix(httpURL, "http")+"/ws")

		t.Run("connects without extensions or subprotocol", func(t *testing.T) {
			var r struct {
				ReadyState int        `json:"readyState"`
				Protocol   string     `json:"protocol"`
				Extensions string     `json:"extensions"`
				Close      closeEvent `json:"close"`
				Error      string     `json:"error"`
			}
			undici.run(t, &r, "connect")
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
				undici.run(t, &r, "echo", c.kind)
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
				undici.run(t, &r, "close", c.code, c.reason)
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
				undici.run(t, &r, "serverClose", c.command)
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
