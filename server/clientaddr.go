package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Behind a reverse proxy every request comes from the proxy's address,
// and the client is named in X-Forwarded-For, which each proxy on the way
// appends the address it took the request from to. The server believes
// what the proxies it trusts (Config.TrustedProxies) appended, and nothing
// to the left of the first address it does not trust: a client can put
// anything in the header, but only after that its own address is
// appended by a proxy of ours.
//
// The client address so found is what the handshake rate limit counts
// (per address for IPv4, per /64 for IPv6: one host's share of a network)
// and what refusals are logged with. Loopback is trusted by default: a
// proxy on the same host is the common setup, and a local process could
// anyway pass the loopback exemption of the rate limit by itself.

// proxyRanges are the networks whose requests may name their client.
type proxyRanges []netip.Prefix

// namedRanges are the words --trusted-proxies accepts beside addresses
// and networks.
var namedRanges = map[string][]string{
	"loopback": {"127.0.0.0/8", "::1/128"},
	"private":  {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"},
	"none":     nil,
}

// parseProxyRanges parses a comma-separated list of addresses, networks
// (CIDR) and the words loopback, private and none. The empty string is
// "loopback".
func parseProxyRanges(s string) (proxyRanges, error) {
	if strings.TrimSpace(s) == "" {
		s = "loopback"
	}
	var out proxyRanges
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if nets, ok := namedRanges[strings.ToLower(item)]; ok {
			if item == "none" && s != "none" {
				return nil, fmt.Errorf("%q: none cannot be combined with others", s)
			}
			for _, n := range nets {
				out = append(out, netip.MustParsePrefix(n))
			}
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address, a network (CIDR), loopback, private or none", item)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (p proxyRanges) contains(a netip.Addr) bool {
	for _, n := range p {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr returns the address of the client that made r: its peer's,
// or, if the peer is a trusted proxy, the rightmost address of
// X-Forwarded-For that is not a trusted proxy (the leftmost if all are).
// An entry that is not an address ends the walk at the hop that added it.
// It returns the zero Addr if the peer's address cannot be read (a
// listener that is not TCP).
func (p proxyRanges) clientAddr(r *http.Request) netip.Addr {
	a := peerAddr(r.RemoteAddr)
	if !a.IsValid() || !p.contains(a) {
		return a
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		list := hops[i]
		for list != "" {
			var entry string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				list, entry = list[:j], list[j+1:]
			} else {
				list, entry = "", list
			}
			e := peerAddr(strings.TrimSpace(entry))
			if !e.IsValid() {
				return a
			}
			a = e
			if !p.contains(a) {
				return a
			}
		}
	}
	return a
}

// peerAddr parses an address with or without a port ("192.0.2.1",
// "192.0.2.1:443", "[2001:db8::1]:443", "2001:db8::1"), IPv4 in IPv6
// unmapped. It returns the zero Addr for anything else.
func peerAddr(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

// rateKey is what a client address is counted as by the rate limit: the
// address for IPv4, its /64 for IPv6 (a host is commonly given a whole
// /64, and could otherwise take a fresh address for each handshake).
func rateKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}
