package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/testcert"
)

// The servers of these tests accept WebSockets over HTTP/2 only if the
// test binary starts with GODEBUG=http2xconnect=1: it re-executes itself
// with it, as `rally serve` does.
func init() {
	if rally.CheckHTTP2() != nil && os.Getenv(reexecEnv) == "" {
		if exe, err := os.Executable(); err == nil {
			syscall.Exec(exe, os.Args, withXConnect(os.Environ()))
		}
	}
}

func TestCatHTTP2OpensTheWebSocketOverHTTP2(t *testing.T) {
	protos := make(chan int, 1)
	srv := httptest.NewUnstartedServer(&rally.Server{
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			protos <- r.ProtoMajor
			return nil, true
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			c.Write(context.Background(), typ, p)
			c.Close(rally.CloseNormal, "done")
		},
	})
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	defer srv.Close()
	status, out, errs := runCat(t, "", "--http2", "-x", "hello", "-w", "30", "ws://"+srv.Listener.Addr().String()+"/")
	if status != 0 || out != "hello\n" {
		t.Fatalf("rally cat --http2 = %d, stdout %q, stderr %q", status, out, errs)
	}
	if got := <-protos; got != 2 {
		t.Fatalf("the server saw HTTP/%d", got)
	}
}

func TestWithXConnectAppendsTheSettingToGODEBUG(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=/h"}, "GODEBUG=http2xconnect=1"},
		{[]string{"GODEBUG=madvdontneed=1", "HOME=/h"}, "GODEBUG=madvdontneed=1,http2xconnect=1"},
		{[]string{"GODEBUG="}, "GODEBUG=http2xconnect=1"},
	} {
		got := withXConnect(tc.env)
		if !slices.Contains(got, tc.want) || !slices.Contains(got, reexecEnv+"=1") {
			t.Errorf("withXConnect(%q) = %q, want %q and the marker", tc.env, got, tc.want)
		}
		if n := len(slices.DeleteFunc(slices.Clone(got), func(kv string) bool { return !strings.HasPrefix(kv, "GODEBUG=") })); n != 1 {
			t.Errorf("withXConnect(%q) has %d GODEBUG lines", tc.env, n)
		}
	}
}

// `rally serve`, started without the setting, re-executes itself with it:
// a client that requires HTTP/2 gets a WebSocket over h2c (--h2c) and over
// h2 (TLS), and /metrics counts them by protocol.
func TestServeAcceptsWebSocketsOverHTTP2StartedWithoutGODEBUG(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the rally binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rally")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	certFile, keyFile, roots := writeTestCert(t, dir)
	for _, tc := range []struct {
		name  string
		args  []string
		proto string
	}{
		{"h2c", []string{"--h2c"}, "h2c"},
		{"h2", []string{"--tls-cert", certFile, "--tls-key", keyFile}, "h2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, "RALLY_") {
					env = append(env, kv)
				}
			}
			cmd.Env = env
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
			}()
			// The banner's demo line has the scheme and the address.
			banner := bufio.NewReader(stdout)
			var m []string
			for m == nil {
				line, err := banner.ReadString('\n')
				if err != nil {
					t.Fatalf("reading the banner: %v", err)
				}
				m = regexp.MustCompile(`demo: +(https?)://(\S+)/`).FindStringSubmatch(line)
			}
			go io.Copy(io.Discard, banner)
			ws := "ws"
			if m[1] == "https" {
				ws = "wss"
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}
			defer tr.CloseIdleConnections()
			c, resp, err := rally.Dial(ctx, ws+"://"+m[2]+"/echo", &rally.DialOptions{
				HTTP2: rally.HTTP2Require, HTTP2Transport: tr, TLSConfig: &tls.Config{RootCAs: roots},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if resp.ProtoMajor != 2 || !c.HTTP2() {
				t.Fatalf("handshake over HTTP/%d", resp.ProtoMajor)
			}
			if err := c.Write(ctx, rally.Text, []byte("over h2")); err != nil {
				t.Fatal(err)
			}
			if _, p, err := c.Read(ctx); err != nil || string(p) != "over h2" {
				t.Fatalf("echo %q, %v", p, err)
			}
			hc := &http.Client{Transport: tr}
			mresp, err := hc.Get(m[1] + "://" + m[2] + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(mresp.Body)
			mresp.Body.Close()
			want := `rally_connections_by_protocol_total{protocol="` + tc.proto + `"} 1`
			if !strings.Contains(string(body), want) {
				t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(string(body), "by_protocol"))
			}
			c.Close(rally.CloseNormal, "")
		})
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// writeTestCert writes a certificate for 127.0.0.1 signed by a CA made
// for the test, and returns the files and the CA as a pool.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	c := testcert.Issue(t)
	return c.CertFile, c.KeyFile, c.Pool
}
