//go:build linux

package rally

import (
	"net"
	"sync"
	"syscall"
	"unsafe"
)

// rawConnOf returns the socket under nc when rally can do its own
// non-blocking reads and writes on it (plain TCP and Unix sockets), else nil.
func rawConnOf(nc net.Conn) syscall.RawConn {
	var sc syscall.Conn
	switch c := nc.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// sysIO makes the read, write or writev system call trap on the
// non-blocking socket fd, over n bytes or iovecs at p. With raw it is made
// without telling the Go scheduler (RawSyscall), as an event loop's are
// (see loopRaw); else as any system call (Syscall), as a reading or
// flushing goroutine's are. Either way it does not block: the socket is
// non-blocking.
func sysIO(raw bool, trap, fd uintptr, p unsafe.Pointer, n int) (uintptr, syscall.Errno) {
	if raw {
		r, _, e := syscall.RawSyscall(trap, fd, uintptr(p), uintptr(n))
		return r, e
	}
	r, _, e := syscall.Syscall(trap, fd, uintptr(p), uintptr(n))
	return r, e
}

// writeFd writes a and then b to the non-blocking socket fd in one system
// call (raw: see sysIO). It returns how many bytes went out; a full socket
// buffer is n == 0 with errAgain.
func writeFd(fd uintptr, iov *[2]iovec, a, b []byte, raw bool) (int, error) {
	for {
		var r uintptr
		var e syscall.Errno
		switch {
		case len(b) == 0:
			r, e = sysIO(raw, syscall.SYS_WRITE, fd, unsafe.Pointer(unsafe.SliceData(a)), len(a))
		case len(a) == 0:
			r, e = sysIO(raw, syscall.SYS_WRITE, fd, unsafe.Pointer(unsafe.SliceData(b)), len(b))
		default:
			iov[0].Base = unsafe.SliceData(a)
			iov[0].SetLen(len(a))
			iov[1].Base = unsafe.SliceData(b)
			iov[1].SetLen(len(b))
			r, e = sysIO(raw, syscall.SYS_WRITEV, fd, unsafe.Pointer(iov), 2)
			iov[0].Base, iov[1].Base = nil, nil
		}
		switch e {
		case 0:
			return int(r), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, errAgain
		}
		return 0, e
	}
}

// readFd reads once from the non-blocking socket fd (raw: see sysIO).
func readFd(fd uintptr, p []byte, raw bool) (int, error) {
	for {
		r, e := sysIO(raw, syscall.SYS_READ, fd, unsafe.Pointer(unsafe.SliceData(p)), len(p))
		switch e {
		case 0:
			return int(r), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, errAgain
		}
		return 0, e
	}
}

// iovecs lends the iovec arrays of gathered writes.
var iovecs = sync.Pool{New: func() any { return new([iovMax]syscall.Iovec) }}

// writevFd writes bufs (at most iovMax of them are taken) to the
// non-blocking socket fd in one system call (raw: see sysIO). It returns
// how many bytes went out; a full socket buffer is n == 0 with errAgain.
func writevFd(fd uintptr, bufs [][]byte, raw bool) (int, error) {
	switch len(bufs) {
	case 0:
		return 0, nil
	case 1:
		return writeFd(fd, nil, bufs[0], nil, raw)
	}
	bufs = bufs[:min(len(bufs), iovMax)]
	iov := iovecs.Get().(*[iovMax]syscall.Iovec)
	for i, b := range bufs {
		iov[i].Base = unsafe.SliceData(b)
		iov[i].SetLen(len(b))
	}
	var n int
	var err error
	for {
		r, e := sysIO(raw, syscall.SYS_WRITEV, fd, unsafe.Pointer(iov), len(bufs))
		if e == syscall.EINTR {
			continue
		}
		switch e {
		case 0:
			n = int(r)
		case syscall.EAGAIN:
			err = errAgain
		default:
			err = e
		}
		break
	}
	clear(iov[:len(bufs)])
	iovecs.Put(iov)
	return n, err
}
