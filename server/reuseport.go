package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Several processes on one port (Config.ReusePort, `rally serve
// --reuse-port`): each process opens its own listening socket with
// SO_REUSEPORT set, and the kernel hashes every new connection (by its
// addresses and ports) to one of them. That is how one machine serves
// more connections than a single process may hold files, or uses more
// cores than one runtime schedules well.
//
// What it costs, and what to know:
//   - Closing one process's listener drops the connections queued on it
//     (accepted by the kernel, not yet by the process) and its half-open
//     handshakes: their clients see a reset. Stopping one of the processes
//     therefore loses a few connections under load; start the replacement
//     first and expect clients to reconnect.
//   - The spread is by hash, not by load: a busy or stuck process gets its
//     share of new connections all the same.
//   - Each process is a node of its own: a topic spans the processes only
//     when they are joined, as separate machines are (--nats, one of them
//     with --embedded-nats). Without that, a publish reaches the
//     subscribers of the one process that took it.
//   - Every process must use the same user and set the option; the kernel
//     refuses the second bind otherwise ("address already in use").

// checkReusePort refuses a ReusePort that cannot work.
func (cfg *Config) checkReusePort() error {
	if !cfg.ReusePort {
		return nil
	}
	if !reusePortSupported {
		return errors.New("rally serve: --reuse-port needs Linux (SO_REUSEPORT with the kernel spreading connections)")
	}
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("rally serve: --addr %q: %w", cfg.Addr, err)
	}
	if port == "" || port == "0" {
		return fmt.Errorf("rally serve: --reuse-port needs a fixed port in --addr (%q picks a new port in each process)", cfg.Addr)
	}
	return nil
}

// listen opens the server's listening socket, shared with other processes
// when ReusePort is set.
//
// Accepted connections get no TCP keepalive while rally's own pings are
// on (PingInterval): a live WebSocket is never silent for longer than
// one ping interval, and one that stops answering is cut by IdleTimeout,
// so TCP's probes (Go's default is one every 15 s on every connection)
// would find nothing new. They are not free: with 840,000 idle
// connections on one machine they were 60,000 probes a second, and the
// kernel's softirq time spent on them stopped new connections from being
// accepted. An HTTP connection is closed once idle for two minutes
// (httpIdleTimeout).
func (s *Server) listen() (net.Listener, error) {
	lc := net.ListenConfig{}
	if s.cfg.PingInterval > 0 && s.cfg.IdleTimeout > 0 {
		lc.KeepAlive = -1
	}
	if s.cfg.ReusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setReusePort(fd) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	return lc.Listen(context.Background(), "tcp", s.cfg.Addr)
}
