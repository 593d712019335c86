package conform

import (
	"crypto/tls"
	"io"
	"path"
	"time"
)

// Options tune a run. The zero value (or nil) runs the default selection
// with the default timeouts.
type Options struct {
	// Cases selects cases by id patterns ("1.*", "6.4.*", "2.5"; a * matches
	// within the rest of the id). Empty selects every case except those of
	// sections 12, 13 and 106 (permessage-deflate), which run only when
	// selected by name.
	Cases []string
	// Exclude removes cases matching these patterns from the selection.
	Exclude []string

	// Agent names the implementation under test in the report.
	Agent string

	// Timeout bounds each wait for the peer's answer (default 2s). A case
	// whose peer answers in time waits no longer than the answer takes.
	Timeout time.Duration
	// CloseTimeout bounds the close handshake: waiting for the peer's close
	// frame and, against a server, for the server to close TCP (default 2s).
	CloseTimeout time.Duration
	// FailFastWait is how long cases 6.4.3, 6.4.4, 106.x.3 and 106.x.4
	// wait, with the invalid byte sent and the rest of the frame held back,
	// before concluding that the peer does not fail fast (default 1s).
	FailFastWait time.Duration

	// Scale multiplies the message sizes of section 9 (default 1, so up to
	// 16 MiB); 1.0/64 gives a quick run. Sizes never fall below 1 byte.
	Scale float64

	// Progress, when set, receives one line per finished case.
	Progress io.Writer

	// HTTP2 makes RunServer run every case on a stream of one HTTP/2
	// connection (RFC 8441 extended CONNECT): without TLS (h2c) for a
	// ws:// URL, with TLS (TLSConfig) for wss://.
	HTTP2 bool
	// TLSConfig is the TLS configuration for wss:// with HTTP2.
	TLSConfig *tls.Config
}

func (o *Options) withDefaults() *Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = 2 * time.Second
	}
	if c.FailFastWait <= 0 {
		c.FailFastWait = time.Second
	}
	if c.Scale <= 0 {
		c.Scale = 1
	}
	if c.Agent == "" {
		c.Agent = "unnamed"
	}
	return &c
}

// selects reports whether the options select case id.
func (o *Options) selects(c Case) bool {
	in := false
	if len(o.Cases) == 0 {
		in = !c.optIn
	}
	for _, p := range o.Cases {
		if match(p, c.ID) {
			in = true
		}
	}
	for _, p := range o.Exclude {
		if match(p, c.ID) {
			return false
		}
	}
	return in
}

// match applies a case pattern. Ids contain no '/', so path.Match's '*'
// spans dots: "1.*" matches "1.1.1" but not "10.1.1".
func match(pattern, id string) bool {
	ok, _ := path.Match(pattern, id)
	return ok
}

// Select returns the cases that opts select, in table order.
func Select(opts *Options) []Case {
	o := opts.withDefaults()
	var out []Case
	for _, c := range Cases() {
		if o.selects(c) {
			out = append(out, c)
		}
	}
	return out
}
