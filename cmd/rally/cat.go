package main

// rally cat: an interactive WebSocket client (and, with --listen, server)
// in the spirit of wscat and websocat.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/deflate"
	"github.com/rallyws/rally/frame"
	"github.com/rallyws/rally/internal/cli"
)

const catUsage = `Usage: rally cat [flags] URL
       rally cat [flags] --listen ADDR

Connects to the WebSocket server at URL (ws://, wss://, http://, https://).
Each line read from stdin is sent as a text message; each message received
is printed on stdout: text as it is, binary as hex after a [binary N bytes]
marker. Connection events, the close code and reason, and errors go to
stderr. Flags may come before or after the URL.

Lines may be of any length. A line starting with "/" is a command:

  /ping [DATA]               send a ping (DATA: up to 125 bytes)
  /close [CODE [REASON]]     close with CODE (default 1000) and REASON, and end
  /binary HEX                send a binary message ("/binary 00ff 10")
  /help                      list the commands
  //TEXT                     send "/TEXT" as it is

--literal sends every line as it is, commands included. With -P, the pings
and pongs that arrive are shown on stderr.

With -x, the given messages are sent instead of stdin's lines. The session
ends when the input ends (stdin's end, or after the -x messages) and the
replies are in, or when the server closes; then rally cat closes with 1000
and waits for the server's answer. The replies are in once as many
messages arrived as were sent, or after 2 seconds without a message;
-w SECONDS waits exactly that long instead (-w 0: close at once). So
printf 'hello\n' | rally cat ws://127.0.0.1:8080/echo prints hello.

With --listen, it is a server instead: it accepts WebSocket connections on
any path, prints what every client sends, sends each stdin line (or the -x
messages, to each client as it connects) and, when stdin ends and -w
seconds have passed (with -x: when interrupted), closes every connection
with 1001 and exits. Pages from localhost may connect; pages from other
origins get 403.

Exit status: 0 when the session ended normally (this side closed it, or
the server closed with 1000 or without a code), 1 when it failed (the
handshake failed, the connection broke, the server closed with another
code), 2 for wrong usage, 130 after an interrupt.

Compression (permessage-deflate, RFC 7692) is off unless --compress is
given, as in wscat: without it rally cat offers nothing, so what is on the
wire is what was typed. With --compress the client offers it with rally's
defaults and the server accepts it; "connected" then says whether it was
negotiated and with which parameters.

HTTP_PROXY, HTTPS_PROXY and NO_PROXY are read as Go's net/http reads them,
ALL_PROXY when the one for the scheme is empty (never for localhost or
loopback addresses); --proxy is always used. A proxy URL is http://,
https:// (TLS to the proxy), socks5:// (names resolved here) or socks5h://
(names resolved by the proxy), with an optional user:password@.

Flags:
`

// listFlag is a flag that may be given several times.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ", ") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// catConfig is what the command line of rally cat asks for.
type catConfig struct {
	url          string
	execute      listFlag
	wait         time.Duration
	header       http.Header
	subprotocols listFlag
	binary       bool
	insecure     bool
	proxy        *url.URL
	listen       string
	compress     bool
	http2        http2Flag
	literal      bool // no slash commands
	showPings    bool // -P
	readLimit    int64
}

// autoWait is the -w of no -w: wait for as many replies as messages sent,
// or quietWait without a message.
const (
	autoWait  = -1
	quietWait = 2 * time.Second
)

// cat runs rally cat with args (after "cat") and returns its exit status.
func cat(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := &lockedWriter{w: stdout}
	errOut := &lockedWriter{w: stderr}
	cfg, status := parseCat(args, out, errOut)
	if status >= 0 {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.listen != "" {
		return catListen(ctx, cfg, stdin, out, errOut)
	}
	return catDial(ctx, cfg, stdin, out, errOut)
}

// parseCat reads the command line. It returns the status to exit with
// when the command must not run (help: 0, wrong usage: 2), or -1.
func parseCat(args []string, stdout, stderr io.Writer) (*catConfig, int) {
	cfg := &catConfig{header: http.Header{}}
	fs := cli.NewFlagSet("rally cat")
	var headers listFlag
	var wait float64
	var proxy string
	fs.Var(&cfg.execute, "x", "send `MSG` (repeatable), instead of reading stdin")
	fs.Float64Var(&wait, "w", 0, "after the input ends, wait `SECONDS` for replies before closing (default: until\nas many messages arrived as were sent, or 2 seconds passed without one)")
	fs.BoolVar(&cfg.literal, "literal", false, "send every stdin line as it is: no slash commands")
	fs.BoolVar(&cfg.showPings, "P", false, "show the pings and pongs that arrive (on stderr)")
	cli.BytesVar(fs, &cfg.readLimit, "read-limit", rally.DefaultReadLimit, "largest message accepted (larger: closed with 1009; -1: no limit)")
	fs.Var(&headers, "H", "add the request header `'Name: value'` (repeatable; with --listen, to the 101 response)")
	fs.Var(&cfg.subprotocols, "subprotocol", "offer (with --listen: speak) the subprotocol `NAME` (repeatable)")
	fs.BoolVar(&cfg.binary, "binary", false, "send binary messages instead of text")
	fs.BoolVar(&cfg.insecure, "insecure", false, "accept any TLS certificate (self-signed servers)")
	fs.StringVar(&proxy, "proxy", "", "connect through the proxy at `URL` (http, https, socks5 or socks5h://[user:password@]host:port)")
	fs.BoolVar(&cfg.compress, "compress", false, "offer (with --listen: accept) permessage-deflate compression")
	fs.StringVar(&cfg.listen, "listen", "", "be a server listening on `ADDR` (host:port) instead of a client")
	fs.Var(&cfg.http2, "http2", "open the WebSocket as a stream of an HTTP/2 connection (RFC 8441); ws:// URLs\nuse HTTP/2 without TLS; =prefer falls back to HTTP/1.1")

	urls, err := cli.Parse(fs, args)
	switch {
	case err != nil:
	case !given(fs, "w"):
		wait = autoWait
	case wait < 0:
		err = cli.Usagef("-w must not be negative")
	}
	if err == nil {
		err = checkCat(cfg, urls, wait, headers, proxy)
	}
	help := func(w io.Writer) {
		fmt.Fprint(w, catUsage)
		cli.PrintFlags(w, fs)
	}
	if status := cli.Exit("rally cat", err, stdout, stderr, help); status >= 0 {
		return nil, status
	}
	return cfg, -1
}

// checkCat checks the arguments and the flags that need more than their
// type, and fills cfg with them.
func checkCat(cfg *catConfig, urls []string, wait float64, headers listFlag, proxy string) error {
	switch {
	case len(urls) > 1:
		return cli.Usagef("one URL at most, got %d arguments", len(urls))
	case len(urls) == 1 && cfg.listen != "":
		return cli.Usagef("give a URL or --listen, not both")
	case len(urls) == 0 && cfg.listen == "":
		return cli.Usagef("missing URL (or --listen ADDR)")
	}
	if len(urls) == 1 {
		u, err := url.Parse(urls[0])
		if err != nil || u.Host == "" {
			return cli.Usagef("%q is not a URL such as ws://host:port/path", redactedURL(urls[0]))
		}
		switch u.Scheme {
		case "ws", "wss", "http", "https":
		default:
			return cli.Usagef("URL scheme %q is not ws, wss, http or https", u.Scheme)
		}
		cfg.url = urls[0]
	}
	cfg.wait = time.Duration(wait * float64(time.Second))
	if wait == autoWait {
		cfg.wait = autoWait
	}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return cli.Usagef("-H wants 'Name: value', got %q", h)
		}
		cfg.header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil || u.Host == "" {
			// The value is not shown: it may hold a password.
			return cli.Usagef("--proxy wants a URL such as http://host:port")
		}
		cfg.proxy = u
	}
	return nil
}

// redactedURL is raw without what may be a password.
func redactedURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		return "…" + raw[at:]
	}
	return raw
}

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// messageType is the type of the messages this side sends.
func (cfg *catConfig) messageType() rally.MessageType {
	if cfg.binary {
		return rally.Binary
	}
	return rally.Text
}

// catDial is rally cat as a client.
func catDial(ctx context.Context, cfg *catConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	opts := &rally.DialOptions{Header: cfg.header, Subprotocols: cfg.subprotocols, HTTP2: rally.HTTP2Mode(cfg.http2)}
	opts.ReadLimit = cfg.readLimit
	// Like wscat, rally cat offers no compression unless asked.
	opts.Compression = &rally.CompressionOptions{Disabled: !cfg.compress}
	if cfg.insecure {
		opts.TLSConfig = &tls.Config{InsecureSkipVerify: true}
	}
	if cfg.proxy != nil {
		opts.Proxy = http.ProxyURL(cfg.proxy)
	}
	if cfg.showPings {
		opts.OnPing = func(_ *rally.Conn, p []byte) { fmt.Fprintf(stderr, "ping received%s\n", controlData(p)) }
		opts.OnPong = func(_ *rally.Conn, p []byte) { fmt.Fprintf(stderr, "pong received%s\n", controlData(p)) }
	}
	c, resp, err := rally.Dial(ctx, cfg.url, opts)
	if err != nil {
		fmt.Fprintf(stderr, "rally cat: %s\n", strings.TrimPrefix(err.Error(), "rally: "))
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			fmt.Fprintf(stderr, "HTTP status: %s\n", resp.Status)
			printRefusalBody(stderr, resp)
		}
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	fmt.Fprintf(stderr, "connected%s%s\n", subprotocolNote(c), compressionNote(cfg.compress, resp.Header.Get("Sec-WebSocket-Extensions")))

	ended := make(chan *rally.CloseError, 1)
	var sent, received atomic.Int64
	arrived := make(chan struct{}, 1)
	go func() {
		for {
			typ, p, err := c.Read(context.Background())
			if err != nil {
				ended <- closeErrorOf(err)
				return
			}
			printMessage(stdout, typ, p)
			received.Add(1)
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
	}()

	inputDone := make(chan error, 1)
	closeAsked := make(chan closeCommand, 1)
	go func() {
		send := func(typ rally.MessageType, msg []byte) bool {
			if err := c.Write(context.Background(), typ, msg); err != nil {
				if !errors.Is(err, rally.ErrClosed) {
					fmt.Fprintf(stderr, "rally cat: sending: %v\n", err)
				}
				return false
			}
			sent.Add(1)
			return true
		}
		if len(cfg.execute) > 0 {
			for _, m := range cfg.execute {
				if !send(cfg.messageType(), []byte(m)) {
					break
				}
			}
			inputDone <- nil
			return
		}
		inputDone <- readLines(stdin, func(line []byte) bool {
			if cfg.literal || len(line) == 0 || line[0] != '/' {
				return send(cfg.messageType(), line)
			}
			cmd, err := parseCatCommand(line)
			switch {
			case err != nil:
				fmt.Fprintf(stderr, "rally cat: %v\n", err)
				return true
			case cmd.close != nil:
				closeAsked <- *cmd.close // before inputDone
				return false
			case cmd.help:
				fmt.Fprint(stderr, catCommands)
				return true
			case cmd.ping != nil:
				return ping(c, cmd.ping, stderr)
			}
			return send(cmd.typ, cmd.data)
		})
	}()

	// Once the input ends (or /close), the replies still on their way are
	// waited for, then the session closes with closing's code and reason.
	var waited <-chan time.Time
	var timer *time.Timer
	input := (<-chan error)(inputDone)
	inputEnded := false
	closing := closeCommand{code: rally.CloseNormal}
	status := 0
	repliesIn := func() bool { return cfg.wait == autoWait && received.Load() >= sent.Load() }
	for {
		select {
		case ce := <-ended:
			return max(reportServerClose(stderr, ce), status)
		case closing = <-closeAsked:
			// The input goroutine ends after a /close.
		case err := <-input:
			input, inputEnded = nil, true
			if err != nil {
				fmt.Fprintf(stderr, "rally cat: reading stdin: %v\n", err)
				status = 1
			}
			if repliesIn() {
				return closeAndReport(c, ended, stderr, closing, status)
			}
			wait := cfg.wait
			if wait == autoWait {
				wait = quietWait
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
			waited = timer.C
		case <-arrived:
			if !inputEnded || cfg.wait != autoWait {
				continue
			}
			if repliesIn() {
				return closeAndReport(c, ended, stderr, closing, status)
			}
			timer.Reset(quietWait)
		case <-waited:
			return closeAndReport(c, ended, stderr, closing, status)
		case <-ctx.Done():
			return closeAndReport(c, ended, stderr, closeCommand{code: rally.CloseGoingAway}, 130)
		}
	}
}

// catCommands is the help of the slash commands.
const catCommands = `commands: /ping [DATA], /close [CODE [REASON]], /binary HEX, /help;
//TEXT sends "/TEXT"
`

// catCommand is one slash command of rally cat's input.
type catCommand struct {
	typ   rally.MessageType // a message to send: its type and data
	data  []byte
	ping  []byte // a ping to send (non-nil)
	close *closeCommand
	help  bool
}

type closeCommand struct {
	code   uint16
	reason string
}

// parseCatCommand reads a line that starts with "/".
func parseCatCommand(line []byte) (catCommand, error) {
	if bytes.HasPrefix(line, []byte("//")) {
		return catCommand{typ: rally.Text, data: line[1:]}, nil
	}
	name, arg, _ := strings.Cut(string(line[1:]), " ")
	switch name {
	case "ping":
		if len(arg) > frame.MaxControlPayload {
			return catCommand{}, fmt.Errorf("/ping: DATA is %d bytes; a ping carries 125 at most", len(arg))
		}
		return catCommand{ping: []byte(arg)}, nil
	case "close":
		cc := closeCommand{code: rally.CloseNormal}
		codeText, reason, _ := strings.Cut(strings.TrimLeft(arg, " "), " ")
		if codeText != "" {
			n, err := strconv.ParseUint(codeText, 10, 16)
			if err != nil {
				return catCommand{}, fmt.Errorf("/close: %q is not a close code (such as 1000 or 4000)", codeText)
			}
			cc.code, cc.reason = uint16(n), reason
		}
		// Checked here so that a wrong code leaves the connection open.
		if _, err := frame.AppendClosePayload(nil, cc.code, []byte(cc.reason)); err != nil {
			return catCommand{}, fmt.Errorf("/close: %v", err)
		}
		return catCommand{close: &cc}, nil
	case "binary":
		data, err := hex.DecodeString(strings.Join(strings.Fields(arg), ""))
		if err != nil {
			return catCommand{}, fmt.Errorf("/binary: %q is not hex (such as 00ff10 or \"00 ff 10\")", arg)
		}
		return catCommand{typ: rally.Binary, data: data}, nil
	case "help":
		return catCommand{help: true}, nil
	}
	return catCommand{}, fmt.Errorf("unknown command /%s (/help lists them; //%s sends the line)", name, line[1:])
}

// ping sends a ping with data; it reports false once the connection is
// gone.
func ping(c *rally.Conn, data []byte, stderr io.Writer) bool {
	err := c.Ping(context.Background(), data)
	if errors.Is(err, rally.ErrClosed) {
		return false
	}
	if err != nil {
		fmt.Fprintf(stderr, "rally cat: %v\n", err)
	}
	return true
}

// controlData shows the payload of a ping or pong that arrived.
func controlData(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if utf8.Valid(p) {
		return fmt.Sprintf(": %q", p)
	}
	return fmt.Sprintf(": % x", p)
}

// readLines calls each with every line of r, of any length, without its
// "\n" or "\r\n" (a last line without one included), until each reports
// false or r ends; it returns r's error other than io.EOF.
func readLines(r io.Reader, each func(line []byte) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			if !each(line) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// printRefusalBody shows the body of a response that refused the
// handshake, if it is short text: an HTML page is named, not printed.
func printRefusalBody(stderr io.Writer, resp *http.Response) {
	const most = 512
	body, _ := io.ReadAll(io.LimitReader(resp.Body, most+1))
	if len(body) == 0 {
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/html" || bytes.HasPrefix(bytes.TrimSpace(body), []byte("<")) {
		fmt.Fprintf(stderr, "response body: a web page, not a WebSocket endpoint: check the URL's path\n")
		return
	}
	text := strings.TrimSpace(strings.ToValidUTF8(string(body[:min(len(body), most)]), "?"))
	if len(body) > most {
		text += " …"
	}
	fmt.Fprintf(stderr, "response body: %s\n", text)
}

// closeAndReport closes c with cc's code and reason, waits for the
// reading goroutine to see the end, and reports it; it returns status if
// the server answered the close, 1 otherwise. If the server had closed
// first, that close is reported instead.
func closeAndReport(c *rally.Conn, ended <-chan *rally.CloseError, stderr io.Writer, cc closeCommand, status int) int {
	err := c.Close(cc.code, cc.reason)
	ce := <-ended
	if errors.Is(err, rally.ErrClosed) && ce.Code != rally.CloseAbnormal {
		return max(reportServerClose(stderr, ce), status)
	}
	if err != nil || ce.Code == rally.CloseAbnormal {
		fmt.Fprintf(stderr, "rally cat: closing: %v\n", ce)
		return 1
	}
	fmt.Fprintf(stderr, "closed: %s\n", closeText(ce))
	return status
}

// reportServerClose reports a close the server started, or that its
// message caused (a violation rally cat found), and says whether it was a
// normal one.
func reportServerClose(stderr io.Writer, ce *rally.CloseError) int {
	var pe *frame.ProtocolError
	if errors.As(ce, &pe) {
		fmt.Fprintf(stderr, "closed by rally cat: %d (%s): the server's message broke a rule: %s\n", pe.Code, pe.Rule, closeHint(pe))
		return 1
	}
	fmt.Fprintf(stderr, "closed by the server: %s\n", closeText(ce))
	if ce.Code == rally.CloseNormal || ce.Code == rally.CloseNoStatus {
		return 0
	}
	return 1
}

// closeHint says what to do about a violation the server's message made.
func closeHint(pe *frame.ProtocolError) string {
	if pe.Code == rally.CloseTooBig {
		return "raise --read-limit to accept larger messages"
	}
	return "the server does not follow RFC 6455"
}

// closeErrorOf returns the *CloseError a read ended with.
func closeErrorOf(err error) *rally.CloseError {
	var ce *rally.CloseError
	if errors.As(err, &ce) {
		return ce
	}
	return &rally.CloseError{Code: rally.CloseAbnormal, Err: err}
}

// closeText describes how a connection closed, without rally's prefix.
func closeText(ce *rally.CloseError) string {
	s := ce.Error()
	s = strings.TrimPrefix(s, "rally: ")
	return strings.TrimPrefix(s, "connection closed with ")
}

// compressionNote says, when compression was offered or accepted, whether
// it was negotiated: answer is the Sec-WebSocket-Extensions of the 101.
func compressionNote(offered bool, answer string) string {
	switch {
	case !offered:
		return ""
	case answer == "":
		return " (compression: not negotiated)"
	}
	return fmt.Sprintf(" (compression: %s)", answer)
}

// subprotocolNote names the subprotocol chosen, if any.
func subprotocolNote(c *rally.Conn) string {
	if p := c.Subprotocol(); p != "" {
		return fmt.Sprintf(" (subprotocol %s)", p)
	}
	return ""
}

// printMessage prints one received message: text as it is, binary as hex
// after a marker. Each message ends its line.
func printMessage(w io.Writer, typ rally.MessageType, p []byte) {
	if typ == rally.Binary {
		fmt.Fprintf(w, "[binary %d bytes] % x\n", len(p), p)
		return
	}
	fmt.Fprintf(w, "%s\n", p)
}

// catListen is rally cat as a server.
func catListen(ctx context.Context, cfg *catConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		fmt.Fprintf(stderr, "rally cat: %v\n", err)
		return 1
	}
	var mu sync.Mutex
	conns := map[*rally.Conn]bool{}
	var live sync.WaitGroup // one per connection, from Open to Close
	typ := cfg.messageType()
	var compression *rally.CompressionOptions
	if cfg.compress {
		compression = &rally.CompressionOptions{}
	}
	ws := &rally.Server{
		// The answer the handshake gives a client's compression offer is
		// worked out as the server does, to say it when the client connects.
		Upgrade: func(_ http.ResponseWriter, r *http.Request) (any, bool) {
			if !cfg.compress {
				return "", true
			}
			_, answer, _ := deflate.Negotiate(r.Header.Values("Sec-WebSocket-Extensions"), deflate.ServerConfig{})
			return answer, true
		},
		Options: &rally.AcceptOptions{
			Compression:    compression,
			Subprotocols:   cfg.subprotocols,
			OriginPatterns: []string{"localhost", "127.0.0.1", `\[::1\]`},
			ResponseHeader: func(_ *http.Request, h http.Header) {
				for name, values := range cfg.header {
					h[name] = append(h[name], values...)
				}
			},
			OnHandshakeError: func(_ *http.Request, err error) {
				fmt.Fprintf(stderr, "refused a client: %v\n", err)
			},
		},
		Open: func(c *rally.Conn) {
			live.Add(1)
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			answer, _ := c.Data().(string)
			fmt.Fprintf(stderr, "client %s connected%s%s\n", c.RemoteAddr(), subprotocolNote(c), compressionNote(cfg.compress, answer))
			for _, m := range cfg.execute {
				c.Send(typ, []byte(m))
			}
		},
		Message: func(_ *rally.Conn, typ rally.MessageType, p []byte) { printMessage(stdout, typ, p) },
		Close: func(c *rally.Conn, ce *rally.CloseError) {
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
			fmt.Fprintf(stderr, "client %s closed: %s\n", c.RemoteAddr(), closeText(ce))
			live.Done()
		},
	}
	srv := &http.Server{Handler: ws, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "listening on ws://%s/\n", ln.Addr())

	inputDone := make(chan struct{})
	if len(cfg.execute) == 0 {
		go func() {
			defer close(inputDone)
			err := readLines(stdin, func(line []byte) bool {
				mu.Lock()
				for c := range conns {
					c.Send(typ, line)
				}
				mu.Unlock()
				return true
			})
			if err != nil {
				fmt.Fprintf(stderr, "rally cat: reading stdin: %v\n", err)
			}
		}()
	}
	// With -x, the input never ends: the server runs until interrupted.

	status := 0
	var waited <-chan time.Time
	input := (<-chan struct{})(inputDone)
wait:
	for {
		select {
		case <-input:
			input = nil
			timer := time.NewTimer(max(cfg.wait, 0))
			defer timer.Stop()
			waited = timer.C
		case <-waited:
			break wait
		case err := <-served:
			fmt.Fprintf(stderr, "rally cat: %v\n", err)
			return 1
		case <-ctx.Done():
			status = 130
			break wait
		}
	}
	srv.Close() // stops accepting; the WebSockets are hijacked and live on
	mu.Lock()
	open := make([]*rally.Conn, 0, len(conns))
	for c := range conns {
		open = append(open, c)
	}
	mu.Unlock()
	for _, c := range open {
		c.Close(rally.CloseGoingAway, "")
	}
	live.Wait()
	return status
}

// lockedWriter lets the goroutines of rally cat share one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
