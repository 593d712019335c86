package rally

// A SOCKS5 client (RFC 1928) with user/password authentication (RFC
// 1929): just the CONNECT a WebSocket client needs. It is small enough to
// own rather than import golang.org/x/net/proxy, whose dialer resolves
// nothing locally (socks5:// and socks5h:// would behave alike) and whose
// errors are not ours to keep free of credentials.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
)

const (
	socksVersion      = 5
	socksNoAuth       = 0x00
	socksUserPassword = 0x02
	socksNoMethod     = 0xff
	socksCmdConnect   = 0x01
	socksAtypIPv4     = 0x01
	socksAtypDomain   = 0x03
	socksAtypIPv6     = 0x04
	socksAuthVersion  = 0x01
	socksSucceeded    = 0x00
)

// socksReplies are RFC 1928 section 6's meanings of a reply's REP field.
var socksReplies = [...]string{
	1: "general SOCKS server failure",
	2: "connection not allowed by ruleset",
	3: "network unreachable",
	4: "host unreachable",
	5: "connection refused",
	6: "TTL expired",
	7: "command not supported",
	8: "address type not supported",
}

// socksConnect asks the SOCKS5 proxy, over nc, to connect to addr
// (host:port) and returns nc, which then carries the connection to addr.
// It offers no authentication, and user/password as well when the proxy
// URL has a user. With socks5:// a host name is resolved here (the first
// IPv4 address, else the first IPv6 one) and the proxy gets the address;
// with socks5h:// the proxy gets the name and resolves it. Its errors name
// the proxy with its credentials hidden and never quote them.
func socksConnect(ctx context.Context, nc net.Conn, proxy *url.URL, addr string) (net.Conn, error) {
	shown := redactURL(proxy)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("proxy %s: "+format, append([]any{shown}, args...)...)
	}
	if proxy.User != nil {
		name := proxy.User.Username()
		password, _ := proxy.User.Password()
		if len(name) == 0 || len(name) > 255 || len(password) > 255 {
			return nil, fail("SOCKS5 wants a user name of 1 to 255 bytes and a password of at most 255")
		}
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fail("%w", err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fail("port %q is not a number from 0 to 65535", portText)
	}
	request := make([]byte, 0, 6+256)
	request = append(request, socksVersion, socksCmdConnect, 0)
	ip, err := netip.ParseAddr(host)
	if err != nil && proxy.Scheme == "socks5" {
		ip, err = resolveForSocks(ctx, host)
		if err != nil {
			return nil, fail("resolving %s for SOCKS5 (socks5h:// lets the proxy resolve it): %w", host, err)
		}
	}
	switch {
	case err == nil && ip.Unmap().Is4():
		a := ip.Unmap().As4()
		request = append(append(request, socksAtypIPv4), a[:]...)
	case err == nil:
		a := ip.As16()
		request = append(append(request, socksAtypIPv6), a[:]...)
	case len(host) > 255:
		return nil, fail("host name of %d bytes is longer than SOCKS5's 255", len(host))
	default:
		request = append(append(request, socksAtypDomain, byte(len(host))), host...)
	}
	request = binary.BigEndian.AppendUint16(request, uint16(port))

	// Method selection (RFC 1928 section 3).
	greeting := []byte{socksVersion, 1, socksNoAuth}
	if proxy.User != nil {
		greeting = []byte{socksVersion, 2, socksNoAuth, socksUserPassword}
	}
	if _, err := nc.Write(greeting); err != nil {
		return nil, fail("sending the SOCKS5 greeting: %w", err)
	}
	var b [2]byte
	if err := readSocks(nc, b[:]); err != nil {
		return nil, fail("reading the SOCKS5 method: %w", err)
	}
	if b[0] != socksVersion {
		return nil, fail("answered with SOCKS version %d, not 5", b[0])
	}
	switch {
	case b[1] == socksNoAuth:
	case b[1] == socksUserPassword && proxy.User != nil:
		if err := socksAuthenticate(nc, proxy.User); err != nil {
			return nil, fail("%w", err)
		}
	case b[1] == socksNoMethod && proxy.User == nil:
		return nil, fail("wants authentication: give a user and password in the proxy URL")
	case b[1] == socksNoMethod:
		return nil, fail("accepts neither user/password authentication nor none")
	default:
		return nil, fail("chose authentication method %d, which was not offered", b[1])
	}

	// The request and its reply (RFC 1928 sections 4 to 6).
	if _, err := nc.Write(request); err != nil {
		return nil, fail("sending the SOCKS5 request: %w", err)
	}
	var reply [4 + 255 + 2]byte
	if err := readSocks(nc, reply[:4]); err != nil {
		return nil, fail("reading the SOCKS5 reply: %w", err)
	}
	if reply[0] != socksVersion {
		return nil, fail("replied with SOCKS version %d, not 5", reply[0])
	}
	if rep := reply[1]; rep != socksSucceeded {
		meaning := "unknown reply code"
		if int(rep) < len(socksReplies) {
			meaning = socksReplies[rep]
		}
		return nil, fail("could not connect to %s: %s (SOCKS5 reply %d)", addr, meaning, rep)
	}
	// The address the proxy bound: read and ignored.
	var rest int
	switch reply[3] {
	case socksAtypIPv4:
		rest = 4 + 2
	case socksAtypIPv6:
		rest = 16 + 2
	case socksAtypDomain:
		if err := readSocks(nc, reply[4:5]); err != nil {
			return nil, fail("reading the SOCKS5 reply: %w", err)
		}
		rest = int(reply[4]) + 2
	default:
		return nil, fail("replied with address type %d, which SOCKS5 does not have", reply[3])
	}
	if err := readSocks(nc, reply[5:5+rest]); err != nil {
		return nil, fail("reading the SOCKS5 reply: %w", err)
	}
	return nc, nil
}

// socksAuthenticate sends user's name and password (RFC 1929) and reads
// the verdict. Its errors never quote either.
func socksAuthenticate(nc net.Conn, user *url.Userinfo) error {
	name := user.Username()
	password, _ := user.Password() // lengths checked by socksConnect
	b := make([]byte, 0, 3+len(name)+len(password))
	b = append(b, socksAuthVersion, byte(len(name)))
	b = append(b, name...)
	b = append(b, byte(len(password)))
	b = append(b, password...)
	if _, err := nc.Write(b); err != nil {
		return fmt.Errorf("sending the SOCKS5 user and password: %w", err)
	}
	var verdict [2]byte
	if err := readSocks(nc, verdict[:]); err != nil {
		return fmt.Errorf("reading the SOCKS5 authentication verdict: %w", err)
	}
	if verdict[1] != 0 {
		return fmt.Errorf("refused the user and password (SOCKS5 status %d)", verdict[1])
	}
	return nil
}

// readSocks reads exactly len(b) bytes of the proxy's answer; a proxy
// that hangs up gives io.ErrUnexpectedEOF.
func readSocks(nc net.Conn, b []byte) error {
	_, err := io.ReadFull(nc, b)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the proxy closed the connection: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// resolveForSocks returns the address a socks5:// proxy is given for
// host: the first IPv4 address the resolver gives, else the first IPv6.
func resolveForSocks(ctx context.Context, host string) (netip.Addr, error) {
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), nil
		}
	}
	if len(ips) == 0 {
		return netip.Addr{}, errors.New("no address")
	}
	return ips[0], nil
}
