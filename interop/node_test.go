package interop_test

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// waitFor bounds every wait for a peer's event or reply.
const waitFor = 5 * time.Second

// nodeMsg is one line from interop-peer.mjs: a reply (ID set) or an event.
type nodeMsg struct {
	ID         int    `json:"id"`
	Ev         string `json:"ev"`
	Conn       int    `json:"conn"`
	Server     int    `json:"server"`
	Port       int    `json:"port"`
	Binary     bool   `json:"binary"`
	Data       string `json:"data"`
	Code       int    `json:"code"`
	ErrCode    string `json:"errcode"`
	Status     int    `json:"status"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	Sync       bool   `json:"sync"`
	Error      string `json:"error"`
	ReadyState int    `json:"readyState"`
	Fatal      string `json:"fatal"`
}

// nodePeer is one node process running a script of interop/node that
// answers commands on stdin with JSON lines on stdout (interop-peer.mjs).
type nodePeer struct {
	stdin io.WriteCloser

	mu      sync.Mutex
	nextID  int
	replies map[int]chan nodeMsg
	conns   map[int]chan nodeMsg // events per connection
	servers map[int]chan int     // accepted connections per server
	exited  chan struct{}
	stderr  *lockedBuffer
}

// nodeDir returns interop/node, failing t when its packages are missing.
func nodeDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"ws", "undici", "pusher-js", "laravel-echo", "pusher"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("npm package %s is not installed in interop/node: run `bash interop/setup.sh` (npm ci there)", pkg)
		}
	}
	return dir
}

// nodePath returns the node binary, failing t when there is none.
func nodePath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: install Node.js 20 (Debian package nodejs) and run `bash interop/setup.sh`")
	}
	return p
}

// startNode starts script (a file of interop/node) and stops it when t ends.
func startNode(t testing.TB, script string) *nodePeer {
	t.Helper()
	dir := nodeDir(t)
	cmd := exec.Command(nodePath(t), script)
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &nodePeer{
		stdin:   stdin,
		replies: map[int]chan nodeMsg{},
		conns:   map[int]chan nodeMsg{},
		servers: map[int]chan int{},
		exited:  make(chan struct{}),
		stderr:  &lockedBuffer{},
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node %s: %v", script, err)
	}
	go p.dispatch(stdout)
	t.Cleanup(func() {
		stdin.Close() // the script ends itself when stdin closes
		select {
		case <-p.exited:
		case <-time.After(waitFor):
			cmd.Process.Kill()
		}
		cmd.Wait()
		if s := p.stderr.String(); s != "" {
			t.Logf("node %s stderr:\n%s", script, s)
		}
	})
	return p
}

func (p *nodePeer) dispatch(r io.Reader) {
	defer close(p.exited)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m nodeMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		switch {
		case m.ID != 0:
			p.mu.Lock()
			ch := p.replies[m.ID]
			delete(p.replies, m.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case m.Ev == "connection":
			p.accepted(m.Server) <- m.Conn
		default:
			p.events(m.Conn) <- m
		}
	}
}

func (p *nodePeer) events(conn int) chan nodeMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.conns[conn]
	if ch == nil {
		ch = make(chan nodeMsg, 1024)
		p.conns[conn] = ch
	}
	return ch
}

func (p *nodePeer) accepted(server int) chan int {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.servers[server]
	if ch == nil {
		ch = make(chan int, 16)
		p.servers[server] = ch
	}
	return ch
}

// call sends a command and waits for its reply. A missing reply or a
// script failure ends the test: the peer is broken, not the code under
// test.
func (p *nodePeer) call(t testing.TB, op string, args map[string]any) nodeMsg {
	t.Helper()
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	ch := make(chan nodeMsg, 1)
	p.replies[id] = ch
	p.mu.Unlock()
	args["id"], args["op"] = id, op
	line, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		t.Fatalf("node peer: writing %s: %v (stderr: %s)", op, err, p.stderr.String())
	}
	select {
	case m := <-ch:
		if m.Fatal != "" {
			t.Fatalf("node peer: %s failed: %s", op, m.Fatal)
		}
		return m
	case <-p.exited:
		t.Fatalf("node peer exited during %s (stderr: %s)", op, p.stderr.String())
	case <-time.After(waitFor):
		t.Fatalf("node peer: no reply to %s within %v", op, waitFor)
	}
	return nodeMsg{}
}

// listen starts an npm ws server and returns its index and port.
func (p *nodePeer) listen(t testing.TB, maxPayload int64) (server, port int) {
	m := p.call(t, "listen", map[string]any{"maxPayload": maxPayload})
	return m.Server, m.Port
}

// nextConnection waits for the next connection server accepts.
func (p *nodePeer) nextConnection(server int) (int, error) {
	select {
	case c := <-p.accepted(server):
		return c, nil
	case <-time.After(waitFor):
		return 0, fmt.Errorf("npm ws server accepted no connection within %v", waitFor)
	}
}

// connect opens an npm ws client to url and waits for it to open.
func (p *nodePeer) connect(t testing.TB, url string, maxPayload int64) (int, error) {
	conn := p.call(t, "connect", map[string]any{"url": url, "maxPayload": maxPayload}).Conn
	select {
	case m := <-p.events(conn):
		if m.Ev != "open" {
			return 0, fmt.Errorf("npm ws client did not open: %s", renderNode(m))
		}
		return conn, nil
	case <-time.After(waitFor):
		return 0, fmt.Errorf("npm ws client did not open within %v", waitFor)
	}
}

// wsEndpoint is one npm ws connection, client or server side.
type wsEndpoint struct {
	t    testing.TB
	p    *nodePeer
	conn int
}

func (e *wsEndpoint) Send(typ byte, b []byte, fin bool) string {
	m := e.p.call(e.t, "send", map[string]any{"conn": e.conn, "data": hex.EncodeToString(b), "binary": typ == opBinary, "fin": fin})
	return sendResult(m.Error, m.Sync)
}

func (e *wsEndpoint) Ping(b []byte) string {
	m := e.p.call(e.t, "ping", map[string]any{"conn": e.conn, "data": hex.EncodeToString(b)})
	if m.Error != "" {
		return "ping() error"
	}
	return "ping() ok"
}

func (e *wsEndpoint) Close(code uint16, reason []byte) string {
	m := e.p.call(e.t, "close", map[string]any{"conn": e.conn, "code": code, "reason": hex.EncodeToString(reason)})
	if m.Error != "" {
		return "close() refused"
	}
	return "close() ok"
}

func (e *wsEndpoint) Next() string {
	select {
	case m := <-e.p.events(e.conn):
		return renderNode(m)
	case <-time.After(waitFor):
		return "nothing"
	}
}

func (e *wsEndpoint) Hangup() { e.p.call(e.t, "terminate", map[string]any{"conn": e.conn}) }

// renderNode renders an npm ws event in the vocabulary of the tables.
func renderNode(m nodeMsg) string {
	data, _ := hex.DecodeString(m.Data)
	switch m.Ev {
	case "message":
		if m.Binary {
			return "message binary " + summary(data)
		}
		return "message text " + summary(data)
	case "ping", "pong":
		return m.Ev + " " + summary(data)
	case "error":
		if m.Status != 0 {
			return fmt.Sprintf("fail %d", m.Status)
		}
		return "error " + m.Message
	case "close":
		reason, _ := hex.DecodeString(m.Reason)
		return fmt.Sprintf("close %d %q", m.Code, reason)
	case "unexpected-response":
		return fmt.Sprintf("refused %d", m.Status)
	}
	return m.Ev
}

// sendResult renders how a send ended: ok, or an error reported at once
// (before the call returned) or later.
func sendResult(err string, sync bool) string {
	switch {
	case err == "":
		return "send() ok"
	case sync:
		return "send() error at once"
	}
	return "send() error later"
}

// lockedBuffer collects a child's stderr.
// startPiped starts cmd with pipes to its standard input and output and
// its standard error kept in a buffer (for failure messages).
func startPiped(t testing.TB, cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser, *lockedBuffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, stdout, stderr
}

type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
