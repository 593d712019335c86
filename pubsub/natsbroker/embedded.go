package natsbroker

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// clusterName is the name every embedded server gives its cluster; routes
// join only servers of the same name.
const clusterName = "rally"

// readyTimeout bounds how long StartEmbedded waits for the server to
// accept connections.
const readyTimeout = 10 * time.Second

// Embedded is a NATS server running inside this process, for nodes that
// have no NATS of their own. Other nodes connect to it with New at
// ClientURL, and embedded servers of several processes form one cluster
// through routes. Its methods are safe for concurrent use.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server that accepts clients on addr
// ("host:port"; port 0 picks a free one) and returns once it accepts them.
// With clusterAddr set it also listens there for routes from other
// servers, and it connects routes to each URL in routes ("nats://host:port"
// or "host:port", the cluster address of another server; it keeps
// retrying those not up yet). Routes need a clusterAddr. The server keeps
// NATS's defaults otherwise (1 MiB max_payload, and no authentication
// unless an EmbeddedOption asks for it): without WithClientAuth and
// WithClusterAuth, bind it to an address only trusted nodes reach.
func StartEmbedded(addr string, routes []string, clusterAddr string, options ...EmbeddedOption) (*Embedded, error) {
	host, port, err := splitAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("natsbroker: client address: %w", err)
	}
	var ec embeddedConfig
	for _, o := range options {
		o(&ec)
	}
	if err := ec.check(clusterAddr); err != nil {
		return nil, err
	}
	opts := &server.Options{Host: host, Port: port, NoSigs: true, NoLog: true}
	opts.Username, opts.Password, opts.Authorization = ec.user, ec.password, ec.token
	if ec.storeDir != "" {
		opts.JetStream, opts.StoreDir = true, ec.storeDir
		opts.ServerName = ec.serverName
		if opts.ServerName == "" {
			opts.ServerName = "rally-" + addr
		}
	}
	if clusterAddr != "" {
		chost, cport, err := splitAddr(clusterAddr)
		if err != nil {
			return nil, fmt.Errorf("natsbroker: cluster address: %w", err)
		}
		opts.Cluster.Name = clusterName
		opts.Cluster.Host, opts.Cluster.Port = chost, cport
		opts.Cluster.Username, opts.Cluster.Password = ec.routeUser, ec.routePassword
	}
	if len(routes) > 0 && clusterAddr == "" {
		return nil, fmt.Errorf("natsbroker: %d routes but no cluster address to listen on", len(routes))
	}
	for _, r := range routes {
		if !strings.Contains(r, "://") {
			r = "nats://" + r
		}
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("natsbroker: route %q is not a URL or host:port", r)
		}
		if u.User == nil && ec.routeUser != "" {
			u.User = url.UserPassword(ec.routeUser, ec.routePassword)
		}
		opts.Routes = append(opts.Routes, u)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsbroker: embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("natsbroker: embedded NATS server on %s not ready after %v", addr, readyTimeout)
	}
	return &Embedded{srv: srv}, nil
}

// splitAddr splits "host:port" for nats-server, where port 0 means its
// default (4222) and -1 a free port: it maps 0 to -1.
func splitAddr(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q in %q is not 0 to 65535", ps, addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// ClientURL returns the URL that New connects to ("nats://host:port"),
// with the port the server actually listens on.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// ClusterURL returns the URL other embedded servers route to
// ("nats://host:port"), or "" if the server has no cluster address.
func (e *Embedded) ClusterURL() string {
	a := e.srv.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats://" + a.String()
}

// Shutdown stops the server and returns once it has: its clients lose
// their connections (and reconnect elsewhere if they can), its ports are
// free again. A second Shutdown does nothing.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Routes returns the number of other servers of the cluster this one
// has a route to now (NATS may keep several connections to each).
func (e *Embedded) Routes() int {
	rz, err := e.srv.Routez(nil)
	if err != nil {
		return 0
	}
	peers := map[string]bool{}
	for _, r := range rz.Routes {
		peers[r.RemoteID] = true
	}
	return len(peers)
}

// EmbeddedOption configures StartEmbedded.
type EmbeddedOption func(*embeddedConfig)

type embeddedConfig struct {
	user, password, token    string
	routeUser, routePassword string
	storeDir, serverName     string
}

// WithJetStream turns JetStream on in the embedded server, keeping its
// data (streams such as a History's) in dir, which it creates if need
// be. Embedded servers joined by routes form one JetStream cluster, in
// which each needs its own name (name; "" means one made of the
// server's client address).
func WithJetStream(dir, name string) EmbeddedOption {
	return func(c *embeddedConfig) { c.storeDir, c.serverName = dir, name }
}

// WithClientAuth makes the embedded server demand of every client (this
// node's broker and the others') either user and password, or token: set
// one pair or the other. Brokers present them with
// WithNATSOptions(nats.UserInfo(user, password)) or nats.Token(token).
func WithClientAuth(user, password, token string) EmbeddedOption {
	return func(c *embeddedConfig) { c.user, c.password, c.token = user, password, token }
}

// WithClusterAuth makes the embedded server demand user and password of
// routes from other servers, and present them on the routes it makes (a
// route URL with credentials of its own keeps them).
func WithClusterAuth(user, password string) EmbeddedOption {
	return func(c *embeddedConfig) { c.routeUser, c.routePassword = user, password }
}

func (c *embeddedConfig) check(clusterAddr string) error {
	switch {
	case c.token != "" && c.user != "":
		return fmt.Errorf("natsbroker: the embedded server takes a user and password or a token, not both")
	case (c.user == "") != (c.password == ""):
		return fmt.Errorf("natsbroker: the embedded server's client auth needs both user and password")
	case (c.routeUser == "") != (c.routePassword == ""):
		return fmt.Errorf("natsbroker: cluster auth needs both user and password")
	case c.routeUser != "" && clusterAddr == "":
		return fmt.Errorf("natsbroker: cluster auth without a cluster address")
	}
	return nil
}
