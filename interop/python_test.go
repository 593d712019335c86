package interop_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// pythonPath is Debian's Python, which has python3-websockets (the python3
// first on PATH may be another one).
const pythonPath = "/usr/bin/python3"

// checkPython fails t when Debian's python3 or its websockets package is
// missing.
func checkPython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(pythonPath, "-c", "import websockets; print(websockets.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import websockets (%v: %s): install Debian's python3-websockets (`bash interop/setup.sh`)", pythonPath, err, out)
	}
	t.Logf("Python websockets %s", strings.TrimSpace(string(out)))
}

type pythonClose struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// pythonResult is what interop_peer.py client prints.
type pythonResult struct {
	Extensions  []string     `json:"extensions"`
	Subprotocol *string      `json:"subprotocol"`
	Type        string       `json:"type"`
	Equal       bool         `json:"equal"`
	Length      int          `json:"length"`
	CloseCode   int          `json:"close_code"`
	CloseReason string       `json:"close_reason"`
	Received    *pythonClose `json:"received"`
	Sent        *pythonClose `json:"sent"`
	Error       string       `json:"error"`
}

func runPythonClient(t *testing.T, url, name string, args ...any) pythonResult {
	t.Helper()
	argv := []string{"python/interop_peer.py", "client", url, name}
	if len(args) > 0 {
		b, _ := json.Marshal(args)
		argv = append(argv, string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr lockedBuffer
	cmd := exec.CommandContext(ctx, pythonPath, argv...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python %s: %v (stderr %s)", strings.Join(argv, " "), err, stderr.String())
	}
	var r pythonResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("python %s: decoding %q: %v", strings.Join(argv, " "), out, err)
	}
	return r
}

// TestPythonWebsocketsClientTalksToRallyServer runs Python websockets'
// client against rally.Server: connect, echo of text and binary (empty
// ones too), close codes and reasons from both sides, and invalid UTF-8
// from the server; with the server in each mode.
func TestPythonWebsocketsClientTalksToRallyServer(t *testing.T) {
	checkPython(t)
	inModes(t, func(t *testing.T, mode serverMode) {
		httpURL, ends := echoServer(t, mode)
		url := "ws" + strings.TrimPrefix(httpURL, "http") + "/ws"

		t.Run("connects without extensions or subprotocol", func(t *testing.T) {
			// websockets offers permessage-deflate; this Server declines it (off by
			// default, as npm ws; compression rows are in deflate_test.go).
			r := runPythonClient(t, url, "connect")
			if r.Error != "" || len(r.Extensions) != 0 || r.Subprotocol != nil || r.CloseCode != 1000 {
				t.Errorf("python saw %+v, want no extension, no subprotocol, closed with 1000", r)
			}
			serverEnd(t, ends)
		})
		for _, c := range []struct {
			kind, wantType string
			wantLen        int
		}{
			{"text", "str", 17}, // code points
			{"empty-text", "str", 0},
			{"binary", "bytes", 70000},
			{"empty-binary", "bytes", 0},
		} {
			t.Run("echoes "+c.kind, func(t *testing.T) {
				r := runPythonClient(t, url, "echo", c.kind)
				if r.Error != "" || r.Type != c.wantType || !r.Equal || r.Length != c.wantLen {
					t.Errorf("python saw %+v, want %s of length %d, equal to what it sent", r, c.wantType, c.wantLen)
				}
				serverEnd(t, ends)
			})
		}
		for _, c := range []struct {
			code   int
			reason string
		}{
			{1000, ""},
			{1001, "going away"},
			{3000, "adiós €"},
			{4999, strings.Repeat("r", 123)},
		} {
			t.Run(fmt.Sprintf("client closes with %d and a reason of %d bytes", c.code, len(c.reason)), func(t *testing.T) {
				r := runPythonClient(t, url, "close", c.code, c.reason)
				// rally echoes the client's code and reason.
				if r.Error != "" || r.CloseCode != c.code || r.CloseReason != c.reason {
					t.Errorf("python saw %+v, want %d %q echoed", r, c.code, c.reason)
				}
				if ce := serverEnd(t, ends); int(ce.Code) != c.code || ce.Reason != c.reason {
					t.Errorf("server saw %d %q, want %d %q", ce.Code, ce.Reason, c.code, c.reason)
				}
			})
		}
		for _, c := range []struct {
			name, command string
			received      pythonClose
			sent          pythonClose
			server        uint16
		}{
			{"server closes with 1000", "close 1000 bye", pythonClose{1000, "bye"}, pythonClose{1000, "bye"}, 1000},
			{"server closes with 4000 and a reason outside ASCII", "close 4000 adiós €", pythonClose{4000, "adiós €"}, pythonClose{4000, "adiós €"}, 4000},
			{"server sends text that is not UTF-8", "bad-utf8", pythonClose{}, pythonClose{1007, ""}, 1007},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := runPythonClient(t, url, "serverClose", c.command)
				got := fmt.Sprintf("received %v sent %v", deref(r.Received), deref(r.Sent))
				want := fmt.Sprintf("received %v sent %v", c.received, c.sent)
				if r.Error != "" || got != want {
					t.Errorf("python saw %s (error %q), want %s", got, r.Error, want)
				}
				if ce := serverEnd(t, ends); ce.Code != c.server {
					t.Errorf("server saw %v, want %d", ce, c.server)
				}
			})
		}
	})
}

func deref(c *pythonClose) pythonClose {
	if c == nil {
		return pythonClose{}
	}
	return *c
}

// TestRallyClientTalksToPythonWebsocketsServer dials a Python websockets
// server with rally: echo of text and binary, close codes and reasons from
// both sides.
func TestRallyClientTalksToPythonWebsocketsServer(t *testing.T) {
	checkPython(t)
	cmd := exec.Command(pythonPath, "python/interop_peer.py", "server")
	stdin, stdout, stderr := startPiped(t, cmd)
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		stdin.Close() // the server stops when stdin closes
		exited := make(chan struct{})
		go func() {
			for range lines {
			}
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(waitFor):
			cmd.Process.Kill()
			<-exited
		}
		cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Logf("python server stderr:\n%s", s)
		}
	})
	next := func() map[string]any {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("python server exited (stderr: %s)", stderr.String())
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("python server printed %q: %v", l, err)
			}
			return m
		case <-time.After(waitFor):
			t.Fatal("python server: no event")
		}
		return nil
	}
	port := int(next()["port"].(float64))
	url := fmt.Sprintf("ws://127.0.0.1:%d/", port)

	dial := func(t *testing.T) *rally.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		c, _, err := rally.Dial(ctx, url, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}

	for _, c := range []struct {
		typ rally.MessageType
		p   []byte
	}{
		{rally.Text, []byte("héllo wörld € 😀 ✓")},
		{rally.Text, nil},
		{rally.Binary, bytesOf(70000, 0xA5)},
		{rally.Binary, nil},
	} {
		t.Run(fmt.Sprintf("echoes %s of %d bytes", c.typ, len(c.p)), func(t *testing.T) {
			conn := dial(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := conn.Write(ctx, c.typ, c.p); err != nil {
				t.Fatal(err)
			}
			typ, p, err := conn.Read(ctx)
			if err != nil || typ != c.typ || string(p) != string(c.p) {
				t.Errorf("read %s of %d bytes (%v), want the %s sent", typ, len(p), err, c.typ)
			}
			ev := next()
			if ev["ev"] != "message" || ev["type"] != c.typ.String() || ev["data"] != hex.EncodeToString(c.p) {
				t.Errorf("python server saw %v", ev)
			}
			if err := conn.Close(rally.CloseNormal, ""); err != nil {
				t.Errorf("close: %v", err)
			}
			if ev := next(); ev["ev"] != "close" || ev["code"] != float64(1000) {
				t.Errorf("python server saw %v, want close 1000", ev)
			}
		})
	}

	for _, c := range []struct {
		code   uint16
		reason string
	}{
		{1000, "bye"},
		{1001, ""},
		{3000, "adiós €"},
		{4999, strings.Repeat("r", 123)},
	} {
		t.Run(fmt.Sprintf("rally closes with %d and a reason of %d bytes", c.code, len(c.reason)), func(t *testing.T) {
			conn := dial(t)
			if err := conn.Close(c.code, c.reason); err != nil {
				t.Errorf("close: %v", err)
			}
			ev := next()
			if ev["ev"] != "close" || ev["code"] != float64(c.code) || ev["reason"] != c.reason {
				t.Errorf("python server saw %v, want close %d %q", ev, c.code, c.reason)
			}
		})
	}

	for _, c := range []struct {
		code   uint16
		reason string
	}{
		{1000, "bye"},
		{4000, "adiós €"},
	} {
		t.Run(fmt.Sprintf("server closes with %d", c.code), func(t *testing.T) {
			conn := dial(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if err := conn.Write(ctx, rally.Text, []byte(fmt.Sprintf("close %d %s", c.code, c.reason))); err != nil {
				t.Fatal(err)
			}
			_, _, err := conn.Read(ctx)
			ce, ok := err.(*rally.CloseError)
			if !ok || ce.Code != c.code || ce.Reason != c.reason {
				t.Errorf("read returned %v, want close %d %q", err, c.code, c.reason)
			}
			if ev := next(); ev["ev"] != "close" || ev["code"] != float64(c.code) {
				t.Errorf("python server saw %v, want close %d", ev, c.code)
			}
		})
	}
}
