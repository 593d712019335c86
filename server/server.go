// Package server is the runnable WebSocket server behind `rally serve`: an
// echo endpoint today, pub/sub, the HTTP publish API, auth and metrics as
// they land. It is for running rally as a program; to build your own server,
// use the rally package directly.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/rallyws/rally"
)

// Config is what `rally serve` is told on its command line.
type Config struct {
	// Addr is the address to listen on, HOST:PORT. Default 127.0.0.1:8080.
	Addr string
	// ShutdownTimeout bounds the close handshakes on shutdown; connections
	// still open after it are cut. Default 5 s.
	ShutdownTimeout time.Duration
	// PingInterval and IdleTimeout keep connections alive or let them go.
	// Defaults 30 s and 90 s; negative turns either off.
	PingInterval time.Duration
	IdleTimeout  time.Duration
	// Logger receives the server's log lines. nil means slog.Default().
	Logger *slog.Logger
}

// Server serves the endpoints of `rally serve`.
type Server struct {
	cfg  Config
	log  *slog.Logger
	mux  *http.ServeMux
	echo *rally.Server
}

// New returns a server for cfg with defaults filled in.
func New(cfg Config) *Server {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	switch {
	case cfg.PingInterval == 0:
		cfg.PingInterval = 30 * time.Second
	case cfg.PingInterval < 0:
		cfg.PingInterval = 0
	}
	switch {
	case cfg.IdleTimeout == 0:
		cfg.IdleTimeout = 90 * time.Second
	case cfg.IdleTimeout < 0:
		cfg.IdleTimeout = 0
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	opts := &rally.AcceptOptions{
		ConnOptions: rally.ConnOptions{
			PingInterval: cfg.PingInterval,
			IdleTimeout:  cfg.IdleTimeout,
			CloseTimeout: cfg.ShutdownTimeout,
			Logger:       s.log,
		},
		// The echo endpoint holds no user data and trusts no cookie, so any
		// page may use it.
		InsecureSkipOriginCheck: true,
		// Compression without server context: an idle connection keeps no
		// compressor, and a message for many is compressed once.
		Compression: &rally.CompressionOptions{ServerNoContextTakeover: true},
	}
	s.echo = &rally.Server{Options: opts, Message: echo}
	s.mux = http.NewServeMux()
	s.mux.Handle("GET /echo", s.echo)
	return s
}

// echo sends every message back with its own frame type.
func echo(c *rally.Conn, typ rally.MessageType, p []byte) {
	c.Write(context.Background(), typ, p)
}

// Handler returns the server's HTTP handler (all endpoints).
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves on ln until ctx ends, then shuts down: it stops accepting,
// sends 1001 (going away) to every open WebSocket, waits for their close
// handshakes up to the shutdown timeout, cuts what is left, and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Stop accepting; hijacked WebSockets are not net/http's any more, so
	// they get their 1001 from the WebSocket server.
	hs.Shutdown(sctx)
	s.echo.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ListenAndServe listens on the configured address, prints the URLs it
// serves to out, and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, out io.Writer) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("rally serve: %w", err)
	}
	fmt.Fprintf(out, "rally serve: listening on http://%s\n", ln.Addr())
	fmt.Fprintf(out, "  echo:  ws://%s/echo\n", ln.Addr())
	return s.Serve(ctx, ln)
}
