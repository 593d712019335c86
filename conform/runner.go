package conform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// Case is one conformance case: what it sends and what it accepts.
type Case struct {
	// ID is the case number, as in the classic suite where the case means
	// the same thing ("6.4.1").
	ID string
	// Description says what the suite sends.
	Description string
	// Expectation says what the peer must do.
	Expectation string

	optIn bool     // only run when selected by name (sections 12, 13 and 106)
	pmd   *pmdCase // permessage-deflate negotiation, for sections 12, 13 and 106
	run   func(s *session)
}

// pmdCase says how a case negotiates permessage-deflate.
type pmdCase struct {
	// offer is the suite's Sec-WebSocket-Extensions offer to a server.
	offer string
	// respond answers a client's first valid offer (RFC 7692 5.1).
	respond func(offer extension) string
	// mayRefuse: the offer holds one that must be declined; a server that
	// refuses the whole handshake instead is NON-STRICT.
	mayRefuse bool
}

func (c Case) result() Result {
	return Result{ID: c.ID, Description: c.Description, Expectation: c.Expectation}
}

// runCase plays c over an open connection and returns its result. client
// says whether the suite is the client side of p.
func runCase(c Case, p *rawpeer.Peer, client bool, o *Options, pmd *codec, ext string) Result {
	res := c.result()
	s := newSession(p, client, o, &res, pmd)
	if ext != "" {
		res.Info = map[string]any{"extension": ext}
	}
	c.run(s)
	s.finish()
	return res
}

// unrun is the result of a case that could not run: v with note.
func unrun(c Case, v Verdict, note string) Result {
	res := c.result()
	res.Verdict, res.Behavior, res.CloseBehavior = v, v, v
	res.BehaviorNotes = []string{note}
	res.Observed = []string{}
	res.Close = CloseRecord{SentCode: -1, ReceivedCode: -1}
	return res
}

const declined = "the peer did not negotiate permessage-deflate"

// closeNow ends a connection on which no case runs: close 1000, then TCP.
func closeNow(p *rawpeer.Peer, o *Options) {
	p.SetTimeout(o.CloseTimeout)
	p.WriteFrame(rawpeer.Close(1000, ""))
	p.Close()
}

func progress(o *Options, r Result) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%-10s %-13s %8.1f ms\n", r.ID, r.Verdict, r.DurationMS)
	}
}

// RunServer tests the WebSocket server behind rawURL (ws://host:port/path),
// which must echo every message it receives, text as text and binary as
// binary. It opens one connection per selected case, runs the cases in
// table order and returns the report. It stops early, returning the report
// so far and ctx's error, when ctx ends. wss is not supported.
func RunServer(ctx context.Context, rawURL string, opts *Options) (*Report, error) {
	o := opts.withDefaults()
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("conform: server url: %w", err)
	}
	// http:// and https:// stand for ws:// and wss://, as in every rally
	// command.
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	if u.Scheme != "ws" && !(o.HTTP2 && u.Scheme == "wss") {
		return nil, fmt.Errorf("conform: server url scheme %q: want ws (or wss with HTTP/2)", u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	dial, closeDial, err := serverDialer(u, addr, o)
	if err != nil {
		return nil, err
	}
	defer closeDial()
	target := u.RequestURI()
	// One handshake first: a target that cannot be reached, or refuses
	// WebSocket on that path, is one error, not a failure per case.
	p, resp, err := rawpeer.DialClient(addr, target, nil, o.Timeout)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("conform: %s refused the WebSocket handshake: %s", u.Redacted(), resp.Status)
		}
		return nil, fmt.Errorf("conform: cannot reach %s: %w", u.Redacted(), err)
	}
	p.Close()
	rep := &Report{Agent: o.Agent, Mode: "server", Target: u.Redacted(), Started: time.Now()}
	defer func() { rep.DurationMS = ms(time.Since(rep.Started)) }()
	// A case whose connection could not even be opened may mean the
	// server is gone: if a fresh handshake fails too, the run stops, in
	// one error, instead of failing every case left the same way.
	unreached := false
	tracked := func(target string, header http.Header, timeout time.Duration) (*rawpeer.Peer, *http.Response, error) {
		p, resp, err := dial(target, header, timeout)
		unreached = unreached || err != nil && resp == nil
		return p, resp, err
	}
	for _, c := range Select(o) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		unreached = false
		res := serverCase(c, tracked, target, o)
		if unreached {
			if _, err := probe(dial, target, o.Timeout); err != nil {
				return rep, &peerGoneError{Target: u.Redacted(), Case: c.ID, Done: len(rep.Results), Err: err}
			}
		}
		rep.Results = append(rep.Results, res)
		progress(o, res)
	}
	return rep, nil
}

// peerGoneError is a run stopped because its peer went away: the server
// could not be reached any more while case Case ran, after Done cases.
type peerGoneError struct {
	Target string
	Case   string
	Done   int
	Err    error
}

func (e *peerGoneError) Error() string {
	return fmt.Sprintf("conform: %s went away during case %s (%d cases run), stopped: %v", e.Target, e.Case, e.Done, e.Err)
}

func (e *peerGoneError) Unwrap() error { return e.Err }

// probe opens and closes one connection to target.
func probe(dial dialFunc, target string, timeout time.Duration) (*http.Response, error) {
	p, resp, err := dial(target, nil, timeout)
	if err != nil {
		return resp, err
	}
	p.Close()
	return resp, nil
}

// serverCase runs c against the server dial reaches.
func serverCase(c Case, dial dialFunc, target string, o *Options) Result {
	var header http.Header
	var offers []extension
	if c.pmd != nil {
		header = http.Header{}
		header.Set("Sec-WebSocket-Extensions", c.pmd.offer)
		offers = parseExtensions(header)
	}
	p, resp, err := dial(target, header, o.Timeout)
	if err != nil && c.pmd != nil && c.pmd.mayRefuse && resp != nil && resp.StatusCode >= 400 {
		return unrun(c, NonStrict, fmt.Sprintf("refused the handshake (%s) instead of declining the offer it cannot accept and taking the next (RFC 7692 5.1)", resp.Status))
	}
	if err != nil {
		return unrun(c, Failed, "opening handshake failed: "+err.Error())
	}
	if c.pmd == nil {
		if exts := parseExtensions(resp.Header); len(exts) > 0 {
			p.Close()
			return unrun(c, Failed, fmt.Sprintf("server accepted extensions %v that were not offered (RFC 6455 9.1)", exts))
		}
		return runCase(c, p, true, o, nil, "")
	}
	params, ext, ok, err := checkPMDResponse(resp.Header, offers)
	switch {
	case err != nil:
		p.Close()
		return unrun(c, Failed, "permessage-deflate negotiation: "+err.Error())
	case !ok:
		closeNow(p, o)
		return unrun(c, Unimplemented, declined)
	}
	return runCase(c, p, true, o, newCodec(params, true), ext)
}

// ServeClients tests WebSocket clients as the classic suite's fuzzing
// server does, on ln:
//
//   - /getCaseCount answers a text message with the number of selected cases;
//   - /runCase?case=N&agent=NAME plays case N (1-based, in table order)
//     against the connecting client, which must echo every message;
//   - /getCaseInfo?case=N and /getCaseStatus?case=N answer JSON;
//   - /updateReports?agent=NAME ends the run.
//
// It serves one connection at a time and returns when a client asks for
// /updateReports, or when ctx ends (then with ctx's error). Cases no client
// ran are FAILED in the report. ServeClients closes ln before returning.
func ServeClients(ctx context.Context, ln net.Listener, opts *Options) (*Report, error) {
	o := opts.withDefaults()
	cases := Select(o)
	results := make([]*Result, len(cases))
	rep := &Report{Agent: o.Agent, Mode: "client", Target: ln.Addr().String(), Started: time.Now()}
	agentSet := opts != nil && opts.Agent != ""

	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	var runErr error
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				runErr = ctx.Err()
			} else {
				runErr = fmt.Errorf("conform: accept: %w", err)
			}
			break
		}
		done := serveOne(nc, o, cases, results, func(agent string) {
			if !agentSet && agent != "" {
				rep.Agent = agent
			}
		})
		if done {
			break
		}
	}
	for i, c := range cases {
		if results[i] == nil {
			r := c.result()
			r.Verdict, r.Behavior, r.CloseBehavior = Failed, Failed, Failed
			r.BehaviorNotes = []string{"no client ran this case"}
			r.Observed = []string{}
			r.Close = CloseRecord{SentCode: -1, ReceivedCode: -1}
			results[i] = &r
		}
		rep.Results = append(rep.Results, *results[i])
	}
	rep.DurationMS = ms(time.Since(rep.Started))
	return rep, runErr
}

// serveOne answers one fuzzing-server connection and reports whether the
// run is over (/updateReports).
func serveOne(nc net.Conn, o *Options, cases []Case, results []*Result, agent func(string)) bool {
	p := rawpeer.NewPeer(nc, false)
	p.SetTimeout(o.Timeout)
	r, err := p.ReadRequest()
	if err != nil {
		p.Close()
		return false
	}
	q := r.URL.Query()
	agent(q.Get("agent"))
	caseIndex := func() (int, bool) {
		n, err := strconv.Atoi(q.Get("case"))
		return n - 1, err == nil && n >= 1 && n <= len(cases)
	}
	if r.URL.Path == "/runCase" {
		i, ok := caseIndex()
		if !ok {
			if p.Accept(r, nil) == nil {
				p.WriteFrame(rawpeer.Close(1008, "no such case"))
			}
			p.Close()
			return false
		}
		res := clientCase(cases[i], p, r, o)
		results[i] = &res
		progress(o, res)
		return false
	}
	if err := p.Accept(r, nil); err != nil {
		p.Close()
		return false
	}
	switch r.URL.Path {
	case "/getCaseCount":
		answerAndClose(p, o, strconv.Itoa(len(cases)))
	case "/getCaseInfo":
		i, ok := caseIndex()
		if !ok {
			answerAndClose(p, o, "null")
			return false
		}
		b, _ := json.Marshal(map[string]string{"id": cases[i].ID, "description": cases[i].Description})
		answerAndClose(p, o, string(b))
	case "/getCaseStatus":
		i, ok := caseIndex()
		status := "null"
		if ok && results[i] != nil {
			b, _ := json.Marshal(map[string]Verdict{"behavior": results[i].Verdict})
			status = string(b)
		}
		answerAndClose(p, o, status)
	case "/updateReports":
		answerAndClose(p, o, "")
		return true
	default:
		p.WriteFrame(rawpeer.Close(1008, "unknown path"))
		p.Close()
	}
	return false
}

// clientCase answers the handshake of a client that asked for c and runs
// c, negotiating permessage-deflate when c needs it.
func clientCase(c Case, p *rawpeer.Peer, r *http.Request, o *Options) Result {
	if c.pmd == nil {
		if err := p.Accept(r, nil); err != nil {
			p.Close()
			return unrun(c, Failed, "opening handshake failed: "+err.Error())
		}
		return runCase(c, p, false, o, nil, "")
	}
	offer, _, ok := firstPMDOffer(r.Header)
	if !ok {
		if err := p.Accept(r, nil); err == nil {
			closeNow(p, o)
		}
		p.Close()
		return unrun(c, Unimplemented, declined)
	}
	answer := c.pmd.respond(offer)
	h := http.Header{}
	h.Set("Sec-WebSocket-Extensions", answer)
	params, err := checkPMD(parseExtensions(h)[0], false)
	if err != nil {
		panic("conform: case " + c.ID + " answers an invalid permessage-deflate response: " + err.Error())
	}
	if err := p.Accept(r, h); err != nil {
		p.Close()
		return unrun(c, Failed, "opening handshake failed: "+err.Error())
	}
	return runCase(c, p, false, o, newCodec(params, false), answer)
}

// answerAndClose sends text (if any), closes with 1000, waits (bounded)
// for the client's close frame and closes TCP.
func answerAndClose(p *rawpeer.Peer, o *Options, text string) {
	defer p.Close()
	p.SetTimeout(o.CloseTimeout)
	if text != "" {
		if p.WriteFrame(rawpeer.Text(text)) != nil {
			return
		}
	}
	if p.WriteFrame(rawpeer.Close(1000, "")) != nil {
		return
	}
	for {
		f, err := p.ReadFrame()
		if err != nil || f.Opcode == rawpeer.OpClose {
			return
		}
	}
}

// RunClient tests a client driven by drive: it serves the cases on a
// loopback port (see ServeClients) and calls drive with that address
// (host:port). drive makes the client follow the fuzzing-server protocol
// (run every case, then /updateReports) and returns when it is done; it
// may start a process or call a Go client. RunClient returns when drive
// has returned and the run is over, with drive's error if it failed.
func RunClient(ctx context.Context, opts *Options, drive func(ctx context.Context, addr string) error) (*Report, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	serveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		rep    *Report
		srvErr error
	)
	served := make(chan struct{})
	wg.Go(func() {
		defer close(served)
		rep, srvErr = ServeClients(serveCtx, ln, opts)
	})
	driveErr := drive(ctx, ln.Addr().String())
	select {
	case <-served:
	case <-time.After(o.CloseTimeout):
		// The driver returned without ending the run; take what was run.
		cancel()
	}
	wg.Wait()
	if driveErr != nil {
		return rep, fmt.Errorf("conform: client driver: %w", driveErr)
	}
	if srvErr != nil && !errors.Is(srvErr, context.Canceled) {
		return rep, srvErr
	}
	return rep, ctx.Err()
}
