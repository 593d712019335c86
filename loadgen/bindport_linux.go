package loadgen

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindNoPort is a Dialer.Control for a connection from a chosen local
// address: it asks the kernel to pick the local port at connect time
// (IP_BIND_ADDRESS_NO_PORT), from the whole 4-tuple, not at bind time.
// A bind to port 0 leaves half the ephemeral range to connect and
// searches the bound ports each time; with hundreds of thousands of
// connections from one address it slowed to a crawl at about half the
// range per address (the million run stalled at 820,000 from 60
// addresses of 28,232 ports), with the kernel's CPU in the search.
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}); err != nil {
		return err
	}
	// An old kernel without the option still connects, the slow way.
	_ = serr
	return nil
}
