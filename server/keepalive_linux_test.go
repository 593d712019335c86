package server

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// keepAliveOf reports whether the kernel sends TCP keepalive probes on c.
func keepAliveOf(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var on int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return on != 0
}

// With rally's pings on (the default), an accepted connection carries no
// TCP keepalive: the pings and IdleTimeout find a dead peer, and a probe
// per connection every 15 s costs the kernel more than the pings at a
// few hundred thousand connections. With pings off, Go's default stays.
func TestAcceptedConnectionsHaveTCPKeepAliveOnlyWithoutPings(t *testing.T) {
	for _, tc := range []struct {
		name string
		ping time.Duration
		want bool
	}{
		{"pings on", 30 * time.Second, false},
		{"pings off", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{cfg: Config{Addr: "127.0.0.1:0", PingInterval: tc.ping, IdleTimeout: 90 * time.Second}}
			ln, err := s.listen()
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			a, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if got := keepAliveOf(t, a); got != tc.want {
				t.Fatalf("SO_KEEPALIVE on the accepted connection = %v, want %v", got, tc.want)
			}
		})
	}
}
