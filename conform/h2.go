package conform

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/rallyws/rally/internal/rawpeer"
)

// dialFunc opens a connection to the server under test for one case and
// performs the opening handshake.
type dialFunc func(target string, header http.Header, timeout time.Duration) (*rawpeer.Peer, *http.Response, error)

// serverDialer returns how RunServer reaches the server at addr: one TCP
// connection and an HTTP/1.1 upgrade per case, or, with o.HTTP2, one
// stream per case on a single HTTP/2 connection (RFC 8441), which the
// returned function closes.
func serverDialer(u *url.URL, addr string, o *Options) (dialFunc, func(), error) {
	if !o.HTTP2 {
		dial := func(target string, header http.Header, timeout time.Duration) (*rawpeer.Peer, *http.Response, error) {
			return rawpeer.DialClient(addr, target, header, timeout)
		}
		return dial, func() {}, nil
	}
	tlsConfig := o.TLSConfig
	if u.Scheme == "wss" && tlsConfig == nil {
		tlsConfig = new(tls.Config)
	}
	if u.Scheme == "ws" {
		tlsConfig = nil
	}
	h, err := rawpeer.DialH2(addr, tlsConfig, o.Timeout)
	if err != nil {
		return nil, nil, fmt.Errorf("conform: HTTP/2 connection to %s: %w", addr, err)
	}
	return h.DialClient, h.Close, nil
}
