package interop_test

import (
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
)

// cutProxy is a TCP proxy on loopback that a test can cut, as a network
// that drops does: Cut closes every connection through it and refuses new
// ones (accepted, then closed at once) until Restore. Retarget points it
// at another server, for a server that comes back on a new port.
type cutProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	target  string
	cut     bool
	conns   map[net.Conn]bool
	stalled chan struct{} // non-nil while Stall holds server-to-client bytes; closed by Resume
}

// proxyReadBuffer is the proxy's receive buffer on its connections to the
// server: small and fixed, it bounds what a Stall lets the server write
// before the server has to hold messages.
const proxyReadBuffer = 64 << 10

// proxyDialer sets that buffer before connecting: shrinking it once a
// larger window has been advertised makes the kernel prune and the server
// retransmit with backoff.
var proxyDialer = net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, proxyReadBuffer)
	}); cerr != nil {
		return cerr
	}
	return err
}}

// newCutProxy starts a proxy in front of target and stops it when t ends.
func newCutProxy(t testing.TB, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.Resume()
		p.wg.Wait()
	})
	return p
}

// Addr is where clients connect.
func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Retarget sends new connections to target.
func (p *cutProxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, target := p.cut, p.target
		p.mu.Unlock()
		if cut {
			client.Close()
			continue
		}
		server, err := proxyDialer.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(client, server, false)
		go p.pipe(server, client, true)
	}
}

// Stall stops passing the server's bytes to clients, without closing
// anything: to the server, its clients stop reading. Resume lets them go.
func (p *cutProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume ends a Stall.
func (p *cutProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// gate waits while the proxy is stalled.
func (p *cutProxy) gate() {
	p.mu.Lock()
	ch := p.stalled
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// track records a connection pair, or closes it when a Cut came first.
func (p *cutProxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		a.Close()
		b.Close()
		return false
	}
	p.conns[a], p.conns[b] = true, true
	return true
}

// pipe copies src to dst (server to client: held while stalled); when
// either ends, both are closed (a cut network delivers no half close).
func (p *cutProxy) pipe(src, dst net.Conn, toClient bool) {
	defer p.wg.Done()
	if toClient {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
	} else {
		io.Copy(dst, src)
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
