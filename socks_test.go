package rally

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// socksServer is a SOCKS5 server in Go that answers as script says and
// tunnels a granted CONNECT to the address route returns for the
// requested one, so that a test can name any host and stay on loopback.
// It reports, per connection, the bytes the client sent before the
// tunnel (greeting, authentication, request), in hex.
type socksScript struct {
	method byte // the method chosen: 0, 2 or 0xff
	authOK bool // the verdict on user/password
	reply  byte // REP: 0 grants the CONNECT
}

func socksServer(t *testing.T, script socksScript, route func(target string) string) (string, <-chan string) {
	t.Helper()
	sent := make(chan string, 16)
	addr := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		var got []string
		defer func() { sent <- strings.Join(got, " ") }()
		read := func(n int) []byte {
			b := make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				got = append(got, "("+err.Error()+")")
				return nil
			}
			return b
		}
		head := read(2)
		if head == nil {
			return
		}
		methods := read(int(head[1]))
		got = append(got, hex.EncodeToString(append(head, methods...)))
		nc.Write([]byte{5, script.method})
		if script.method == 0xff {
			return
		}
		if script.method == 2 {
			auth := read(2)
			if auth == nil {
				return
			}
			user := read(int(auth[1]))
			plen := read(1)
			if plen == nil {
				return
			}
			password := read(int(plen[0]))
			got = append(got, hex.EncodeToString(auth)+"|"+string(user)+"|"+hex.EncodeToString(plen)+"|"+string(password))
			if !script.authOK {
				nc.Write([]byte{1, 1})
				return
			}
			nc.Write([]byte{1, 0})
		}
		req := read(4)
		if req == nil {
			return
		}
		var target string
		switch req[3] {
		case 1:
			a := read(4)
			req = append(req, a...)
			target = net.IP(a).String()
		case 4:
			a := read(16)
			req = append(req, a...)
			target = net.IP(a).String()
		case 3:
			n := read(1)
			name := read(int(n[0]))
			req = append(append(req, n...), name...)
			target = string(name)
		}
		port := read(2)
		req = append(req, port...)
		got = append(got, hex.EncodeToString(req))
		if script.reply != 0 {
			nc.Write([]byte{5, script.reply, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		up, err := net.Dial("tcp", route(net.JoinHostPort(target, fmt.Sprint(int(port[0])<<8|int(port[1])))))
		if err != nil {
			nc.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		defer up.Close()
		// A bound address given as a domain name, which the client must
		// read past.
		nc.Write([]byte{5, 0, 0, 3, 5, 'p', 'r', 'o', 'x', 'y', 0x04, 0x38})
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
	return addr, sent
}

func TestDialSpeaksSOCKS5AsRFC1928And1929SayWithTheNameOrTheAddress(t *testing.T) {
	srv, remotes := echoServer(t, false)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	hexPort := fmt.Sprintf("%04x", port)
	for _, tc := range []struct {
		name, proxyUser, scheme, host string
		script                        socksScript
		want                          string
	}{
		{"socks5h sends the name", "", "socks5h", "echo.rally.test", socksScript{},
			"050100 0501000" + "30f" + hex.EncodeToString([]byte("echo.rally.test")) + hexPort},
		{"socks5 resolves the name here, IPv4 first", "", "socks5", "localhost", socksScript{},
			"050100 05010001" + "7f000001" + hexPort},
		{"socks5h sends an address as an address", "", "socks5h", "127.0.0.1", socksScript{},
			"050100 05010001" + "7f000001" + hexPort},
		{"an IPv6 address as one", "", "socks5", "[::1]", socksScript{},
			"050100 05010004" + "00000000000000000000000000000001" + hexPort},
		{"with a user, user/password is offered too and sent", "alice:pw%20x@", "socks5h", "echo.rally.test",
			socksScript{method: 2, authOK: true},
			"05020002 0105|alice|04|pw x 0501000" + "30f" + hex.EncodeToString([]byte("echo.rally.test")) + hexPort},
		{"with a user, the proxy may still want none", "alice:pw@", "socks5", "127.0.0.1", socksScript{method: 0},
			"05020002 05010001" + "7f000001" + hexPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, sent := socksServer(t, tc.script, func(string) string { return srv.Listener.Addr().String() })
			u := fmt.Sprintf("ws://%s:%d/", tc.host, port)
			c, _ := dialOK(t, u, &DialOptions{Proxy: proxyTo(t, tc.scheme+"://"+tc.proxyUser+proxy)})
			echoOnce(t, c, "through socks")
			<-remotes
			c.CloseNow()
			if got := <-sent; got != tc.want {
				t.Fatalf("the proxy read\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestDialThroughSOCKS5FailsWithTheProxysReasonAndNoCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		script     socksScript
		want       string
	}{
		{"refused CONNECT", "", socksScript{reply: 5}, "could not connect to rally.test:80: connection refused (SOCKS5 reply 5)"},
		{"ruleset", "u:SECRET@", socksScript{method: 2, authOK: true, reply: 2}, "could not connect to rally.test:80: connection not allowed by ruleset (SOCKS5 reply 2)"},
		{"unknown reply", "", socksScript{reply: 42}, "could not connect to rally.test:80: unknown reply code (SOCKS5 reply 42)"},
		{"wrong password", "u:SECRET@", socksScript{method: 2}, "refused the user and password (SOCKS5 status 1)"},
		{"no method without a user", "", socksScript{method: 0xff}, "wants authentication: give a user and password in the proxy URL"},
		{"no method with a user", "u:SECRET@", socksScript{method: 0xff}, "accepts neither user/password authentication nor none"},
		{"a method not offered", "", socksScript{method: 2}, "chose authentication method 2, which was not offered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, sent := socksServer(t, tc.script, func(string) string { return "127.0.0.1:1" })
			_, resp, err := Dial(context.Background(), "ws://rally.test/", &DialOptions{Proxy: proxyTo(t, "socks5h://"+tc.user+proxy), HandshakeTimeout: testTimeout})
			<-sent
			shown := "socks5h://" + proxy
			if tc.user != "" {
				shown = "socks5h://xxxxx@" + proxy
			}
			want := "rally: dial ws://rally.test/: proxy " + shown + ": " + tc.want
			if resp != nil || err == nil || err.Error() != want {
				t.Fatalf("Dial = %v, %v\nwant the error %q", resp, err, want)
			}
		})
	}
}

func TestDialRefusesSOCKS5CredentialsItCannotSendWithoutShowingThem(t *testing.T) {
	proxy, _ := socksServer(t, socksScript{method: 2}, func(string) string { return "127.0.0.1:1" })
	long := strings.Repeat("SECRET", 50)
	_, _, err := Dial(context.Background(), "ws://rally.test/", &DialOptions{Proxy: proxyTo(t, "socks5://u:"+long+"@"+proxy), HandshakeTimeout: testTimeout})
	if err == nil || !strings.Contains(err.Error(), "a password of at most 255") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("Dial error %v, want a refusal of the password that does not show it", err)
	}
}

func TestDialTakesASOCKSProxyFromALLPROXY(t *testing.T) {
	srv, remotes := echoServer(t, false)
	proxy, sent := socksServer(t, socksScript{}, func(string) string { return srv.Listener.Addr().String() })
	t.Setenv("HTTP_PROXY", "")
	t.Setenv("http_proxy", "")
	t.Setenv("ALL_PROXY", "socks5h://"+proxy)
	c, _ := dialOK(t, "ws://echo.rally.test:9/", nil)
	echoOnce(t, c, "via ALL_PROXY")
	<-remotes
	c.CloseNow()
	if got, want := <-sent, "050100 0501000"+"30f"+hex.EncodeToString([]byte("echo.rally.test"))+"0009"; got != want {
		t.Fatalf("the proxy read %s, want %s", got, want)
	}
}

// startDante runs Dante's SOCKS5 server (danted, Debian's dante-server)
// without authentication.
func startDante(t *testing.T) *daemon {
	t.Helper()
	bin := findBinary(t, "danted", "dante-server", "/usr/sbin/danted")
	return startDaemon(t, func(port int) []string {
		conf := writeConf(t, "danted.conf",
			"logoutput: stderr",
			fmt.Sprintf("internal: 127.0.0.1 port = %d", port),
			"external: 127.0.0.1",
			"clientmethod: none",
			"socksmethod: none",
			"client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }",
			"socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0\n log: connect }",
		)
		return []string{bin, "-f", conf, "-N", "1"}
	}, " running")
}

// startMicrosocks runs microsocks, a SOCKS5 server with user/password
// authentication.
func startMicrosocks(t *testing.T, user, password string) *daemon {
	t.Helper()
	bin := findBinary(t, "microsocks", "microsocks", "/usr/bin/microsocks")
	return startDaemon(t, func(port int) []string {
		return []string{bin, "-i", "127.0.0.1", "-p", fmt.Sprint(port), "-u", user, "-P", password}
	}, "")
}

func TestDialGoesThroughDanteWithSocks5AndSocks5h(t *testing.T) {
	dante := startDante(t)
	for _, scheme := range []string{"socks5", "socks5h"} {
		for _, secure := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s secure=%v", scheme, secure), func(t *testing.T) {
				srv, remotes := echoServer(t, secure)
				port := srv.Listener.Addr().(*net.TCPAddr).Port
				// localhost: resolved here with socks5, by Dante with
				// socks5h.
				u := fmt.Sprintf("ws://localhost:%d/echo", port)
				opts := &DialOptions{Proxy: proxyTo(t, scheme+"://"+dante.addr), HandshakeTimeout: testTimeout}
				if secure {
					u = fmt.Sprintf("wss://localhost:%d/echo", port)
					opts.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
					opts.TLSConfig.ServerName = "example.com" // httptest's certificate
				}
				c, _ := dialOK(t, u, opts)
				echoOnce(t, c, "through dante")
				if remote := <-remotes; remote == c.LocalAddr().String() {
					t.Fatalf("the server saw the client's own address %s: no proxy in between", remote)
				}
				// Dante logs "pass(1): tcp/connect [: client proxy ->
				// proxy's-own target".
				target := fmt.Sprintf(" 127.0.0.1.%d", port)
				if !dante.waitLogged(func(l string) bool { return strings.Contains(l, "tcp/connect") && strings.HasSuffix(l, target) }) {
					t.Fatalf("dante logged no connection to port %d", port)
				}
			})
		}
	}
}

func TestDialAuthenticatesWithMicrosocksAndKeepsTheCredentialsOutOfErrors(t *testing.T) {
	socks := startMicrosocks(t, "alice", "s3cr3t-pw")
	srv, remotes := echoServer(t, false)
	u := "ws://" + srv.Listener.Addr().String() + "/"

	c, _ := dialOK(t, u, &DialOptions{Proxy: proxyTo(t, "socks5://alice:s3cr3t-pw@"+socks.addr)})
	echoOnce(t, c, "authenticated")
	if remote := <-remotes; remote == c.LocalAddr().String() {
		t.Fatalf("the server saw the client's own address %s: no proxy in between", remote)
	}

	for _, tc := range []struct{ userinfo, want string }{
		{"alice:wrong-SECRET@", "proxy socks5://xxxxx@" + socks.addr + ": refused the user and password (SOCKS5 status "},
		{"", "proxy socks5://" + socks.addr + ": wants authentication: give a user and password in the proxy URL"},
	} {
		_, resp, err := Dial(context.Background(), u, &DialOptions{Proxy: proxyTo(t, "socks5://"+tc.userinfo+socks.addr), HandshakeTimeout: testTimeout})
		if resp != nil || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("Dial with %q: %v, %v, want an error with %q and no credentials", tc.userinfo, resp, err, tc.want)
		}
		var he *HandshakeError
		if errors.As(err, &he) {
			t.Fatalf("Dial error %v is a HandshakeError: no HTTP answer came", err)
		}
	}
}

func TestDialThroughASOCKS5ProxyThatNeverAnswersEndsAtTheHandshakeTimeout(t *testing.T) {
	greeted := make(chan struct{})
	proxy := rawServer(t, func(nc net.Conn, br *bufio.Reader) {
		b := make([]byte, 3)
		io.ReadFull(br, b)
		close(greeted)
		io.Copy(io.Discard, br) // until the client gives up
	})
	_, _, err := Dial(context.Background(), "ws://rally.test/", &DialOptions{Proxy: proxyTo(t, "socks5h://"+proxy), HandshakeTimeout: 100 * time.Millisecond})
	<-greeted
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "opening handshake took longer than 100ms") {
		t.Fatalf("Dial error %v, want the handshake timeout", err)
	}
}
