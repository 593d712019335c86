package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// peer is one server in the comparison.
type peer struct {
	Name string
	// How is one line for the report: what the server uses and how.
	How string
	// Kind says how the server runs: "go" (a package under peers/), "node"
	// or "bun" (a script under node/).
	Kind   string
	Pkg    string
	Script string
	// Args are more arguments for the server (a Go peer run in another
	// mode, such as rally-loop).
	Args []string
	// Verbatim marks the raw TCP echo, which returns the client's bytes
	// unchanged (loadgen.Config.VerbatimEcho) and serves no chat.
	Verbatim bool
	// Compress marks a peer that supports permessage-deflate: started with
	// -compress (--compress for the scripts), it negotiates it, and it runs
	// the compressed scenarios.
	Compress bool
	// Pending, when set, says why the peer cannot run yet.
	Pending string
	// Named marks a peer that runs only when -peers names it: a variant
	// of another peer kept for one comparison (docs/BENCHMARKS.md says
	// which), not for the report.
	Named bool
}

// peers lists the servers in the order of the report. gorilla is the
// reference of the ratios.
var peers = []peer{
	{Name: "rally", Kind: "go", Compress: true, Pkg: "./peers/rally",
		How: "rally.Server callbacks; echo: non-blocking Send, corked per read batch; chat: PreparedMessage + SendPrepared to each member, each joining the sender's cork (JoinCork)"},
	{Name: "rally-loop", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-event-loop"},
		How: "the rally peer's code with rally.Server.EventLoop set: the connections run on event loops (epoll), not a goroutine each"},
	{Name: "rally-hub", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-hub"},
		How: "the rally peer with its chat written as rally's docs show a user: pubsub.Hub, Subscribe in Open, Hub.PublishFrom in Message (publish-to-self on)"},
	{Name: "rally-hub-loop", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-hub", "-event-loop"},
		How: "the rally-hub peer with rally.Server.EventLoop set: Hub.PublishFrom from the event loops' Message callbacks"},
	// The rally peers with a given number of event loops, for the
	// comparison of docs/BENCHMARKS.md, "How many event loops".
	{Name: "rally-loop-1", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-event-loop", "-loops", "1"}, Named: true,
		How: "the rally-loop peer with one event loop (rally.Server.EventLoops = 1)"},
	{Name: "rally-loop-2", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-event-loop", "-loops", "2"}, Named: true,
		How: "the rally-loop peer with two event loops"},
	{Name: "rally-hub-loop-1", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-hub", "-event-loop", "-loops", "1"}, Named: true,
		How: "the rally-hub-loop peer with one event loop"},
	{Name: "rally-hub-loop-2", Kind: "go", Compress: true, Pkg: "./peers/rally", Args: []string{"-hub", "-event-loop", "-loops", "2"}, Named: true,
		How: "the rally-hub-loop peer with two event loops"},
	{Name: "gorilla", Kind: "go", Compress: true, Pkg: "./peers/gorilla",
		How: "gorilla/websocket: ReadMessage/WriteMessage; chat: PreparedMessage per message, a write mutex per connection"},
	{Name: "gorilla-api on rally", Kind: "go", Compress: true, Pkg: "./peers/gorilla-on-rally",
		How: "the gorilla peer's program with its import changed to github.com/rallyws/rally/gorilla/websocket: gorilla's API on rally's engine"},
	{Name: "coder", Kind: "go", Compress: true, Pkg: "./peers/coder",
		How: "coder/websocket: Accept, Read, Write; chat: Write to each member (read limit raised to 1 MiB)"},
	{Name: "gobwas", Kind: "go", Pkg: "./peers/gobwas",
		How: "gobwas/ws low level: zero-copy Upgrade on net.Conn, ReadHeader/Cipher/WriteHeader with bufio; chat: CompileFrame once"},
	{Name: "gws", Kind: "go", Compress: true, Pkg: "./peers/gws",
		How: "lxzan/gws: Upgrader on net/http, ReadLoop per connection, WriteMessage; chat: Broadcaster"},
	{Name: "nbio", Kind: "go", Compress: true, Pkg: "./peers/nbio",
		How: "lesismal/nbio: nbhttp engine (epoll, non-blocking), OnMessage + WriteMessage; chat: WriteMessage to each member"},
	{Name: "ws (node)", Kind: "node", Compress: true, Script: "node/ws-server.mjs",
		How: "npm ws with bufferutil on Node.js, perMessageDeflate off (compressed: serverNoContextTakeover); chat: the README's broadcast loop"},
	{Name: "bun", Kind: "bun", Compress: true, Script: "node/bun-server.js",
		How: "Bun.serve websocket handlers (uWebSockets); chat: subscribe + server.publish"},
	{Name: "raw TCP", Kind: "go", Pkg: "./peers/rawtcp", Verbatim: true,
		How: "raw TCP echo after a minimal handshake: read, write the same bytes; no framing (the floor)"},
}

// reference is the peer every ratio is taken to.
const reference = "gorilla"

// bunBinary is where npm puts the bun executable of @oven/bun-linux-x64.
const bunBinary = "node/node_modules/@oven/bun-linux-x64/bin/bun"

// server is a running peer.
type server struct {
	peer *peer
	cmd  *exec.Cmd
	port int
	done chan struct{}
	log  *os.File
}

func (s *server) url(path string) string {
	return "ws://127.0.0.1:" + strconv.Itoa(s.port) + path
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// start runs p on a free port, with permessage-deflate when compress is
// set, and waits until it accepts connections.
func start(p *peer, bins, logs string, compress bool) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	switch p.Kind {
	case "go":
		cmd = exec.Command(filepath.Join(bins, filepath.Base(p.Pkg)), append([]string{"-addr", fmt.Sprintf("127.0.0.1:%d", port)}, p.Args...)...)
	case "node":
		cmd = exec.Command("node", p.Script, strconv.Itoa(port))
	case "bun":
		cmd = exec.Command(bunBinary, p.Script, strconv.Itoa(port))
	}
	if compress {
		flag := "-compress"
		if p.Kind != "go" {
			flag = "--compress"
		}
		cmd.Args = append(cmd.Args, flag)
	}
	log, err := os.Create(filepath.Join(logs, filepath.Base(p.Pkg+p.Script)+strings.Join(p.Args, "")+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	s := &server{peer: p, cmd: cmd, port: port, done: make(chan struct{}), log: log}
	go func() {
		cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if !s.alive() || time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not start (see %s)", p.Name, log.Name())
		}
		select {
		case <-s.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop kills the server's process (by its id) and waits for it.
func (s *server) stop() {
	if s.alive() {
		s.cmd.Process.Kill()
	}
	<-s.done
	s.log.Close()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// build compiles the Go peers into bins and makes sure the JavaScript
// peers are installed (npm ci when node_modules is missing). A peer that
// cannot be prepared gets a Pending reason instead of failing the run.
func build(ctx context.Context, list []*peer, bins string) error {
	var pkgs []*peer
	for _, p := range list {
		if p.Pending != "" {
			continue
		}
		switch p.Kind {
		case "go":
			pkgs = append(pkgs, p)
		case "node":
			if _, err := exec.LookPath("node"); err != nil {
				p.Pending = "node is not installed"
			}
		}
	}
	needNode := false
	for _, p := range list {
		if p.Pending == "" && (p.Kind == "node" || p.Kind == "bun") {
			needNode = true
		}
	}
	if needNode {
		if _, err := os.Stat("node/node_modules/ws"); err != nil {
			cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
			cmd.Dir = "node"
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("npm ci in bench/node: %w", err)
			}
		}
		for _, p := range list {
			if p.Kind == "bun" && p.Pending == "" {
				if _, err := os.Stat(bunBinary); err != nil {
					p.Pending = "the bun binary is missing from node/node_modules"
				}
			}
		}
	}
	built := map[string]bool{}
	for _, p := range pkgs {
		if built[p.Pkg] {
			continue
		}
		built[p.Pkg] = true
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bins, filepath.Base(p.Pkg)), p.Pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", p.Name, err)
		}
	}
	return nil
}
