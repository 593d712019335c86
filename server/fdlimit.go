package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// isFDLimit reports whether err says the process (EMFILE) or the system
// (ENFILE) has no file descriptor left.
func isFDLimit(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// acceptLogger is the main listener: it counts accept errors and logs
// them at warn (once per interval). At the file descriptor limit it also
// sheds one waiting connection per error, with a descriptor it keeps in
// reserve for that, so that waiting clients learn at once that they were
// not served instead of timing out.
type acceptLogger struct {
	net.Listener
	m       *metrics
	errors  *prometheus.CounterVec
	log     *everyLog
	reserve *fdReserve
}

func (l *acceptLogger) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil || errors.Is(err, net.ErrClosed) {
		return c, err
	}
	reason := "other"
	if isFDLimit(err) {
		reason = "fd_limit"
		l.shed()
	}
	l.errors.WithLabelValues(reason).Inc()
	l.log.warn("accepting connections failed", "reason", reason, "err", err)
	return c, err
}

// shed accepts one waiting connection with a reserved descriptor and
// closes it, without waiting if none is there.
func (l *acceptLogger) shed() {
	tl, ok := l.Listener.(*net.TCPListener)
	if !ok || !l.reserve.release() {
		return
	}
	defer l.reserve.refill()
	tl.SetDeadline(time.Now().Add(10 * time.Millisecond))
	defer tl.SetDeadline(time.Time{})
	if c, err := tl.Accept(); err == nil {
		l.m.refusals.WithLabelValues("fd_limit").Inc()
		c.Close()
	}
}

// fdReserve holds file descriptors (of /dev/null) to give back to the
// process when it has no other left.
type fdReserve struct {
	mu    sync.Mutex
	files []*os.File
	want  int
}

func newFDReserve(n int) *fdReserve {
	r := &fdReserve{want: n}
	for range n {
		r.refill()
	}
	return r
}

// release closes one reserved descriptor and reports whether there was
// one.
func (r *fdReserve) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.files) == 0 {
		return false
	}
	f := r.files[len(r.files)-1]
	r.files = r.files[:len(r.files)-1]
	f.Close()
	return true
}

// refill takes a descriptor back into the reserve if one is free.
func (r *fdReserve) refill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.files) >= r.want {
		return
	}
	if f, err := os.Open(os.DevNull); err == nil {
		r.files = append(r.files, f)
	}
}

// close gives every reserved descriptor back.
func (r *fdReserve) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.files {
		f.Close()
	}
	r.files, r.want = nil, 0
}

// opsReserve is how many descriptors the ops listener keeps for itself:
// enough for a health check and a metrics scrape at once, and their
// retries.
const opsReserve = 4

// listenOps listens on addr for the ops endpoints; serveOps serves them
// there until shutdown.
func (s *Server) listenOps(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rally serve: ops listener: %w", err)
	}
	s.opsLn = &opsListener{Listener: ln, reserve: newFDReserve(opsReserve)}
	s.opsAddr.Store(ln.Addr().String())
	s.closers = append(s.closers, func() {
		ln.Close()
		s.opsLn.reserve.close()
	})
	return nil
}

func (s *Server) serveOps() {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.ready)
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(s.opsLn)
	}()
	// Runs before the listener's own closer (closers run last first).
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		<-done
	})
}

// OpsAddr returns the address the ops listener serves on, or "" if it
// does not (yet).
func (s *Server) OpsAddr() string {
	a, _ := s.opsAddr.Load().(string)
	return a
}

// opsListener accepts with a reserved descriptor when the process has no
// other, and takes it back when that connection closes.
type opsListener struct {
	net.Listener
	reserve *fdReserve
}

func (l *opsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && isFDLimit(err) && l.reserve.release() {
		c, err = l.Listener.Accept()
		if err != nil {
			l.reserve.refill()
			return nil, err
		}
		return &reservedConn{Conn: c, reserve: l.reserve}, nil
	}
	return c, err
}

// reservedConn is a connection on a reserved descriptor.
type reservedConn struct {
	net.Conn
	reserve *fdReserve
	once    sync.Once
}

func (c *reservedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.reserve.refill)
	return err
}
