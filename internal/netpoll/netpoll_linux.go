//go:build linux

// Package netpoll is a thin, allocation-free layer over Linux epoll for
// rally's event loops: one epoll instance with an eventfd to wake it,
// level-triggered registrations carrying a 64-bit tag, and taking a
// socket's descriptor away from the Go runtime's poller. A Wait with
// nothing to report parks its goroutine in the Go scheduler (the epoll
// instance is itself registered with the runtime's poller) rather than
// blocking its thread in epoll_wait. It does no reading or writing of the
// sockets themselves and knows nothing of WebSockets. It is for rally's own packages, not for users, and exists
// only on Linux.
package netpoll

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event flags, as Wait reports them.
const (
	Readable = unix.EPOLLIN
	Writable = unix.EPOLLOUT
	// Hangup is the peer's FIN (EPOLLRDHUP) or a hangup (EPOLLHUP): a read
	// returns the end of the stream (or what is left before it).
	Hangup = unix.EPOLLRDHUP | unix.EPOLLHUP
	// Error is a pending socket error (EPOLLERR): a read returns it.
	Error = unix.EPOLLERR
)

// Event is one registration that is ready: its tag and what it is ready for.
type Event struct {
	Tag   uint64
	Flags uint32
}

// Poller is an epoll instance and its eventfd. Add, Mod, Del and Wake are
// safe from any goroutine; Wait is for one goroutine at a time (the loop).
type Poller struct {
	epfd int
	efd  int
	// ep is the epoll instance as a file (nil if it could not be made
	// one), and rc its RawConn, through which Wait parks, if the runtime's
	// poller took it (else nil: Wait blocks in epoll_wait).
	ep     *os.File
	rc     syscall.RawConn
	woken  atomic.Bool // a wake-up is pending: Wake need not write again
	events []unix.EpollEvent
	out    []Event
}

// wakeTag tags the eventfd's registration; Wait never reports it.
const wakeTag = ^uint64(0)

// New makes a poller that returns at most batch events per Wait.
func New(batch int) (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	p := &Poller{epfd: epfd, efd: efd, events: make([]unix.EpollEvent, batch), out: make([]Event, 0, batch)}
	if err := p.ctl(unix.EPOLL_CTL_ADD, efd, wakeTag, unix.EPOLLIN); err != nil {
		p.Close()
		return nil, err
	}
	// An epoll instance is readable while it has events to report, so the
	// runtime's poller can watch it. A waiting loop then costs what a
	// goroutine waiting for its socket costs: its thread is free for other
	// goroutines, and no processor is held by a thread blocked in the
	// kernel for the scheduler's monitor to take back and hand to a thread
	// it wakes (rally's event loops: see loopRaw).
	if unix.SetNonblock(epfd, true) == nil {
		p.ep = os.NewFile(uintptr(epfd), "epoll")
		// A file the runtime's poller did not take has no deadlines.
		if p.ep.SetReadDeadline(time.Time{}) == nil {
			p.rc, _ = p.ep.SyscallConn()
		}
	}
	return p, nil
}

// Close closes the epoll instance and the eventfd. Descriptors still
// registered are not closed.
func (p *Poller) Close() error {
	err1 := unix.Close(p.efd)
	var err2 error
	if p.ep != nil {
		err2 = p.ep.Close() // out of the runtime's poller too, if it was in
	} else {
		err2 = unix.Close(p.epfd)
	}
	return errors.Join(err1, err2)
}

// Add registers fd, level-triggered, for readability and the peer's
// hangup and, when writable is set, writability; Wait reports it with tag.
func (p *Poller) Add(fd int, tag uint64, writable bool) error {
	return p.ctl(unix.EPOLL_CTL_ADD, fd, tag, interest(true, writable))
}

// Mod changes what fd is watched for: readability and the peer's hangup
// when readable is set, writability when writable is. A hangup (EPOLLHUP)
// and an error are reported whatever is asked.
func (p *Poller) Mod(fd int, tag uint64, readable, writable bool) error {
	return p.ctl(unix.EPOLL_CTL_MOD, fd, tag, interest(readable, writable))
}

// Del removes fd from the poller.
func (p *Poller) Del(fd int) error {
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

func interest(readable, writable bool) uint32 {
	var ev uint32
	if readable {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if writable {
		ev |= unix.EPOLLOUT
	}
	return ev
}

func (p *Poller) ctl(op, fd int, tag uint64, events uint32) error {
	var ev unix.EpollEvent
	ev.Events = events
	// The 64-bit data field is laid out as Fd then Pad (epoll_data_t is a
	// union): the tag fills both.
	*(*uint64)(unsafe.Pointer(&ev.Fd)) = tag
	return unix.EpollCtl(p.epfd, op, fd, &ev)
}

// Wake makes a Wait in progress (or the next one) return, with woken set.
// Wakes that come before Wait sees the first are one.
func (p *Poller) Wake() error {
	if !p.woken.CompareAndSwap(false, true) {
		return nil
	}
	one := [8]byte{1}
	for {
		_, err := unix.Write(p.efd, one[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return nil // the counter is full: a wake-up is pending anyway
		}
		return err
	}
}

// Wait waits up to msec milliseconds (-1: without limit, 0: not at all)
// for events and returns them (valid until the next Wait) and whether Wake
// was called. Whoever is woken must look for work after Wait returns:
// a Wake after that is reported by the next Wait.
func (p *Poller) Wait(msec int) (events []Event, woken bool, err error) {
	var n int
	switch {
	case msec == 0:
		n, err = p.poll()
	case msec < 0 && p.rc != nil:
		// Look, and park in the runtime's poller until the instance is
		// readable if there was nothing. The runtime forgets a readiness
		// it reported before the look, and keeps one that comes after it
		// (its registration is edge-triggered): nothing is missed.
		rerr := p.rc.Read(func(uintptr) bool {
			n, err = p.poll()
			return n > 0 || err != nil
		})
		if rerr != nil && err == nil {
			err = rerr
		}
	default:
		for {
			n, err = unix.EpollWait(p.epfd, p.events, msec)
			if err != unix.EINTR {
				break
			}
		}
	}
	if err != nil {
		return nil, false, err
	}
	out := p.out[:0]
	for i := range n {
		e := &p.events[i]
		tag := *(*uint64)(unsafe.Pointer(&e.Fd))
		if tag == wakeTag {
			woken = true
			var b [8]byte
			unix.Read(p.efd, b[:])
			p.woken.Store(false)
			continue
		}
		out = append(out, Event{Tag: tag, Flags: e.Events})
	}
	p.out = out
	return out, woken, nil
}

// poll returns the events ready now, without waiting. It never blocks,
// so it is made without telling the scheduler (RawSyscall6).
func (p *Poller) poll() (int, error) {
	for {
		// epoll_pwait with no signal mask is epoll_wait, which some
		// architectures lack.
		r, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(p.epfd),
			uintptr(unsafe.Pointer(unsafe.SliceData(p.events))), uintptr(len(p.events)), 0, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// Take takes the socket under rc away from the Go runtime: it returns a
// duplicate of its descriptor (close-on-exec, sharing the socket's
// non-blocking mode) that the caller owns. The caller then closes the
// net.Conn rc came from, which removes the original from the runtime's
// poller; the socket lives on in the duplicate. (os.File.Fd would switch
// the socket to blocking mode; this does not.)
func Take(rc syscall.RawConn) (int, error) {
	fd, cerr := -1, error(nil)
	err := rc.Control(func(s uintptr) {
		fd, cerr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return fd, nil
}
