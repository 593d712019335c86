package rally_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// The model-based test of Conn's write side. rapid draws a sequence of
// operations (Send, SendDone, SendPrepared, SendPreparedDone, Write,
// WritePrepared, a Writer's fragments, Ping, Close, CloseNow, cancelled
// and expiring contexts) and of raw-peer behaviours (read fast or
// slowly, stop reading, ping, reset), runs it against a real connection
// on loopback, and holds what the peer received against a model built
// from what each call reported:
//
//   - a message reported sent, queued, completed with nil, or written (nil)
//     is on the wire, byte for byte, in the order the calls were accepted;
//   - a message reported dropped, withdrawn (a context's error on a live
//     connection) or refused after Close never appears;
//   - nothing follows the close frame;
//   - each SendDone completion runs exactly once, and never for a send that
//     returned Dropped;
//   - a blocking call that returned nil left nothing of its frame waiting:
//     BufferedAmount is at most the pongs queued since; once the peer has
//     read everything, BufferedAmount is 0, every completion has run and
//     OnDrain has followed a Queued;
//   - every compressed message inflates with the standard library's
//     inflater, with the context takeover negotiated;
//   - no goroutine is left once the connection has ended.
//
// Sequences are seeded and replayable: a failure prints the rapid seed and
// the shortest sequence rapid found. -long runs many more of them.

// modelSocketBuffer is the socket buffer of both ends, small so that a few
// dozen KiB make backpressure.
const modelSocketBuffer = 16 << 10

// modelChecks is how many sequences each configuration runs, unless
// -rapid.checks says otherwise.
func modelChecks() int {
	if rally.LongTests() {
		return 2500
	}
	if testing.Short() {
		return 100 // rapid divides by 5 under -short
	}
	if rally.RaceDetector() {
		// Each sequence runs a connection several times slower: 1,000
		// sequences over the 10 configurations keep make test's run of
		// the package within its time limit on a busy machine.
		return 100
	}
	return 300 // 3,000 sequences over the 10 configurations
}

type modelConfig struct {
	name     string
	server   bool
	deflate  bool
	takeover bool // the side under test compresses with context takeover
	tls      bool
	loop     bool // rally's side is served by a Server in event-loop mode
}

func TestConnKeepsItsWriteContractUnderRandomOperationSequences(t *testing.T) {
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	defaults := map[string]string{
		"rapid.checks": strconv.Itoa(modelChecks()),
		// A failure prints its seed; shrinking it is bounded, since every
		// try runs a connection.
		"rapid.nofailfile": "true",
		"rapid.shrinktime": "10s",
	}
	for name, v := range defaults {
		if !given[name] {
			flag.Set(name, v)
		}
	}
	for _, cfg := range []modelConfig{
		{name: "Server", server: true},
		{name: "ServerDeflateTakeover", server: true, deflate: true, takeover: true},
		{name: "ServerDeflateNoTakeover", server: true, deflate: true},
		{name: "Client", server: false},
		{name: "ClientDeflateTakeover", server: false, deflate: true, takeover: true},
		{name: "ClientDeflateNoTakeover", server: false, deflate: true},
		{name: "ServerTLS", server: true, tls: true},
		{name: "ClientTLSDeflateTakeover", server: false, tls: true, deflate: true, takeover: true},
		{name: "ServerEventLoop", server: true, loop: true},
		{name: "ServerEventLoopDeflateTakeover", server: true, deflate: true, takeover: true, loop: true},
	} {
		if cfg.loop && runtime.GOOS != "linux" {
			continue
		}
		t.Run(cfg.name, rapid.MakeCheck(func(rt *rapid.T) {
			m := newModel(rt, cfg)
			defer m.abandon()
			rt.Repeat(m.actions())
			m.finish()
		}))
	}
}

// fate is what the model knows of a message from what its call reported.
type fate int

const (
	mustArrive fate = iota + 1
	mustNotArrive
	mayArrive // the call failed the connection partway: bytes may have left
)

// modelMsg is one data message the driver tried to send.
type modelMsg struct {
	id      int
	call    string // the call, as reported in failures
	typ     rally.MessageType
	payload []byte
	fate    fate
	result  string // what the call returned
	held    bool   // sent while a Writer streamed: held for the message's end
}

// completion records the calls of one SendDone completion.
type completion struct {
	calls   atomic.Int32
	err     atomic.Value // the first error it got, as a string
	dropped bool         // SendDone returned Dropped
}

type model struct {
	t   *rapid.T
	cfg modelConfig
	c   *rally.Conn
	pr  *peerReader

	baseline int // goroutines before the connection

	msgs        []*modelMsg
	completions map[int]*completion
	pings       []string // payloads of rally's Pings that returned nil
	nextID      int

	drains         atomic.Int32
	drainSeen      chan struct{}
	queuedSince    bool // a Send returned Queued since the last quiescent point
	drainsAtQuiet  int32
	writer         io.WriteCloser
	writerMsg      *modelMsg
	writerRest     []byte
	writerFailed   bool
	sentWhileOpen  bool
	closeCalled    bool
	closeNowCalled bool
	reset          bool
	readEnded      chan error
	finished       bool
	failed         bool // the connection ended before this side closed it
	limitCloses    bool // BufferLimitAction is CloseConnection
	rallyClosing   bool // rally began a close handshake of its own
	background     sync.WaitGroup
	receivers      []*receiver // other connections sendFanOut sends to
}

func newModel(rt *rapid.T, cfg modelConfig) *model {
	m := &model{
		t:           rt,
		cfg:         cfg,
		completions: map[int]*completion{},
		drainSeen:   make(chan struct{}, 1),
		readEnded:   make(chan error, 1),
		baseline:    runtime.NumGoroutine(),
	}
	opts := rally.ConnOptions{
		CloseTimeout: 3 * time.Second,
		OnDrain: func(*rally.Conn) {
			m.drains.Add(1)
			select {
			case m.drainSeen <- struct{}{}:
			default:
			}
		},
	}
	switch rapid.IntRange(0, 2).Draw(rt, "bufferLimit") {
	case 1:
		opts.BufferLimit = -1
	case 2:
		opts.BufferLimit = 64 << 10
		if rapid.Bool().Draw(rt, "closeOverLimit") {
			opts.BufferLimitAction = rally.CloseConnection
			m.limitCloses = true
		}
	}
	m.open(opts)
	if m.cfg.loop {
		return m // the Server's Close callback reports the end
	}
	go func() {
		for {
			if _, _, err := m.c.Read(context.Background()); err != nil {
				m.readEnded <- err
				return
			}
		}
	}()
	return m
}

// open connects rally's side (Upgrade on the accepted connection, or
// Dial) with the raw peer on the other, both with small socket buffers,
// over TLS when the configuration says so.
func (m *model) open(opts rally.ConnOptions) {
	t := m.t
	// The raw peer's receive buffer is made small before its socket
	// connects: shrunk afterwards, it would be smaller than the window
	// already advertised (the kernel prunes, the sender backs off). The
	// peer listens in the client configurations (accepted sockets inherit
	// the listener's buffer) and dials in the others.
	var lc net.ListenConfig
	if !m.cfg.server {
		lc.Control = smallModelReceiveBuffer
	}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	var z *rally.CompressionOptions
	offer, answer := "", ""
	if m.cfg.deflate {
		z = &rally.CompressionOptions{Threshold: -1}
		offer, answer = "permessage-deflate", "permessage-deflate"
		if !m.cfg.takeover {
			if m.cfg.server {
				offer = "permessage-deflate; server_no_context_takeover"
			} else {
				z.ClientNoContextTakeover = true
				answer = "permessage-deflate; client_no_context_takeover"
			}
		}
	} else if !m.cfg.server {
		z = &rally.CompressionOptions{Disabled: true}
	}
	// accepted is the listening end's connection, TLS when asked.
	accepted := func(buffers func(*net.TCPConn)) (net.Conn, error) {
		nc, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		buffers(nc.(*net.TCPConn))
		if m.cfg.tls {
			return tls.Server(nc, modelTLS()), nil
		}
		return nc, nil
	}
	var p *rawpeer.Peer
	if m.cfg.loop {
		// The driver's calls come from the test's goroutine, outside the
		// loop: they keep the contract of any goroutine (a blocking Write
		// waits for the loop to write its frame).
		conns := make(chan *rally.Conn, 1)
		s := &rally.Server{
			EventLoop:  true,
			EventLoops: 1,
			Options:    &rally.AcceptOptions{ConnOptions: opts, Compression: z},
			Open:       func(c *rally.Conn) { conns <- c },
			Close:      func(c *rally.Conn, err *rally.CloseError) { m.readEnded <- err },
		}
		served := make(chan struct{})
		go func() {
			s.Serve(&modelListener{ln, func(nc net.Conn) { nc.(*net.TCPConn).SetWriteBuffer(modelSocketBuffer) }})
			close(served)
		}()
		p, err = dialModelPeer(addr, offer, false)
		if err != nil {
			t.Fatalf("raw client handshake: %v", err)
		}
		m.c = <-conns
		ln.Close()
		<-served
		m.pr = startPeerReader(p, !m.cfg.server, m.cfg.takeover)
		return
	}
	if m.cfg.server {
		conns := make(chan *rally.Conn, 1)
		go func() {
			nc, err := accepted(func(tc *net.TCPConn) { tc.SetWriteBuffer(modelSocketBuffer) })
			if err != nil {
				conns <- nil
				return
			}
			c, _, err := rally.Upgrade(nc, &rally.AcceptOptions{ConnOptions: opts, Compression: z})
			if err != nil {
				c = nil
			}
			conns <- c
		}()
		p, err = dialModelPeer(addr, offer, m.cfg.tls)
		if err != nil {
			t.Fatalf("raw client handshake: %v", err)
		}
		m.c = <-conns
		if m.c == nil {
			p.Close()
			t.Fatal("Upgrade failed")
		}
	} else {
		peers := make(chan *rawpeer.Peer, 1)
		go func() {
			nc, err := accepted(func(*net.TCPConn) {}) // small receive buffer from the listener
			if err != nil {
				peers <- nil
				return
			}
			p, _, err := rawpeer.AcceptServer(nc, extHeader(answer), wireTimeout())
			if err != nil {
				p = nil
			}
			peers <- p
		}()
		var d net.Dialer
		ctx, cancel := context.WithTimeout(context.Background(), wireTimeout())
		defer cancel()
		scheme := "ws://"
		if m.cfg.tls {
			scheme = "wss://"
		}
		m.c, _, err = rally.Dial(ctx, scheme+addr+"/", &rally.DialOptions{
			ConnOptions: opts,
			Compression: z,
			TLSConfig:   &tls.Config{InsecureSkipVerify: true},
			NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := d.DialContext(ctx, network, addr)
				if err == nil {
					nc.(*net.TCPConn).SetWriteBuffer(modelSocketBuffer)
				}
				return nc, err
			},
		})
		p = <-peers
		if err != nil || p == nil {
			if p != nil {
				p.Close()
			}
			if m.c != nil {
				m.c.CloseNow()
			}
			t.Fatalf("Dial against the raw server: %v", err)
		}
	}
	m.pr = startPeerReader(p, !m.cfg.server, m.cfg.takeover)
}

// modelListener sets each accepted connection's socket buffers.
type modelListener struct {
	net.Listener
	buffers func(net.Conn)
}

func (l *modelListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		l.buffers(nc)
	}
	return nc, err
}

// smallModelReceiveBuffer is a dialer's or listener's Control: the raw
// peer's socket gets a receive buffer of modelSocketBuffer before it
// connects.
var smallModelReceiveBuffer = receiveBufferBeforeConnect(modelSocketBuffer)

// dialModelPeer connects a raw client peer to addr, over TLS when asked,
// and does the opening handshake offering extensions ext.
func dialModelPeer(addr, ext string, overTLS bool) (*rawpeer.Peer, error) {
	d := &net.Dialer{Timeout: wireTimeout(), Control: smallModelReceiveBuffer}
	var nc net.Conn
	var err error
	if overTLS {
		nc, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		nc, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	p := rawpeer.NewPeer(nc, true)
	p.SetTimeout(wireTimeout())
	key := rawpeer.NewKey()
	if err := p.WriteRaw(rawpeer.HandshakeRequest(addr, "/", key, extHeader(ext))); err != nil {
		p.Close()
		return nil, err
	}
	if _, err := p.ReadResponse(key); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// tcpOf is the TCP connection under nc (itself, or under TLS).
func tcpOf(nc net.Conn) *net.TCPConn {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	return nc.(*net.TCPConn)
}

// modelTLS is a server configuration with a certificate made once for the
// model's TLS connections.
var modelTLS = sync.OnceValue(func() *tls.Config {
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	defer ts.Close()
	return ts.TLS.Clone()
})

// peerReader reads every frame rally sends, in a goroutine, as fast or as
// slowly as the driver says, or not at all while paused. It answers a close
// frame with the same code, as a peer does, and the driver may ping or
// reset through it.
type peerReader struct {
	p      *rawpeer.Peer
	server bool // the raw peer is the server: it closes TCP first

	wmu     sync.Mutex // writes: the driver's pings, the reader's close reply
	replied bool       // a close frame went out: nothing more is written

	mu      sync.Mutex
	frames  []rawpeer.Frame
	changed chan struct{} // closed and replaced on every frame
	paused  bool
	resumed chan struct{}
	slow    bool
	err     error // how reading ended
	done    chan struct{}
	pings   []string // payloads of the peer's pings

	partial    []byte // the message being assembled
	compressed bool
	inflater   *oracleInflater
	ids        map[int]bool // ids of the whole messages read
}

func startPeerReader(p *rawpeer.Peer, server, takeover bool) *peerReader {
	r := &peerReader{p: p, server: server, changed: make(chan struct{}), done: make(chan struct{}),
		inflater: &oracleInflater{takeover: takeover}, ids: map[int]bool{}}
	p.SetTimeout(30 * time.Second) // a stuck connection fails the sequence, it does not hang it
	go r.loop()
	return r
}

func (r *peerReader) loop() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for r.paused {
			ch := r.resumed
			r.mu.Unlock()
			<-ch
			r.mu.Lock()
		}
		slow := r.slow
		r.mu.Unlock()
		if slow {
			time.Sleep(200 * time.Microsecond) // a slow reader, not a wait for an event
		}
		f, err := r.p.ReadFrame()
		if err != nil {
			r.wmu.Lock()
			r.replied = true
			r.p.Close() // as a peer does once the other side has closed
			r.wmu.Unlock()
		}
		r.mu.Lock()
		if err != nil {
			r.err = err
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
			return
		}
		r.frames = append(r.frames, f)
		r.assemble(f)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		if f.Opcode == rawpeer.OpClose {
			code, _, _ := rawpeer.ParseClose(f.Payload)
			r.wmu.Lock()
			if !r.replied {
				r.replied = true
				r.p.WriteFrame(rawpeer.Close(code, ""))
				if r.server {
					tcpOf(r.p.NetConn()).CloseWrite()
				}
			}
			r.wmu.Unlock()
		}
	}
}

// assemble notes the id of each whole message, inflated when it is
// compressed, for the driver to wait on. The caller holds mu.
func (r *peerReader) assemble(f rawpeer.Frame) {
	switch f.Opcode {
	case rawpeer.OpText, rawpeer.OpBinary:
		r.compressed, r.partial = f.Rsv&rawpeer.Rsv1 != 0, append(r.partial[:0], f.Payload...)
	case rawpeer.OpContinuation:
		r.partial = append(r.partial, f.Payload...)
	default:
		return
	}
	if !f.Fin {
		return
	}
	p := r.partial
	if r.compressed {
		var err error
		if p, err = r.inflater.inflate(p); err != nil {
			return // checkWire reports it
		}
	}
	if id, ok := messageID(p); ok {
		r.ids[id] = true
	}
}

func (r *peerReader) pause() {
	r.mu.Lock()
	if !r.paused {
		r.paused = true
		r.resumed = make(chan struct{})
	}
	r.mu.Unlock()
}

func (r *peerReader) resume() {
	r.mu.Lock()
	if r.paused {
		r.paused = false
		close(r.resumed)
	}
	r.mu.Unlock()
}

func (r *peerReader) isPaused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused
}

func (r *peerReader) setSlow(slow bool) {
	r.mu.Lock()
	r.slow = slow
	r.mu.Unlock()
}

// ping sends a ping unless the peer has closed or been reset; it reports
// whether it did.
func (r *peerReader) ping(payload string) bool {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.replied {
		return false
	}
	if r.p.WriteFrame(rawpeer.Ping([]byte(payload))) != nil {
		return false
	}
	r.mu.Lock()
	r.pings = append(r.pings, payload)
	r.mu.Unlock()
	return true
}

func (r *peerReader) reset() {
	r.wmu.Lock()
	r.replied = true
	tcpOf(r.p.NetConn()).SetLinger(0)
	r.p.Close()
	r.wmu.Unlock()
	r.resume()
}

// waitFor waits until cond holds for the frames read so far, or reading
// ended, or wireTimeout passed; it reports whether cond held.
func (r *peerReader) waitFor(cond func(frames []rawpeer.Frame) bool) bool {
	timeout := time.After(wireTimeout())
	for {
		r.mu.Lock()
		ok, ended, ch := cond(r.frames), r.err != nil, r.changed
		r.mu.Unlock()
		if ok || ended {
			return ok
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

func (r *peerReader) snapshot() ([]rawpeer.Frame, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rawpeer.Frame(nil), r.frames...), append([]string(nil), r.pings...)
}

// --- drawing what to send ---

func (m *model) newMessage(call string, typ rally.MessageType, size int) *modelMsg {
	m.nextID++
	id := m.nextID
	prefix := fmt.Sprintf("m%06d:", id)
	size = max(size, len(prefix))
	var fill []byte
	switch {
	case typ == rally.Text:
		fill = jsonish(id, size-len(prefix))
	case id%2 == 0:
		fill = noise(id, size-len(prefix))
	default:
		fill = bytes.Repeat([]byte{byte(id)}, size-len(prefix))
	}
	msg := &modelMsg{id: id, call: call, typ: typ, payload: append([]byte(prefix), fill...), held: m.writer != nil}
	m.msgs = append(m.msgs, msg)
	return msg
}

func drawSize(t *rapid.T, label string) int {
	switch k := rapid.IntRange(0, 9).Draw(t, label+"Class"); {
	case k <= 4:
		return rapid.IntRange(0, 200).Draw(t, label)
	case k <= 7:
		return rapid.IntRange(200, 8000).Draw(t, label)
	case k == 8:
		return rapid.IntRange(8000, 70000).Draw(t, label)
	default:
		return rapid.IntRange(70000, 300000).Draw(t, label)
	}
}

func drawType(t *rapid.T) rally.MessageType {
	return rapid.SampledFrom([]rally.MessageType{rally.Text, rally.Binary}).Draw(t, "type")
}

// ctxKinds: a context that never ends, one already cancelled, one that
// expires very soon.
var ctxKinds = []string{"background", "cancelled", "expiring"}

func (m *model) drawContext(t *rapid.T) (context.Context, context.CancelFunc, string) {
	kind := rapid.SampledFrom(ctxKinds).Draw(t, "ctx")
	switch kind {
	case "cancelled":
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel, kind
	case "expiring":
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rapid.IntRange(1, 5).Draw(t, "expiresMs"))*time.Millisecond)
		return ctx, cancel, kind
	}
	// A call that may wait has a peer that reads, at least after a while.
	if m.pr.isPaused() {
		time.AfterFunc(5*time.Millisecond, m.pr.resume)
	}
	return context.Background(), func() {}, kind
}

// ended reports whether the connection is known to be over or closing on
// this side's initiative.
func (m *model) ended() bool {
	select {
	case <-m.c.Done():
		return true
	default:
	}
	return m.closeCalled || m.closeNowCalled || m.rallyClosing
}

func isDone(c *rally.Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// blockingFate classifies what a blocking call returned.
func (m *model) blockingFate(err error, wasEnded bool) fate {
	switch {
	case err == nil:
		if wasEnded {
			m.t.Errorf("a blocking call succeeded after Close or CloseNow")
		}
		return mustArrive
	case wasEnded:
		return mustNotArrive
	case (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !isDone(m.c):
		return mustNotArrive // withdrawn: the connection goes on
	}
	return mayArrive
}

// pongAllowance is what BufferedAmount may hold right after a blocking
// call returned nil: pongs queued since, at most one per ping of the peer.
func (m *model) pongAllowance() int {
	_, pings := m.pr.snapshot()
	return len(pings) * (2 + 4 + 125)
}

func (m *model) checkLeftAfter(call string) {
	if m.ended() || m.reset {
		return
	}
	if ba := m.c.BufferedAmount(); ba > m.pongAllowance() {
		m.t.Errorf("%s returned nil with %d bytes still waiting (BufferedAmount), more than the pongs queued since", call, ba)
	}
}

// --- the actions ---

func (m *model) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Send":             m.send,
		"SendBurst":        m.sendBurst,
		"SendDone":         m.sendDone,
		"SendPrepared":     m.sendPrepared,
		"SendPreparedDone": m.sendPreparedDone,
		"SendFanOut":       m.sendFanOut,
		"SendReused":       m.sendReused,
		"Write":            m.write,
		"WritePrepared":    m.writePrepared,
		"WriterOpen":       m.writerOpen,
		"WriterWrite":      m.writerWrite,
		"WriterClose":      m.writerClose,
		"Ping":             m.ping,
		"Close":            m.close,
		"CloseNow":         m.closeNow,
		"Quiesce":          m.quiesce,
		"PeerPause":        func(*rapid.T) { m.pr.pause() },
		"PeerResume":       func(*rapid.T) { m.pr.resume() },
		"PeerSlow":         func(t *rapid.T) { m.pr.setSlow(rapid.Bool().Draw(t, "slow")) },
		"PeerPing":         m.peerPing,
		"PeerReset":        m.peerReset,
	}
}

func (m *model) sendFate(st rally.SendStatus, err error, wasEnded bool) fate {
	switch {
	case st == rally.Dropped:
		if err == nil && m.limitCloses {
			m.rallyClosing = true // the limit's policy started a close handshake
		}
		return mustNotArrive
	case err != nil:
		m.t.Errorf("Send returned %v with error %v", st, err)
		return mayArrive
	case wasEnded:
		m.t.Errorf("Send returned %v after Close or CloseNow", st)
	}
	if st == rally.Queued {
		m.queuedSince = true
	}
	if m.writer != nil {
		m.sentWhileOpen = true
	}
	return mustArrive
}

func (m *model) send(t *rapid.T) {
	msg := m.newMessage("Send", drawType(t), drawSize(t, "size"))
	wasEnded := m.ended()
	st, err := m.c.Send(msg.typ, msg.payload)
	msg.result = fmt.Sprint(st, ", ", err)
	msg.fate = m.sendFate(st, err, wasEnded)
}

// sendBurst sends several messages in a row, as a publisher does: the
// quickest way to backpressure.
func (m *model) sendBurst(t *rapid.T) {
	n := rapid.IntRange(2, 24).Draw(t, "burst")
	size := rapid.IntRange(0, 16<<10).Draw(t, "burstSize")
	for range n {
		msg := m.newMessage("Send", rally.Binary, size)
		wasEnded := m.ended()
		st, err := m.c.Send(msg.typ, msg.payload)
		msg.result = fmt.Sprint(st, ", ", err)
		msg.fate = m.sendFate(st, err, wasEnded)
	}
}

func (m *model) sendDone(t *rapid.T) { m.sendWithCompletion(t, false) }

// sendPreparedDone is sendDone with a prepared message: a frame shared
// with other queues, and a completion.
func (m *model) sendPreparedDone(t *rapid.T) { m.sendWithCompletion(t, true) }

func (m *model) sendWithCompletion(t *rapid.T, prepared bool) {
	call := "SendDone"
	if prepared {
		call = "SendPreparedDone"
	}
	msg := m.newMessage(call, drawType(t), drawSize(t, "size"))
	comp := &completion{}
	m.completions[msg.id] = comp
	wasEnded := m.ended()
	done := func(err error) {
		comp.err.CompareAndSwap(nil, fmt.Sprint(err))
		comp.calls.Add(1)
	}
	var st rally.SendStatus
	var err error
	if prepared {
		pm, perr := rally.NewPreparedMessage(msg.typ, msg.payload)
		if perr != nil {
			t.Fatal(perr)
		}
		st, err = m.c.SendPreparedDone(pm, done)
	} else {
		st, err = m.c.SendDone(msg.typ, msg.payload, done)
	}
	comp.dropped = st == rally.Dropped
	msg.result = fmt.Sprint(st, ", ", err)
	msg.fate = m.sendFate(st, err, wasEnded)
	// A failure is reported once: by the call's result or by its
	// completion, never both.
	if err != nil && comp.calls.Load() > 0 {
		t.Errorf("%s returned %v, %v and its completion also reported %v", call, st, err, comp.err.Load())
	}
}

func (m *model) sendPrepared(t *rapid.T) {
	msg := m.newMessage("SendPrepared", drawType(t), drawSize(t, "size"))
	pm, err := rally.NewPreparedMessage(msg.typ, msg.payload)
	if err != nil {
		t.Fatal(err)
	}
	wasEnded := m.ended()
	st, err := m.c.SendPrepared(pm)
	msg.result = fmt.Sprint(st, ", ", err)
	msg.fate = m.sendFate(st, err, wasEnded)
}

// sendFanOut sends prepared messages as a chat room or a publish does:
// each message goes to this connection and to others (connections of
// earlier sequences whose peers are gone, and a message sent again), often
// several in one cork, so that the queue gathers references to frames
// other connections hold too. The frames must arrive whole and in order
// here whatever the other connections do with them.
func (m *model) sendFanOut(t *rapid.T) {
	n := rapid.IntRange(1, 8).Draw(t, "fanOut")
	corked := rapid.Bool().Draw(t, "fanOutCorked")
	var pms []*rally.PreparedMessage
	var msgs []*modelMsg
	for range n {
		msg := m.newMessage("SendPrepared(fan-out)", drawType(t), rapid.IntRange(0, 20000).Draw(t, "fanOutSize"))
		pm, err := rally.NewPreparedMessage(msg.typ, msg.payload)
		if err != nil {
			t.Fatal(err)
		}
		pms, msgs = append(pms, pm), append(msgs, msg)
	}
	others := rapid.IntRange(0, 3).Draw(t, "fanOutOthers")
	send := func() {
		for i, pm := range pms {
			wasEnded := m.ended()
			st, err := m.c.SendPrepared(pm)
			msgs[i].result = fmt.Sprint(st, ", ", err)
			msgs[i].fate = m.sendFate(st, err, wasEnded)
			for k := range others {
				m.fanOut(t, k).send(t, pm)
			}
		}
	}
	if corked {
		m.c.Cork(send)
	} else {
		send()
	}
}

// receiver is another server connection sendFanOut sends the same
// prepared messages to, over a socket pair with small buffers whose other
// end reads them all: they must arrive there whole too.
type receiver struct {
	c        *rally.Conn
	peer     net.Conn
	sent     [][]byte // payloads of the messages accepted, in order
	got      [][]byte // payloads the peer read
	err      error    // why the peer's reading ended
	readDone chan struct{}
}

// fanOut returns receiver k, connected on first use.
func (m *model) fanOut(t *rapid.T, k int) *receiver {
	for len(m.receivers) <= k {
		c, peer, err := rally.ServerConnPairForTest(nil)
		if err != nil {
			t.Fatal(err)
		}
		r := &receiver{c: c, peer: peer, readDone: make(chan struct{})}
		go func() {
			defer close(r.readDone)
			p := rawpeer.NewPeer(peer, true)
			p.SetReadTimeout(0)
			for {
				f, err := p.ReadFrame()
				if err != nil {
					r.err = err
					return
				}
				r.got = append(r.got, f.Payload)
			}
		}()
		m.receivers = append(m.receivers, r)
	}
	return m.receivers[k]
}

func (r *receiver) send(t *rapid.T, pm *rally.PreparedMessage) {
	st, err := r.c.SendPrepared(pm)
	if st == rally.Dropped || err != nil {
		t.Fatalf("SendPrepared to a fan-out receiver returned %v, %v", st, err)
	}
	r.sent = append(r.sent, pm.Payload())
}

// closeReceivers waits until each receiver's peer has read what was sent
// to it, checks it, and closes them (check false: only close).
func (m *model) closeReceivers(check bool) {
	for i, r := range m.receivers {
		deadline := time.After(wireTimeout())
		for check && r.c.BufferedAmount() > 0 {
			select {
			case <-deadline:
				m.t.Fatalf("fan-out receiver %d: its peer reads, yet BufferedAmount stays %d", i, r.c.BufferedAmount())
			case <-time.After(time.Millisecond):
			}
		}
		r.c.CloseNow()
		<-r.readDone
		r.peer.Close()
		if !check {
			continue
		}
		if len(r.got) != len(r.sent) {
			m.t.Fatalf("fan-out receiver %d: the peer read %d messages, %d were sent (reading ended with %v)", i, len(r.got), len(r.sent), r.err)
		}
		for j, p := range r.sent {
			if !bytes.Equal(r.got[j], p) {
				m.t.Fatalf("fan-out receiver %d: message %d of %d differs from the prepared message sent", i, j, len(r.sent))
			}
		}
	}
	m.receivers = nil
}

// sendReused sends messages from one buffer that is overwritten as soon
// as each send returns (often in a cork, which gathers them): what
// reaches the peer must be what the buffer held during the call.
func (m *model) sendReused(t *rapid.T) {
	n := rapid.IntRange(1, 8).Draw(t, "reused")
	size := rapid.IntRange(0, 20000).Draw(t, "reusedSize")
	scratch := make([]byte, 0, size+16)
	send := func() {
		for range n {
			msg := m.newMessage("Send(reused buffer)", rally.Binary, size)
			scratch = append(scratch[:0], msg.payload...)
			wasEnded := m.ended()
			st, err := m.c.Send(msg.typ, scratch)
			for i := range scratch {
				scratch[i] = 0xee
			}
			msg.result = fmt.Sprint(st, ", ", err)
			msg.fate = m.sendFate(st, err, wasEnded)
		}
	}
	if rapid.Bool().Draw(t, "reusedCorked") {
		m.c.Cork(send)
	} else {
		send()
	}
}

// blocking runs call, with the peer pinging meanwhile when drawn so.
func (m *model) blocking(t *rapid.T, call func() error) error {
	if !rapid.Bool().Draw(t, "peerPingsDuring") || m.reset {
		return call()
	}
	result := make(chan error, 1)
	m.background.Go(func() { result <- call() })
	m.pr.ping(fmt.Sprintf("during %d", m.nextID))
	select {
	case err := <-result:
		return err
	case <-time.After(4 * wireTimeout()):
		t.Fatalf("a blocking call did not return while the peer pinged and read")
		return nil
	}
}

func (m *model) write(t *rapid.T) {
	if m.writer != nil {
		t.Skip("a Writer is open: a Write would wait for it")
	}
	msg := m.newMessage("Write", drawType(t), drawSize(t, "size"))
	ctx, cancel, kind := m.drawContext(t)
	defer cancel()
	msg.call += "(" + kind + ")"
	wasEnded := m.ended()
	// The caller's buffer is overwritten as soon as Write returns: the
	// queue may have referred to it while the call waited, never after.
	buf := append([]byte(nil), msg.payload...)
	err := m.blocking(t, func() error {
		err := m.c.Write(ctx, msg.typ, buf)
		for i := range buf {
			buf[i] = 0xee
		}
		return err
	})
	msg.result = fmt.Sprint(err)
	msg.fate = m.blockingFate(err, wasEnded)
	if err == nil {
		m.checkLeftAfter("Write")
	}
}

func (m *model) writePrepared(t *rapid.T) {
	if m.writer != nil {
		t.Skip("a Writer is open: a Write would wait for it")
	}
	msg := m.newMessage("WritePrepared", drawType(t), drawSize(t, "size"))
	pm, err := rally.NewPreparedMessage(msg.typ, msg.payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel, kind := m.drawContext(t)
	defer cancel()
	msg.call += "(" + kind + ")"
	wasEnded := m.ended()
	err = m.blocking(t, func() error { return m.c.WritePrepared(ctx, pm) })
	msg.result = fmt.Sprint(err)
	msg.fate = m.blockingFate(err, wasEnded)
	if err == nil {
		m.checkLeftAfter("WritePrepared")
	}
}

func (m *model) writerOpen(t *rapid.T) {
	if m.writer != nil {
		t.Skip("a Writer is open already")
	}
	typ := drawType(t)
	total := drawSize(t, "messageSize")
	wasEnded := m.ended()
	if m.pr.isPaused() {
		time.AfterFunc(5*time.Millisecond, m.pr.resume)
	}
	// The Writer's context stays alive: ending it while a fragment waits
	// fails the connection by design, which Write's contexts cover.
	w, err := m.c.Writer(context.Background(), typ)
	if err != nil {
		if !wasEnded && !isDone(m.c) && !m.reset {
			t.Errorf("Writer on a live connection: %v", err)
		}
		return
	}
	if wasEnded {
		t.Errorf("Writer opened after Close or CloseNow")
	}
	msg := m.newMessage("Writer", typ, total)
	msg.fate = mustArrive
	m.writer, m.writerMsg, m.writerRest = w, msg, msg.payload
	m.writerFailed, m.sentWhileOpen = false, false
}

func (m *model) writerWrite(t *rapid.T) {
	if m.writer == nil {
		t.Skip("no Writer is open")
	}
	n := rapid.IntRange(0, len(m.writerRest)).Draw(t, "chunk")
	if m.pr.isPaused() {
		time.AfterFunc(5*time.Millisecond, m.pr.resume)
	}
	chunk := m.writerRest[:n]
	m.writerRest = m.writerRest[n:]
	err := m.blocking(t, func() error {
		_, err := m.writer.Write(chunk)
		return err
	})
	if err != nil {
		m.writerFailed = true
		m.writerMsg.fate = mayArrive
		m.writerMsg.result = "Write: " + err.Error()
	} else if !m.sentWhileOpen && n >= 32<<10 {
		m.checkLeftAfter("Writer.Write")
	}
}

func (m *model) writerClose(t *rapid.T) {
	if m.writer == nil {
		t.Skip("no Writer is open")
	}
	if m.pr.isPaused() {
		time.AfterFunc(5*time.Millisecond, m.pr.resume)
	}
	m.closeWriter()
}

func (m *model) closeWriter() {
	m.pr.resume() // the rest of the message may have to wait for the peer
	for _, msg := range m.msgs {
		msg.held = false // released when the message ends (or failed by a Close before)
	}
	rest := m.writerRest
	var err error
	if len(rest) > 0 {
		_, err = m.writer.Write(rest)
	}
	if cerr := m.writer.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		m.writerMsg.fate = mayArrive
		m.writerMsg.result = "Close: " + err.Error()
	} else if m.writerFailed {
		m.t.Errorf("Writer.Close returned nil after a Write of the message failed")
	}
	m.writer, m.writerMsg, m.writerRest = nil, nil, nil
}

func (m *model) ping(t *rapid.T) {
	ctx, cancel, kind := m.drawContext(t)
	defer cancel()
	m.nextID++
	payload := fmt.Sprintf("r%06d", m.nextID)
	wasEnded := m.ended()
	err := m.c.Ping(ctx, []byte(payload))
	if err != nil && !wasEnded && isDone(m.c) {
		m.failed = true // the ping had begun to leave: the connection is failed
	}
	if err == nil {
		if wasEnded {
			t.Errorf("Ping(%s) succeeded after Close or CloseNow", kind)
		}
		m.pings = append(m.pings, payload)
	}
}

// rare skips an action that ends the connection most of the times it is
// drawn, so that sequences live long enough to matter.
func rare(t *rapid.T, label string) {
	if rapid.IntRange(0, 7).Draw(t, label) != 0 {
		t.Skip("actions that end the connection are rare")
	}
}

func (m *model) close(t *rapid.T) {
	rare(t, "closeChance")
	if first := rapid.Bool().Draw(t, "closeWriterFirst"); m.writer != nil && first {
		m.closeWriter()
	}
	code := rapid.SampledFrom([]uint16{rally.CloseNormal, rally.CloseGoingAway, 4000}).Draw(t, "code")
	wasEnded := m.ended() || m.reset
	m.failed = m.failed || (!m.ended() && isDone(m.c))
	m.pr.resume()
	m.closeCalled = true
	if m.writer != nil {
		// Close does not wait for the Writer's message: its close frame
		// follows the fragments already sent, and the sends held for the
		// message's end never leave (their completions say ErrClosed).
		for _, msg := range m.msgs {
			if msg.held && msg.fate == mustArrive {
				msg.fate = mustNotArrive
			}
		}
		if m.writerMsg != nil {
			m.writerMsg.fate = mayArrive
		}
	}
	err := m.c.Close(code, "model")
	if m.writer != nil {
		m.closeWriter() // fails with ErrClosed: the message stays unfinished
	}
	if !wasEnded && err != nil {
		t.Errorf("Close(%d) on a live connection whose peer answers returned %v", code, err)
	}
}

func (m *model) closeNow(t *rapid.T) {
	rare(t, "closeNowChance")
	m.closeNowCalled = true
	m.c.CloseNow()
}

func (m *model) peerPing(t *rapid.T) {
	if m.reset {
		t.Skip("the peer is gone")
	}
	m.nextID++
	m.pr.ping(fmt.Sprintf("q%06d", m.nextID))
}

func (m *model) peerReset(t *rapid.T) {
	if m.reset {
		t.Skip("the peer is gone")
	}
	rare(t, "resetChance")
	m.reset = true
	m.pr.reset()
}

// quiesce lets the peer read everything, and then checks what holds when
// nothing waits: BufferedAmount 0, every completion run with nil, OnDrain
// after a Queued.
func (m *model) quiesce(t *rapid.T) {
	if m.writer != nil || m.ended() || m.reset {
		t.Skip("nothing to quiesce: a Writer is open or the connection is ending")
	}
	m.pr.resume()
	m.pr.setSlow(false)
	last := 0
	for _, msg := range m.msgs {
		if msg.fate == mustArrive {
			last = msg.id
		}
	}
	m.nextID++
	probe := fmt.Sprintf("q%06d", m.nextID)
	if !m.pr.ping(probe) {
		return
	}
	lastSeen := func(frames []rawpeer.Frame) bool {
		if last != 0 && !m.pr.ids[last] {
			return false
		}
		for _, f := range frames {
			if f.Opcode == rawpeer.OpPong && string(f.Payload) == probe {
				return true
			}
		}
		return false
	}
	if !m.pr.waitFor(lastSeen) {
		if isDone(m.c) {
			return
		}
		frames, _ := m.pr.snapshot()
		var seen []string
		for _, f := range frames {
			seen = append(seen, describe(f))
		}
		m.pr.mu.Lock()
		perr := m.pr.err
		m.pr.mu.Unlock()
		t.Fatalf("quiescent point: the peer did not get message %d and the pong to %s within %v (BufferedAmount %d); it read %q, reading ended with %v",
			last, probe, wireTimeout(), m.c.BufferedAmount(), seen, perr)
	}
	// The pong left after the last message (or overtook it into the
	// kernel); a completion or a drain may still be on its way from the
	// goroutine that wrote them: wait for them as events.
	// The goroutine that wrote the last bytes may not have counted them
	// yet (over TLS it writes outside the queue's lock): BufferedAmount
	// must reach 0, and nothing signals when.
	deadline := time.After(wireTimeout())
	for ba := m.c.BufferedAmount(); ba != 0; ba = m.c.BufferedAmount() {
		select {
		case <-deadline:
			t.Fatalf("quiescent point: the peer has read everything, yet BufferedAmount stays %d", ba)
		case <-time.After(time.Millisecond):
		}
	}
	for _, msg := range m.msgs {
		comp := m.completions[msg.id]
		if comp == nil || comp.dropped {
			continue
		}
		for comp.calls.Load() == 0 {
			select {
			case <-deadline:
				t.Fatalf("quiescent point: the completion of message %d (%s) has not run though the peer has read it", msg.id, msg.result)
			case <-time.After(time.Millisecond):
			}
		}
		if e := comp.err.Load(); e != "<nil>" && msg.fate == mustArrive {
			t.Errorf("quiescent point: the completion of message %d, which the peer read, reported %v", msg.id, e)
		}
	}
	if m.queuedSince {
		for m.drains.Load() == m.drainsAtQuiet {
			select {
			case <-m.drainSeen:
			case <-deadline:
				t.Fatalf("quiescent point: a Send returned Queued, the peer read everything, and OnDrain was not called")
			}
		}
	}
	m.queuedSince = false
	m.drainsAtQuiet = m.drains.Load()
}

// messageID reads the id a message of the model starts with.
func messageID(p []byte) (int, bool) {
	if len(p) < 8 || p[0] != 'm' || p[7] != ':' {
		return 0, false
	}
	id, err := strconv.Atoi(string(p[1:7]))
	return id, err == nil
}

// --- the end of a sequence ---

// abandon tears the connection down after a sequence stopped early (a
// failed check), so that the next sequence starts clean.
func (m *model) abandon() {
	if m.finished {
		return
	}
	m.pr.resume()
	m.c.CloseNow()
	m.closeReceivers(false)
	m.pr.p.Close()
	waitOrDump(m.pr.done, "the peer's reader")
	waitOrDump(m.readEnded, "rally's Read")
	ops := make(chan struct{})
	go func() { m.background.Wait(); close(ops) }()
	waitOrDump(ops, "the blocking calls")
}

// waitOrDump waits for ch, bounded: a goroutine that does not end after
// CloseNow is a hang worth every stack, not a silent wait.
func waitOrDump[T any](ch <-chan T, what string) {
	select {
	case <-ch:
	case <-time.After(4 * wireTimeout()):
		panic(what + " did not return after CloseNow; all goroutines:\n" + allStacks())
	}
}

func (m *model) finish() {
	t := m.t
	m.finished = true
	if m.writer != nil {
		m.pr.resume()
		m.closeWriter()
	}
	if !m.closeCalled && !m.closeNowCalled && !m.reset {
		m.pr.resume()
		wasDone := isDone(m.c)
		m.failed = m.failed || wasDone
		m.closeCalled = true
		if err := m.c.Close(rally.CloseNormal, "end"); err != nil && !wasDone {
			t.Errorf("Close at the end on a live connection whose peer answers returned %v", err)
		}
	}
	if m.reset {
		m.c.CloseNow()
	}
	m.pr.resume()
	select {
	case <-m.c.Done():
	case <-time.After(2 * wireTimeout()):
		m.c.CloseNow()
		t.Errorf("the connection did not end after Close")
	}
	select {
	case <-m.pr.done:
	case <-time.After(2 * wireTimeout()):
		t.Errorf("rally did not close TCP after the connection ended")
	}
	m.pr.p.Close()
	select {
	case <-m.readEnded:
	case <-time.After(wireTimeout()):
		t.Errorf("Read did not return after the connection ended")
	}
	m.background.Wait()
	for _, msg := range m.msgs {
		m.failed = m.failed || msg.fate == mayArrive
	}
	clean := !m.reset && !m.closeNowCalled && !m.failed
	m.closeReceivers(true)
	m.checkWire(clean)
	m.checkCompletions()
	m.checkGoroutines()
}

// checkWire holds the frames the peer read against the model.
func (m *model) checkWire(clean bool) {
	t := m.t
	frames, peerPings := m.pr.snapshot()
	byID := map[int]*modelMsg{}
	for _, msg := range m.msgs {
		byID[msg.id] = msg
	}
	in := &oracleInflater{takeover: m.cfg.takeover}
	var (
		msgOp      byte
		compressed bool
		assembling []byte
		inMsg      bool
		closed     bool
		received   []int
		pongs      []string
		rallyPings = map[string]bool{}
	)
	for i, f := range frames {
		where := fmt.Sprintf("frame %d (%s)", i, describe(f))
		if closed {
			t.Fatalf("%s after the close frame", where)
		}
		if f.Masked != !m.cfg.server {
			t.Fatalf("%s: masked %v, want %v", where, f.Masked, !m.cfg.server)
		}
		switch f.Opcode {
		case rawpeer.OpClose:
			closed = true
			continue
		case rawpeer.OpPong:
			pongs = append(pongs, string(f.Payload))
			continue
		case rawpeer.OpPing:
			rallyPings[string(f.Payload)] = true
			continue
		case rawpeer.OpText, rawpeer.OpBinary:
			if inMsg {
				t.Fatalf("%s: a new message inside message %d", where, received[len(received)-1])
			}
			inMsg, msgOp, compressed, assembling = true, f.Opcode, f.Rsv&rawpeer.Rsv1 != 0, nil
			if compressed && !m.cfg.deflate {
				t.Fatalf("%s: RSV1 set without permessage-deflate", where)
			}
		case rawpeer.OpContinuation:
			if !inMsg {
				t.Fatalf("%s: a continuation outside a message", where)
			}
			if f.Rsv != 0 {
				t.Fatalf("%s: RSV bits on a continuation", where)
			}
		default:
			t.Fatalf("%s: unexpected opcode", where)
		}
		assembling = append(assembling, f.Payload...)
		if !f.Fin {
			continue
		}
		inMsg = false
		payload := assembling
		if compressed {
			out, err := in.inflate(payload)
			if err != nil {
				t.Fatalf("%s: the message does not inflate with the messages before it: %v", where, err)
			}
			payload = out
		}
		id, ok := messageID(payload)
		msg := byID[id]
		if !ok || msg == nil {
			t.Fatalf("%s: a message the model never sent (a corrupt compressed stream?): %d bytes starting %.12q", where, len(payload), payload)
		}
		if byte(msg.typ) != msgOp || !bytes.Equal(payload, msg.payload) {
			t.Fatalf("%s: message %d (%s) arrived as opcode %#x with %d bytes; sent as %v with %d bytes", where, id, msg.call, msgOp, len(payload), msg.typ, len(msg.payload))
		}
		if msg.fate == mustNotArrive {
			t.Fatalf("%s: message %d arrived, though %s returned %s", where, id, msg.call, msg.result)
		}
		if n := len(received); n > 0 && id <= received[n-1] {
			t.Fatalf("%s: message %d arrived after message %d: not in the order the calls were accepted", where, id, received[n-1])
		}
		received = append(received, id)
	}
	// Every message that had to arrive did, up to the last that arrived
	// (after a reset or CloseNow the tail may be lost), or all of them
	// after a clean close.
	lastReceived := 0
	if n := len(received); n > 0 {
		lastReceived = received[n-1]
	}
	got := map[int]bool{}
	for _, id := range received {
		got[id] = true
	}
	for _, msg := range m.msgs {
		if msg.fate != mustArrive || got[msg.id] {
			continue
		}
		if clean || msg.id < lastReceived {
			t.Fatalf("message %d (%s returned %s) never arrived; received %v", msg.id, msg.call, msg.result, received)
		}
	}
	if clean && !closed {
		t.Fatalf("the connection ended without a close frame from rally")
	}
	if clean {
		for _, p := range m.pings {
			if !rallyPings[p] {
				t.Fatalf("Ping %q returned nil but never arrived", p)
			}
		}
	}
	// Pongs answer the peer's pings, in order, each at most once.
	next := 0
	for _, p := range pongs {
		for next < len(peerPings) && peerPings[next] != p {
			next++
		}
		if next == len(peerPings) {
			t.Fatalf("pongs %q are not an in-order selection of the peer's pings %q", pongs, peerPings)
		}
		next++
	}
}

// checkCompletions: every SendDone completion ran exactly once, never
// for a Dropped send, and nil only for a message that arrived or could.
func (m *model) checkCompletions() {
	deadline := time.After(wireTimeout())
	for _, msg := range m.msgs {
		comp := m.completions[msg.id]
		if comp == nil {
			continue
		}
		// A completion may still be on its way from a goroutine that
		// outlives Done by a moment; nothing signals it but its call.
	wait:
		for !comp.dropped && comp.calls.Load() == 0 {
			select {
			case <-deadline:
				break wait
			case <-time.After(time.Millisecond):
			}
		}
		n := comp.calls.Load()
		switch {
		case comp.dropped && n != 0: // as in sendDone
			m.t.Fatalf("the completion of message %d ran %d times though SendDone returned %s", msg.id, n, msg.result)
		case !comp.dropped && n != 1:
			m.t.Fatalf("the completion of message %d (SendDone returned %s) ran %d times, want once", msg.id, msg.result, n)
		}
	}
}

// checkGoroutines waits for the goroutines the sequence started to end.
func (m *model) checkGoroutines() {
	deadline := time.Now().Add(wireTimeout())
	for runtime.NumGoroutine() > m.baseline {
		if time.Now().After(deadline) {
			var rallys []string
			for _, g := range splitStacks(allStacks()) {
				if strings.Contains(g, "rallyws/rally.") {
					rallys = append(rallys, g)
				}
			}
			m.t.Fatalf("%d goroutines left after the connection ended (%d before it):\n%s",
				runtime.NumGoroutine(), m.baseline, strings.Join(rallys, "\n\n"))
		}
		time.Sleep(time.Millisecond) // nothing signals a goroutine's end
	}
}
