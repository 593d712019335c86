package server

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rallyws/rally/internal/shrinkmap"
)

// Claims are what a /ws token grants: the topics it may subscribe to and
// publish on (patterns in which "*" stands for any run of characters), and
// when it expires (the registered "exp" claim, required). "sub" names the
// client in logs.
type Claims struct {
	Subscribe []string `json:"subscribe,omitempty"`
	Publish   []string `json:"publish,omitempty"`
	jwt.RegisteredClaims
}

// grant is what a /ws connection may do: everything (no token secret
// configured), or what its token's claims say until they expire.
type grant struct {
	open      bool
	subscribe []string
	publish   []string
	subject   string
	expires   time.Time
}

func (g *grant) maySubscribe(topic string) bool { return g.open || matchAny(g.subscribe, topic) }
func (g *grant) mayPublish(topic string) bool   { return g.open || matchAny(g.publish, topic) }

var openGrant = &grant{open: true}

// errNoToken and the parser's errors are what a refused token gets; their
// text never contains the token.
var errNoToken = errors.New("no token: pass one in ?token= or an Authorization: Bearer header")

// authorize checks the token of a /ws request against secret.
func authorize(r *http.Request, secret []byte) (*grant, error) {
	if secret == nil {
		return openGrant, nil
	}
	tok := r.URL.Query().Get("token")
	if tok == "" {
		tok = bearer(r)
	}
	if tok == "" {
		return nil, errNoToken
	}
	var c Claims
	_, err := jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256", "HS384", "HS512"}),
		jwt.WithExpirationRequired(),
	)
	if err != nil {
		return nil, tokenError(err)
	}
	return &grant{
		subscribe: c.Subscribe,
		publish:   c.Publish,
		subject:   c.Subject,
		expires:   c.ExpiresAt.Time,
	}, nil
}

// tokenError says why a token was refused without repeating any of it.
func tokenError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return errors.New("token expired")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errors.New("token has no exp claim")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errors.New("token signature is invalid")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return errors.New("token is malformed")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return errors.New("token is not valid yet")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return errors.New("token is not signed with HMAC-SHA2 by this server")
	}
	return errors.New("token is invalid")
}

// bearer returns the credential of an "Authorization: Bearer X" header, or
// "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}

// keyMatches compares the request's bearer credential with key in
// constant time.
func keyMatches(r *http.Request, key string) bool {
	got := bearer(r)
	return subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1
}

// SignToken returns an HS256 token for claims signed with secret, as
// `rally serve --token-secret` accepts. It is for tests, tools and
// backends written in Go; any JWT library makes the same tokens. A
// pattern of the claims that can never match a topic (one with a
// character no topic has, such as a space) is an error.
func SignToken(secret []byte, claims Claims) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("server: signing a token: the secret is empty")
	}
	for _, p := range slices.Concat(claims.Subscribe, claims.Publish) {
		if err := validPattern(p); err != nil {
			return "", fmt.Errorf("server: signing a token: %w", err)
		}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// rateLimiter allows each client address (rateKey: an IPv6 client's
// /64) a burst of handshakes and then rate per second (a token bucket per
// address). Idle buckets are swept so that the table stays small.
type rateLimiter struct {
	rate     float64
	burst    float64
	loopback bool // limit loopback clients too

	mu      sync.Mutex
	buckets shrinkmap.Map[netip.Addr, *bucket] // gives back the room of a crowd of addresses gone
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, loopback bool) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	burst := rate
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{rate: rate, burst: burst, loopback: loopback}
}

// allow takes a token for the client address a (clientAddr), or reports
// false. A client whose address is unknown (the zero Addr: a listener
// that is not TCP) is not limited, nor is a loopback one unless the
// limiter was told to.
func (l *rateLimiter) allow(a netip.Addr, now time.Time) bool {
	if l == nil || !a.IsValid() || (!l.loopback && a.IsLoopback()) {
		return true
	}
	host := rateKey(a)
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	b, _ := l.buckets.Get(host)
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets.Set(host, b)
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep forgets the buckets that have refilled (their clients are idle).
func (l *rateLimiter) sweep(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for h, b := range l.buckets.All() {
		if now.Sub(b.last) > full {
			l.buckets.Delete(h)
		}
	}
	l.swept = now
}

// isLoopback reports whether the listen address addr (HOST:PORT) binds
// loopback interfaces only. An empty host binds every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
