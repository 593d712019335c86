package conform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

	optIn bool // only run when selected by name (sections 12 and 13)
	run   func(s *session)
}

func (c Case) result() Result {
	return Result{ID: c.ID, Description: c.Description, Expectation: c.Expectation}
}

// runCase plays c over an open connection and returns its result. client
// says whether the suite is the client side of p.
func runCase(c Case, p *rawpeer.Peer, client bool, o *Options) Result {
	res := c.result()
	s := newSession(p, client, o, &res)
	c.run(s)
	s.finish()
	return res
}

func handshakeFailed(c Case, err error) Result {
	res := c.result()
	res.Verdict, res.Behavior, res.CloseBehavior = Failed, Failed, Failed
	res.BehaviorNotes = []string{"opening handshake failed: " + err.Error()}
	res.Observed = []string{}
	res.Close = CloseRecord{SentCode: -1, ReceivedCode: -1}
	return res
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
	if u.Scheme != "ws" {
		return nil, fmt.Errorf("conform: server url scheme %q: want ws", u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	target := u.RequestURI()
	rep := &Report{Agent: o.Agent, Mode: "server", Target: u.Redacted(), Started: time.Now()}
	defer func() { rep.DurationMS = ms(time.Since(rep.Started)) }()
	for _, c := range Select(o) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		var res Result
		p, _, err := rawpeer.DialClient(addr, target, nil, o.Timeout)
		if err != nil {
			res = handshakeFailed(c, err)
		} else {
			res = runCase(c, p, true, o)
		}
		rep.Results = append(rep.Results, res)
		progress(o, res)
	}
	return rep, nil
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
	p, r, err := rawpeer.AcceptServer(nc, nil, o.Timeout)
	if err != nil {
		return false
	}
	q := r.URL.Query()
	agent(q.Get("agent"))
	caseIndex := func() (int, bool) {
		n, err := strconv.Atoi(q.Get("case"))
		return n - 1, err == nil && n >= 1 && n <= len(cases)
	}
	switch r.URL.Path {
	case "/getCaseCount":
		answerAndClose(p, o, strconv.Itoa(len(cases)))
	case "/runCase":
		i, ok := caseIndex()
		if !ok {
			p.WriteFrame(rawpeer.Close(1008, "no such case"))
			p.Close()
			return false
		}
		res := runCase(cases[i], p, false, o)
		results[i] = &res
		progress(o, res)
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
