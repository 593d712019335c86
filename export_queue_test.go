package rally

import (
	"net"
	"os"
	"syscall"
)

// ServerConnPairForTest returns a server connection over one end of a Unix
// socket pair with small buffers (a few KiB make backpressure), and the
// other end, for tests outside the package that need many receivers
// without handshakes. opts nil means no buffer limit.
func ServerConnPairForTest(opts *ConnOptions) (*Conn, net.Conn, error) {
	if opts == nil {
		opts = &ConnOptions{BufferLimit: -1}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	var ends [2]net.Conn
	for i, fd := range fds {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<10)
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		f := os.NewFile(uintptr(fd), "socketpair")
		ends[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	return newConn(ends[0], nil, true, "", opts), ends[1], nil
}
