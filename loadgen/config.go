package loadgen

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Scenario names a kind of load.
type Scenario string

// The scenarios loadgen drives; the package comment says what each counts.
const (
	Echo       Scenario = "echo"
	Chat       Scenario = "chat"
	Throughput Scenario = "throughput"
	Connect    Scenario = "connect"
	Idle       Scenario = "idle"
)

// Scenarios lists every scenario in the order `rally bench` documents them.
var Scenarios = []Scenario{Echo, Chat, Throughput, Connect, Idle}

// SampleEvery is how often the bytes of a reply are compared with what was
// sent: the first reply of each connection, then one in SampleEvery.
const SampleEvery = 16

// Config describes one run. Zero fields take the defaults of the scenario
// (see Defaults); Run never changes the Config it is given.
type Config struct {
	// Scenario is the kind of load; required.
	Scenario Scenario
	// URL is the ws:// or wss:// address of the server (http:// and
	// https:// mean the same, as in browsers' WebSocket); required.
	URL string
	// Conns is the number of connections (echo, chat, idle) or of parallel
	// workers (connect). Throughput always uses one connection.
	Conns int
	// Size is the payload size of every message in bytes.
	Size int
	// Text sends text messages (valid, mostly non-ASCII UTF-8) instead of
	// binary ones.
	Text bool
	// InFlight is the number of messages each connection keeps outstanding
	// (echo, throughput) or sends per round (chat).
	InFlight int
	// Duration is the measured window, after Warmup.
	Duration time.Duration
	// Warmup runs the load without counting it before the window opens.
	// Negative means none.
	Warmup time.Duration
	// Compress offers permessage-deflate (RFC 7692) with
	// client_no_context_takeover. Where the server accepts it, every
	// message is sent compressed (compressed once per run, whatever its
	// size) and compressed replies are inflated, in the connection's stream
	// when the server keeps context, before they are counted and compared;
	// where it declines, the connection runs uncompressed. Not with
	// VerbatimEcho.
	Compress bool
	// VerbatimEcho is for a server that returns the client's bytes unchanged
	// after the handshake (a raw TCP echo, the floor of a comparison):
	// replies are then expected masked, exactly as sent.
	VerbatimEcho bool
	// ServerPID, when positive, is the process id of the server on this
	// machine: its CPU time and memory are read from /proc during the window.
	ServerPID int
	// InsecureTLS skips verification of a wss:// server's certificate.
	InsecureTLS bool
	// Progress, when set, is called about once a second from one goroutine
	// with the counts so far. It must return quickly.
	Progress func(Progress)
	// IdleOptions are the idle scenario's own settings (idle.go).
	IdleOptions
	// worker, when set, connects an idle run to the process that started
	// it (procs.go).
	worker *workerHooks
}

// Progress is a live view of a run, passed to Config.Progress.
type Progress struct {
	// Phase is "connecting", "warmup", "measuring" or "holding".
	Phase string
	// Elapsed is the time since the window opened (0 before).
	Elapsed time.Duration
	// Duration is the length of the window.
	Duration time.Duration
	// Messages is the count so far in the window (see Result.Messages).
	Messages int64
	// Rate is the count per second over the last second.
	Rate float64
	// Errors is the number of errors so far.
	Errors int64
}

// Defaults returns cfg with every zero field set to the default of its
// scenario: echo 64 connections of 16 B text, 1 in flight; chat 32 clients
// of 16 B text, 8 per round; throughput 1 connection of 256 KiB binary;
// connect 16 workers; idle 1000 connections; 10 s windows after a 1 s
// warm-up. Text is left as given.
func Defaults(cfg Config) Config {
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	switch cfg.Scenario {
	case Echo:
		set(&cfg.Conns, 64)
		set(&cfg.Size, 16)
		set(&cfg.InFlight, 1)
	case Chat:
		set(&cfg.Conns, 32)
		set(&cfg.Size, 16)
		set(&cfg.InFlight, 8)
	case Throughput:
		cfg.Conns = 1
		set(&cfg.Size, 256<<10)
		set(&cfg.InFlight, 1)
	case Connect:
		set(&cfg.Conns, 16)
	case Idle:
		set(&cfg.Conns, 1000)
		if cfg.Broadcast != "" {
			set(&cfg.BroadcastSize, 1024)
		}
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = time.Second
	}
	if cfg.Warmup < 0 || cfg.Scenario == Idle {
		cfg.Warmup = 0
	}
	return cfg
}

// validate reports the first thing wrong with a Config after Defaults.
func (cfg *Config) validate() error {
	switch cfg.Scenario {
	case Echo, Chat, Throughput, Connect, Idle:
	case "":
		return errors.New("loadgen: no scenario")
	default:
		return fmt.Errorf("loadgen: unknown scenario %q (want %s)", cfg.Scenario, scenarioNames())
	}
	if cfg.Compress && cfg.VerbatimEcho {
		return errors.New("loadgen: Compress and VerbatimEcho do not go together (a raw echo sends masked frames back)")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return fmt.Errorf("loadgen: bad URL: %v", redactURLError(err))
	}
	switch u.Scheme {
	case "ws", "wss", "http", "https":
	default:
		return fmt.Errorf("loadgen: URL scheme %q is not ws, wss, http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("loadgen: URL has no host")
	}
	if cfg.Conns < 1 || cfg.Conns > 1<<20 {
		return fmt.Errorf("loadgen: %d connections is out of range", cfg.Conns)
	}
	if cfg.Size < 0 || cfg.Size > 1<<30 {
		return fmt.Errorf("loadgen: size %d is out of range", cfg.Size)
	}
	if cfg.InFlight < 0 || cfg.InFlight > 1<<16 {
		return fmt.Errorf("loadgen: %d in flight is out of range", cfg.InFlight)
	}
	if cfg.Duration <= 0 {
		return fmt.Errorf("loadgen: duration %v is not positive", cfg.Duration)
	}
	if err := cfg.validateIdle(); err != nil {
		return err
	}
	if cfg.VerbatimEcho && cfg.Scenario != Echo && cfg.Scenario != Throughput {
		return fmt.Errorf("loadgen: a verbatim echo server can only run echo and throughput, not %s", cfg.Scenario)
	}
	return nil
}

// redactURLError keeps a URL parse error from repeating the URL, which may
// carry a password or a token.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
