//go:build linux

package netpoll

import (
	"net"

	"testing"

	"golang.org/x/sys/unix"
)

// waitFor waits (without limit) until tag is reported with flag set.
func waitFor(t *testing.T, p *Poller, tag uint64, flag uint32) Event {
	t.Helper()
	for {
		evs, _, err := p.Wait(-1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Tag == tag && e.Flags&flag != 0 {
				return e
			}
		}
	}
}

func socketPair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := New(16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPollerReportsReadableWithItsTagAndLevelTriggered(t *testing.T) {
	p := newPoller(t)
	a, b := socketPair(t)
	const tag = 7<<32 | 42
	if err := p.Add(a, tag, false); err != nil {
		t.Fatal(err)
	}
	if evs, woken, _ := p.Wait(0); len(evs) != 0 || woken {
		t.Fatalf("nothing written yet: got %v woken %v", evs, woken)
	}
	unix.Write(b, []byte("hi"))
	waitFor(t, p, tag, Readable)
	// Level-triggered: unread bytes are reported again.
	waitFor(t, p, tag, Readable)
	var buf [8]byte
	if n, _ := unix.Read(a, buf[:]); string(buf[:n]) != "hi" {
		t.Fatalf("read %q", buf[:n])
	}
	if evs, _, _ := p.Wait(0); len(evs) != 0 {
		t.Fatalf("drained socket still reported: %v", evs)
	}
}

func TestPollerReportsWritableOnlyWhileAsked(t *testing.T) {
	p := newPoller(t)
	a, _ := socketPair(t)
	if err := p.Add(a, 1, false); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := p.Wait(0); len(evs) != 0 {
		t.Fatalf("writability not asked for, got %v", evs)
	}
	if err := p.Mod(a, 1, true, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, 1, Writable)
	if err := p.Mod(a, 1, true, false); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := p.Wait(0); len(evs) != 0 {
		t.Fatalf("writability no longer asked for, got %v", evs)
	}
}

func TestPollerStopsReportingReadableWhenNotAsked(t *testing.T) {
	p := newPoller(t)
	a, b := socketPair(t)
	p.Add(a, 5, false)
	unix.Write(b, []byte("x"))
	waitFor(t, p, 5, Readable)
	if err := p.Mod(a, 5, false, false); err != nil {
		t.Fatal(err)
	}
	if evs, _, _ := p.Wait(0); len(evs) != 0 {
		t.Fatalf("readability no longer asked for, got %v", evs)
	}
	p.Mod(a, 5, true, false)
	waitFor(t, p, 5, Readable)
}

func TestPollerReportsThePeersHangup(t *testing.T) {
	p := newPoller(t)
	a, b := socketPair(t)
	p.Add(a, 3, false)
	unix.Shutdown(b, unix.SHUT_WR)
	e := waitFor(t, p, 3, Hangup)
	if e.Flags&Readable == 0 {
		t.Fatalf("a hangup is readable too (the read returns the end): flags %#x", e.Flags)
	}
	p.Del(a)
	if evs, _, _ := p.Wait(0); len(evs) != 0 {
		t.Fatalf("removed descriptor still reported: %v", evs)
	}
}

func TestPollerWakeFromAnotherGoroutineEndsWait(t *testing.T) {
	p := newPoller(t)
	go func() {
		p.Wake()
		p.Wake() // one pending wake-up: no second write needed
	}()
	for {
		_, woken, err := p.Wait(-1)
		if err != nil {
			t.Fatal(err)
		}
		if woken {
			break
		}
	}
	p.Wake()
	if _, woken, _ := p.Wait(-1); !woken {
		t.Fatal("Wake after a Wait did not wake the next one")
	}
}

func TestTakeKeepsTheSocketNonBlockingAfterTheConnCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// The connection accepted must be this client's: another process
	// that dials a loopback port it saw free a moment ago may reach this
	// listener first, and its connection ends at once.
	var nc net.Conn
	for nc == nil {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if c.RemoteAddr().String() == client.LocalAddr().String() {
			nc = c
		} else {
			c.Close()
		}
	}
	rc, _ := nc.(*net.TCPConn).SyscallConn()
	fd, err := Take(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	nc.Close()
	flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if flags&unix.O_NONBLOCK == 0 {
		t.Fatal("the taken descriptor is blocking")
	}
	var buf [4]byte
	if _, err := unix.Read(fd, buf[:]); err != unix.EAGAIN {
		t.Fatalf("read with nothing sent: %v, want EAGAIN", err)
	}
	client.Write([]byte("ping"))
	p := newPoller(t)
	p.Add(fd, 9, false)
	waitFor(t, p, 9, Readable)
	if n, _ := unix.Read(fd, buf[:]); string(buf[:n]) != "ping" {
		t.Fatalf("read %q after the original closed", buf[:n])
	}
}

// Wait parks in the runtime's poller when nothing is ready. A byte
// written just before its look, during it, or while it parks is reported
// all the same: none is missed (a missed one would leave Wait parked).
func TestPollerWaitMissesNoReadinessAroundItsPark(t *testing.T) {
	p := newPoller(t)
	a, b := socketPair(t)
	const tag = 3
	if err := p.Add(a, tag, false); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	for i := range 2000 {
		go unix.Write(b, []byte{byte(i)})
		waitFor(t, p, tag, Readable)
		if n, err := unix.Read(a, buf[:]); n != 1 || err != nil || buf[0] != byte(i) {
			t.Fatalf("write %d: read %d bytes %v, err %v", i, n, buf[:n], err)
		}
	}
}
