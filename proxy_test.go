package rally

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rallyws/rally/internal/testcert"
)

func TestProxyFromEnvironmentFollowsNetHTTPsRules(t *testing.T) {
	const p = "http://proxy.test:3128"
	for _, tc := range []struct {
		name   string
		env    map[string]string
		target string
		want   string // "" for a direct connection
	}{
		{"ws takes HTTP_PROXY", map[string]string{"HTTP_PROXY": p}, "http://example.com/", p},
		{"wss takes HTTPS_PROXY", map[string]string{"HTTPS_PROXY": p, "HTTP_PROXY": "http://other:1"}, "https://example.com/", p},
		{"wss does not fall back to HTTP_PROXY", map[string]string{"HTTP_PROXY": p}, "https://example.com/", ""},
		{"lower case name", map[string]string{"http_proxy": p}, "http://example.com/", p},
		{"upper case wins", map[string]string{"HTTP_PROXY": p, "http_proxy": "http://other:1"}, "http://example.com/", p},
		{"value without a scheme is http", map[string]string{"HTTP_PROXY": "proxy.test:3128"}, "http://example.com/", p},
		{"credentials kept", map[string]string{"HTTP_PROXY": "http://u:pw@proxy.test:3128"}, "http://example.com/", "http://u:pw@proxy.test:3128"},
		{"unparseable value is ignored", map[string]string{"HTTP_PROXY": "http://proxy.test:3128/%zz"}, "http://example.com/", ""},
		{"no variable", nil, "http://example.com/", ""},
		{"localhost never", map[string]string{"HTTP_PROXY": p}, "http://localhost:8080/", ""},
		{"127.0.0.1 never", map[string]string{"HTTP_PROXY": p}, "http://127.0.0.1:8080/", ""},
		{"all of 127/8 never", map[string]string{"HTTP_PROXY": p}, "http://127.1.2.3/", ""},
		{"::1 never", map[string]string{"HTTP_PROXY": p}, "http://[::1]:8080/", ""},
		{"a name that is not localhost is proxied", map[string]string{"HTTP_PROXY": p}, "http://localhost.example/", p},
		{"NO_PROXY *", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "*"}, "http://example.com/", ""},
		{"NO_PROXY domain matches itself", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "example.com"}, "http://example.com/", ""},
		{"NO_PROXY domain matches subdomains", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "example.com"}, "http://a.b.example.com/", ""},
		{"NO_PROXY domain is no suffix of another name", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "example.com"}, "http://notexample.com/", p},
		{"NO_PROXY leading dot: subdomains only", map[string]string{"HTTP_PROXY": p, "NO_PROXY": ".example.com"}, "http://example.com/", p},
		{"NO_PROXY leading dot matches a subdomain", map[string]string{"HTTP_PROXY": p, "NO_PROXY": ".example.com"}, "http://a.example.com/", ""},
		{"NO_PROXY *. like a leading dot", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "*.example.com"}, "http://example.com/", p},
		{"NO_PROXY list with spaces and case", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "other.org, EXAMPLE.com "}, "http://www.Example.COM/", ""},
		{"NO_PROXY port must match", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "example.com:8080"}, "http://example.com/", p},
		{"NO_PROXY port matches", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "example.com:8080"}, "http://example.com:8080/", ""},
		{"NO_PROXY port matches the scheme's default", map[string]string{"HTTPS_PROXY": p, "NO_PROXY": "example.com:443"}, "https://example.com/", ""},
		{"NO_PROXY IP", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "10.1.2.3"}, "http://10.1.2.3:9000/", ""},
		{"NO_PROXY IP elsewhere", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "10.1.2.4"}, "http://10.1.2.3/", p},
		{"NO_PROXY name matches an IP's tail as in net/http", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "2.3"}, "http://10.1.2.3/", ""},
		{"NO_PROXY CIDR", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "10.0.0.0/8"}, "http://10.200.0.1/", ""},
		{"NO_PROXY CIDR elsewhere", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "10.0.0.0/8"}, "http://11.0.0.1/", p},
		{"NO_PROXY IPv6 with port", map[string]string{"HTTP_PROXY": p, "NO_PROXY": "[2001:db8::1]:80"}, "http://[2001:db8::1]/", ""},
		{"no_proxy lower case", map[string]string{"HTTP_PROXY": p, "no_proxy": "example.com"}, "http://example.com/", ""},
		{"CGI with HTTPS only", map[string]string{"HTTPS_PROXY": p, "REQUEST_METHOD": "GET"}, "https://example.com/", p},
		{"ALL_PROXY when the scheme's variable is empty", map[string]string{"ALL_PROXY": "socks5h://s.test:1080"}, "https://example.com/", "socks5h://s.test:1080"},
		{"all_proxy lower case", map[string]string{"all_proxy": "socks5://s.test"}, "http://example.com/", "socks5://s.test"},
		{"the scheme's variable wins over ALL_PROXY", map[string]string{"HTTP_PROXY": p, "ALL_PROXY": "socks5://s.test"}, "http://example.com/", p},
		{"NO_PROXY applies to ALL_PROXY", map[string]string{"ALL_PROXY": p, "NO_PROXY": "example.com"}, "http://example.com/", ""},
		{"ALL_PROXY never for loopback", map[string]string{"ALL_PROXY": p}, "http://127.0.0.1/", ""},
		{"ALL_PROXY in a CGI program (no request header sets it)", map[string]string{"ALL_PROXY": p, "REQUEST_METHOD": "GET"}, "http://example.com/", p},
		{"an https proxy", map[string]string{"HTTPS_PROXY": "https://u:pw@proxy.test"}, "https://example.com/", "https://u:pw@proxy.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, err := url.Parse(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			got, err := proxyFromEnvironment(func(k string) string { return tc.env[k] }, target)
			if err != nil {
				t.Fatal(err)
			}
			s := ""
			if got != nil {
				s = got.String()
			}
			if s != tc.want {
				t.Fatalf("proxy %q, want %q", s, tc.want)
			}
		})
	}
}

func TestProxyFromEnvironmentRefusesHTTPProxyInACGIProgram(t *testing.T) {
	env := map[string]string{"HTTP_PROXY": "http://u:SECRET@proxy.test", "REQUEST_METHOD": "GET"}
	target, _ := url.Parse("http://example.com/")
	p, err := proxyFromEnvironment(func(k string) string { return env[k] }, target)
	if p != nil || err == nil || !strings.Contains(err.Error(), "CGI") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("proxy %v, error %v, want a refusal that shows no credentials", p, err)
	}
}

// daemon is a proxy server the client is tested against, run from its
// Debian package's binary until the test ends, with its log kept.
type daemon struct {
	addr  string
	ended chan struct{} // closed when its output ends
	mu    sync.Mutex
	log   []string
	more  chan struct{} // closed, and replaced, at each line logged
}

// logged reports whether a line of the daemon's log contains s.
func (d *daemon) logged(s string) bool {
	return d.loggedLine(func(l string) bool { return strings.Contains(l, s) })
}

// loggedLine reports whether a line of the daemon's log is one match
// wants.
func (d *daemon) loggedLine(match func(string) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(d.log, match)
}

// waitLogged waits until a line of the daemon's log is one match wants,
// for a daemon that logs an event after it has passed on its bytes; it
// gives up (false) when the daemon's output ends or after testTimeout.
func (d *daemon) waitLogged(match func(string) bool) bool {
	timeout := time.After(testTimeout)
	for {
		d.mu.Lock()
		more := d.more
		d.mu.Unlock()
		if d.loggedLine(match) {
			return true
		}
		select {
		case <-more:
		case <-d.ended:
			return d.loggedLine(match)
		case <-timeout:
			return false
		}
	}
}

// findBinary returns the path of a proxy server's binary: the first of
// paths that exists, else name on PATH. When there is none it fails the
// test (make test installs them through interop/setup.sh: these tests do
// not skip), except under -short (make check), where it skips.
func findBinary(t *testing.T, name, pkg string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s is not installed (looked in %v and PATH): run `apt-get install -y %s` (make test installs it through interop/setup.sh)", name, paths, pkg)
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// startDaemon runs a proxy server on a free loopback port until the test
// ends. args builds its command line (and writes any configuration it
// needs) for a port; the daemon is ready when a line of its output
// contains ready, or, when ready is "", when its port accepts a
// connection.
func startDaemon(t *testing.T, args func(port int) []string, ready string) *daemon {
	t.Helper()
	var lastErr error
	for range 3 { // another process may take the free port first
		d, err := runDaemon(t, args, ready)
		if err == nil {
			return d
		}
		lastErr = err
	}
	t.Fatalf("starting %s: %v", args(0)[0], lastErr)
	return nil
}

func runDaemon(t *testing.T, args func(port int) []string, ready string) (*daemon, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	argv := args(port)
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	scanned := make(chan struct{})
	d := &daemon{addr: fmt.Sprintf("127.0.0.1:%d", port), ended: scanned, more: make(chan struct{})}
	announced := make(chan struct{})
	go func() {
		defer close(scanned)
		s := bufio.NewScanner(out)
		said := false
		for s.Scan() {
			d.mu.Lock()
			d.log = append(d.log, s.Text())
			close(d.more)
			d.more = make(chan struct{})
			d.mu.Unlock()
			if !said && ready != "" && strings.Contains(s.Text(), ready) {
				said = true
				close(announced)
			}
		}
	}()
	stop := func() {
		// SIGTERM, so that a daemon that forks (danted) stops its
		// children, which share its output, before it exits.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-scanned:
		case <-time.After(testTimeout):
			cmd.Process.Kill()
			<-scanned
		}
		cmd.Wait()
	}
	fail := func(why string) (*daemon, error) {
		stop()
		d.mu.Lock()
		defer d.mu.Unlock()
		return nil, fmt.Errorf("%s %s:\n%s", argv[0], why, strings.Join(d.log, "\n"))
	}
	if ready == "" {
		// The daemon says nothing when it listens: its port accepting a
		// connection is the event (each refused attempt fails at once).
		deadline := time.Now().Add(testTimeout)
		for {
			c, err := net.DialTimeout("tcp", d.addr, testTimeout)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-scanned:
				return fail("exited before listening")
			default:
			}
			if time.Now().After(deadline) {
				return fail(fmt.Sprintf("did not listen within %v", testTimeout))
			}
			runtime.Gosched()
		}
	} else {
		select {
		case <-announced:
		case <-scanned:
			return fail("exited before listening")
		case <-time.After(testTimeout):
			return fail(fmt.Sprintf("did not listen within %v", testTimeout))
		}
	}
	t.Cleanup(stop)
	return d, nil
}

// writeConf writes lines as a configuration file in the test's temporary
// directory and returns its path.
func writeConf(t *testing.T, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startTinyproxy runs tinyproxy (https://tinyproxy.github.io), the real
// HTTP proxy the client is tested against, with a generated
// configuration plus extra lines.
func startTinyproxy(t *testing.T, extra ...string) *daemon {
	t.Helper()
	bin := findBinary(t, "tinyproxy", "tinyproxy-bin", "/usr/bin/tinyproxy", "/usr/sbin/tinyproxy")
	return startDaemon(t, func(port int) []string {
		// No ConnectPort line: CONNECT may reach any port.
		conf := writeConf(t, "tinyproxy.conf", append([]string{
			fmt.Sprintf("Port %d", port),
			"Listen 127.0.0.1",
			"Timeout 30",
			"LogLevel Info",
			"MaxClients 32",
			"Allow 127.0.0.1",
			"DisableViaHeader Yes",
		}, extra...)...)
		return []string{bin, "-d", "-c", conf}
	}, "Accepting connections")
}

// echoServer is a WebSocket echo server over Accept; it reports the
// remote address of each connection it accepts.
func echoServer(t *testing.T, tlsServer bool) (*httptest.Server, <-chan string) {
	t.Helper()
	remotes := make(chan string, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, nil)
		if err != nil {
			return
		}
		remotes <- c.RemoteAddr().String()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if c.Write(ctx, typ, p) != nil {
				return
			}
		}
	}))
	if tlsServer {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, remotes
}

// echoOnce sends msg on c and wants it back.
func echoOnce(t *testing.T, c *Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.Write(ctx, Text, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if typ, p, err := c.Read(ctx); err != nil || typ != Text || string(p) != msg {
		t.Fatalf("echo: %v %q %v, want %q", typ, p, err, msg)
	}
}

// proxyTo returns a Proxy option that always picks u.
func proxyTo(t *testing.T, u string) func(*http.Request) (*url.URL, error) {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return http.ProxyURL(pu)
}

func TestDialGoesThroughTinyproxyWhenAProxyIsGivenEvenForLoopback(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[secure], func(t *testing.T) {
			proxy := startTinyproxy(t)
			srv, remotes := echoServer(t, secure)
			opts := &DialOptions{Proxy: proxyTo(t, "http://"+proxy.addr), HandshakeTimeout: testTimeout}
			u := "ws://" + srv.Listener.Addr().String() + "/echo"
			if secure {
				opts.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
				u = "wss://" + srv.Listener.Addr().String() + "/echo"
			}
			c, _ := dialOK(t, u, opts)
			echoOnce(t, c, "through the tunnel")
			// Through a proxy, the server's peer is the proxy's own
			// connection, not the client's.
			if remote := <-remotes; remote == c.LocalAddr().String() {
				t.Fatalf("the server saw the client's own address %s: no proxy in between", remote)
			}
			if !proxy.logged("CONNECT") {
				t.Fatalf("tinyproxy logged no CONNECT")
			}
		})
	}
}

func TestDialSendsProxyCredentialsToTinyproxy(t *testing.T) {
	proxy := startTinyproxy(t, "BasicAuth alice s3cr3t-pw")
	srv, _ := echoServer(t, false)
	u := "ws://" + srv.Listener.Addr().String() + "/"

	c, _ := dialOK(t, u, &DialOptions{Proxy: proxyTo(t, "http://alice:s3cr3t-pw@"+proxy.addr)})
	echoOnce(t, c, "authorized")

	for _, userinfo := range []string{"alice:wrong-SECRET@", ""} {
		_, resp, err := Dial(context.Background(), u, &DialOptions{Proxy: proxyTo(t, "http://"+userinfo+proxy.addr), HandshakeTimeout: testTimeout})
		// tinyproxy refuses CONNECT with 401 and WWW-Authenticate (407
		// and Proxy-Authenticate are the RFC's); either way the caller
		// gets the proxy's own answer.
		var he *HandshakeError
		if !errors.As(err, &he) || resp == nil || he.Status != resp.StatusCode || he.Response != resp || !strings.HasPrefix(resp.Header.Get("Server"), "tinyproxy") {
			t.Fatalf("Dial with proxy credentials %q: %v (response %v), want the proxy's refusal", userinfo, err, resp)
		}
		if s := resp.StatusCode; s != 401 && s != 407 {
			t.Fatalf("proxy answered %d, want 401 or 407", s)
		}
		want := fmt.Sprintf("proxy http://%s answered CONNECT with %d", strings.Replace(userinfo, "alice:wrong-SECRET", "xxxxx", 1)+proxy.addr, resp.StatusCode)
		if strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q, want %q and no credentials", err, want)
		}
	}
}

// fakeProxy is a CONNECT proxy in Go that tunnels every request to the
// address route returns for the requested host, so that a test can name a
// non-loopback host and still stay on loopback. It reports each CONNECT
// request it reads.
func fakeProxy(t *testing.T, route func(host string) string) (string, <-chan *http.Request) {
	t.Helper()
	requests := make(chan *http.Request, 16)
	addr := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		requests <- r
		up, err := net.DialTimeout("tcp", route(r.Host), testTimeout)
		if err != nil {
			nc.Write([]byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"))
			return
		}
		defer up.Close()
		nc.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		done := make(chan struct{})
		go func() {
			io.Copy(up, br)
			up.(*net.TCPConn).CloseWrite()
			close(done)
		}()
		io.Copy(nc, up)
		nc.Close()
		<-done
	})
	return addr, requests
}

func TestDialTakesTheProxyFromTheEnvironmentButNeverForLoopback(t *testing.T) {
	srv, remotes := echoServer(t, false)
	tlsSrv, tlsRemotes := echoServer(t, true)
	proxyAddr, connects := fakeProxy(t, func(host string) string {
		if strings.HasPrefix(host, "secure.rally.test:") {
			return tlsSrv.Listener.Addr().String()
		}
		return srv.Listener.Addr().String()
	})
	t.Setenv("HTTP_PROXY", "http://env-user:env-pw@"+proxyAddr)
	t.Setenv("HTTPS_PROXY", proxyAddr)
	t.Setenv("NO_PROXY", "direct.rally.test")

	// A name that is not loopback goes through HTTP_PROXY, with the
	// variable's credentials.
	c, _ := dialOK(t, "ws://echo.rally.test:9/x", nil)
	echoOnce(t, c, "via env")
	r := <-connects
	if r.Method != "CONNECT" || r.Host != "echo.rally.test:9" || r.Header.Get("Proxy-Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("env-user:env-pw")) {
		t.Fatalf("proxy got %s %s with %v", r.Method, r.Host, r.Header)
	}
	<-remotes

	// wss goes through HTTPS_PROXY, and TLS runs through the tunnel with
	// the server's name.
	cfg := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "example.com" // httptest's certificate
	c, _ = dialOK(t, "wss://secure.rally.test/x", &DialOptions{TLSConfig: cfg})
	echoOnce(t, c, "via env over tls")
	if r := <-connects; r.Host != "secure.rally.test:443" || r.Header.Get("Proxy-Authorization") != "" {
		t.Fatalf("proxy got %s with %v, want secure.rally.test:443 without credentials", r.Host, r.Header)
	}
	<-tlsRemotes

	// Loopback is never proxied by the environment.
	c, _ = dialOK(t, "ws://"+srv.Listener.Addr().String()+"/", nil)
	if remote := <-remotes; remote != c.LocalAddr().String() {
		t.Fatalf("server saw %s, want the client's own %s (a direct connection)", remote, c.LocalAddr())
	}
	// Neither is a NO_PROXY host: the dial goes to it directly.
	var dialed string
	_, _, err := Dial(context.Background(), "ws://direct.rally.test:7/", &DialOptions{
		NetDialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialed = addr
			return nil, errors.New("stop")
		},
	})
	if dialed != "direct.rally.test:7" || err == nil {
		t.Fatalf("dialed %q (%v), want direct.rally.test:7", dialed, err)
	}
	select {
	case r := <-connects:
		t.Fatalf("the proxy got %s %s for a direct connection", r.Method, r.Host)
	default:
	}

	// An explicit Proxy returning nil ignores the environment.
	dialed = ""
	Dial(context.Background(), "ws://echo.rally.test:9/", &DialOptions{
		Proxy: func(*http.Request) (*url.URL, error) { return nil, nil },
		NetDialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialed = addr
			return nil, errors.New("stop")
		},
	})
	if dialed != "echo.rally.test:9" {
		t.Fatalf("dialed %q, want echo.rally.test:9 directly", dialed)
	}
}

func TestDialProxyFunctionGetsTheURLsHTTPForm(t *testing.T) {
	var got []string
	for _, u := range []string{"ws://a.test/p?q=1", "wss://user:pw@b.test:444/"} {
		Dial(context.Background(), u, &DialOptions{
			Proxy: func(r *http.Request) (*url.URL, error) {
				got = append(got, r.Method+" "+r.URL.String())
				return nil, errors.New("stop")
			},
		})
	}
	want := []string{"GET http://a.test/p?q=1", "GET https://b.test:444/"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Proxy saw %q, want %q", got, want)
	}
}

func TestDialThroughAProxyToAClosedPortFailsOnce(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	c, resp, err := Dial(context.Background(), "ws://rally.test/", &DialOptions{Proxy: proxyTo(t, "http://u:SECRET@"+addr), HandshakeTimeout: testTimeout})
	if c != nil || resp != nil || err == nil {
		t.Fatalf("Dial = %v, %v, %v, want only an error", c, resp, err)
	}
	msg := err.Error()
	want := "rally: dial ws://rally.test/: connecting to proxy http://xxxxx@" + addr + ": "
	if !strings.HasPrefix(msg, want) || strings.Count(msg, "rally:") != 1 || strings.Contains(msg, "SECRET") {
		t.Fatalf("Dial error %q, want one error starting %q", msg, want)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("Dial error %v does not wrap the *net.OpError", err)
	}
}

func TestDialRefusesProxiesItCannotUse(t *testing.T) {
	for _, tc := range []struct{ proxy, want string }{
		{"socks4://u:SECRET@127.0.0.1:1080", `proxy socks4://xxxxx@127.0.0.1:1080: scheme "socks4" is not supported, only http, https, socks5 and socks5h`},
		{"ftp://u:SECRET@127.0.0.1:3128", `scheme "ftp" is not supported`},
		{"socks5h://u:SECRET@", "has no host"},
		{"http://u:SECRET@", "has no host"},
	} {
		dialed := false
		_, _, err := Dial(context.Background(), "ws://rally.test/", &DialOptions{
			Proxy: proxyTo(t, tc.proxy),
			NetDialContext: func(context.Context, string, string) (net.Conn, error) {
				dialed = true
				return nil, errors.New("dialed")
			},
		})
		if err == nil || dialed || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("proxy %s: Dial error %v (dialed %v), want %q before dialing", tc.proxy, err, dialed, tc.want)
		}
	}
}

func TestOpenTunnelKeepsBytesThatCameWithTheProxysAnswer(t *testing.T) {
	client, proxy := net.Pipe()
	defer client.Close()
	defer proxy.Close()
	heads := make(chan string, 1)
	go func() {
		br := bufio.NewReader(proxy)
		r, err := http.ReadRequest(br)
		if err != nil {
			heads <- err.Error()
			return
		}
		heads <- r.Method + " " + r.RequestURI + " " + r.Host + " " + r.Header.Get("Proxy-Authorization")
		proxy.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\nearly bytes"))
	}()
	client.SetDeadline(time.Now().Add(testTimeout))
	pu, _ := url.Parse("http://a%20b:c@proxy.test")
	nc, resp, err := openTunnel(client, pu, "rally.test:443")
	if err != nil || resp != nil {
		t.Fatalf("openTunnel = %v, %v", resp, err)
	}
	want := "CONNECT rally.test:443 rally.test:443 Basic " + base64.StdEncoding.EncodeToString([]byte("a b:c"))
	if got := <-heads; got != want {
		t.Fatalf("proxy read %q, want %q", got, want)
	}
	b := make([]byte, 64)
	n, err := nc.Read(b)
	if err != nil || string(b[:n]) != "early bytes" {
		t.Fatalf("tunnel read %q, %v, want the bytes sent with the answer", b[:n], err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key
// as PEM files in the test's temporary directory and returns their paths
// and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c := testcert.Issue(t)
	return c.CertFile, c.KeyFile, c.Pool
}

// startHTTPSProxy runs an HTTPS proxy: stunnel (https://www.stunnel.org)
// taking TLS on a loopback port, in front of a tinyproxy with extra
// configuration lines. It returns stunnel, the tinyproxy behind it, and a
// pool that trusts stunnel's certificate.
func startHTTPSProxy(t *testing.T, extra ...string) (*daemon, *daemon, *x509.CertPool) {
	t.Helper()
	bin := findBinary(t, "stunnel", "stunnel4", "/usr/bin/stunnel4", "/usr/bin/stunnel")
	tiny := startTinyproxy(t, extra...)
	certFile, keyFile, pool := selfSigned(t)
	tunnel := startDaemon(t, func(port int) []string {
		conf := writeConf(t, "stunnel.conf",
			"foreground = yes",
			"pid =",
			"debug = info",
			"[proxy]",
			fmt.Sprintf("accept = 127.0.0.1:%d", port),
			"connect = "+tiny.addr,
			"cert = "+certFile,
			"key = "+keyFile,
		)
		return []string{bin, conf}
	}, "Accepting new connections")
	return tunnel, tiny, pool
}

func TestDialGoesThroughAnHTTPSProxyOverTLS(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "ws", true: "wss"}[secure], func(t *testing.T) {
			tunnel, tiny, pool := startHTTPSProxy(t)
			srv, remotes := echoServer(t, secure)
			opts := &DialOptions{Proxy: proxyTo(t, "https://"+tunnel.addr), HandshakeTimeout: testTimeout, TLSConfig: &tls.Config{RootCAs: pool}}
			u := "ws://" + srv.Listener.Addr().String() + "/echo"
			if secure {
				// One configuration for both TLS connections, the proxy's
				// and (inside the tunnel) the server's, each checked
				// against its own name.
				pool.AddCert(srv.Certificate())
				u = "wss://" + srv.Listener.Addr().String() + "/echo"
			}
			c, _ := dialOK(t, u, opts)
			echoOnce(t, c, "through TLS to the proxy")
			if remote := <-remotes; remote == c.LocalAddr().String() {
				t.Fatalf("the server saw the client's own address %s: no proxy in between", remote)
			}
			if !tiny.logged("CONNECT") {
				t.Fatalf("tinyproxy logged no CONNECT")
			}
			if !tunnel.logged("accepted connection") {
				t.Fatalf("stunnel logged no connection")
			}
		})
	}
}

func TestDialSendsCredentialsToAnHTTPSProxyAndChecksItsCertificate(t *testing.T) {
	tunnel, _, pool := startHTTPSProxy(t, "BasicAuth alice s3cr3t-pw")
	srv, _ := echoServer(t, false)
	u := "ws://" + srv.Listener.Addr().String() + "/"

	c, _ := dialOK(t, u, &DialOptions{Proxy: proxyTo(t, "https://alice:s3cr3t-pw@"+tunnel.addr), TLSConfig: &tls.Config{RootCAs: pool}})
	echoOnce(t, c, "authorized")

	_, resp, err := Dial(context.Background(), u, &DialOptions{Proxy: proxyTo(t, "https://alice:wrong-SECRET@"+tunnel.addr), TLSConfig: &tls.Config{RootCAs: pool}, HandshakeTimeout: testTimeout})
	var he *HandshakeError
	if !errors.As(err, &he) || resp == nil || (resp.StatusCode != 401 && resp.StatusCode != 407) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Dial with wrong proxy credentials: %v (response %v), want the proxy's refusal without the credentials", err, resp)
	}

	// A proxy whose certificate is not trusted is not talked to.
	_, resp, err = Dial(context.Background(), u, &DialOptions{Proxy: proxyTo(t, "https://alice:s3cr3t-SECRET@"+tunnel.addr), HandshakeTimeout: testTimeout})
	var unknown x509.UnknownAuthorityError
	want := "rally: dial " + u + ": TLS with proxy https://xxxxx@" + tunnel.addr + ": "
	if resp != nil || !errors.As(err, &unknown) || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Dial through an untrusted proxy: %v, %v, want an error starting %q wrapping x509.UnknownAuthorityError", resp, err, want)
	}
}
