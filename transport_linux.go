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

// writeFd writes a and then b to the non-blocking socket fd in one system
// call. It returns how many bytes went out; a full socket buffer is n == 0
// with errAgain.
func writeFd(fd uintptr, iov *[2]iovec, a, b []byte) (int, error) {
	for {
		var r uintptr
		var e syscall.Errno
		switch {
		case len(b) == 0:
			r, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(len(a)))
		case len(a) == 0:
			r, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		default:
			iov[0].Base = unsafe.SliceData(a)
			iov[0].SetLen(len(a))
			iov[1].Base = unsafe.SliceData(b)
			iov[1].SetLen(len(b))
			r, _, e = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(iov)), 2)
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

// readFd reads once from the non-blocking socket fd.
func readFd(fd uintptr, p []byte) (int, error) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
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
// non-blocking socket fd in one system call. It returns how many bytes
// went out; a full socket buffer is n == 0 with errAgain.
func writevFd(fd uintptr, bufs [][]byte) (int, error) {
	switch len(bufs) {
	case 0:
		return 0, nil
	case 1:
		return writeFd(fd, nil, bufs[0], nil)
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
		r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(iov)), uintptr(len(bufs)))
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
