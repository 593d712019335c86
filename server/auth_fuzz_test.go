package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// refusals are every message a refused token may get: none repeats any
// of the token.
var refusals = map[string]bool{
	errNoToken.Error():                                  true,
	"token expired":                                     true,
	"token has no exp claim":                            true,
	"token signature is invalid":                        true,
	"token is malformed":                                true,
	"token is not valid yet":                            true,
	"token is not signed with HMAC-SHA2 by this server": true,
	"token is invalid":                                  true,
}

const fuzzSecret = "0123456789abcdef0123456789abcdef"

func checkAuthorize(t *testing.T, r *http.Request) {
	g, err := authorize(r, []byte(fuzzSecret))
	if err != nil {
		if !refusals[err.Error()] {
			t.Fatalf("a refusal with the message %q", err)
		}
		return
	}
	if g.open || !g.expires.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("a token accepted with the grant %+v", g)
	}
}

// FuzzTokenParsing hands any token to the auth check, in the query or
// in an Authorization header: it is refused with one of the fixed
// messages (never its own text), or accepted with an expiry.
func FuzzTokenParsing(f *testing.F) {
	good, _ := SignToken([]byte(fuzzSecret), Claims{Subscribe: []string{"a.*"}, Publish: []string{"a"}})
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)-3], false)
	f.Add("eyJhbGciOiJub25lIn0.eyJleHAiOjk5OTk5OTk5OTl9.", true)
	f.Add("a.b.c", false)
	f.Add("", true)
	f.Fuzz(func(t *testing.T, tok string, header bool) {
		r := &http.Request{URL: &url.URL{Path: "/ws"}, Header: http.Header{}}
		if header {
			r.Header.Set("Authorization", "Bearer "+tok)
		} else {
			r.URL.RawQuery = "token=" + url.QueryEscape(tok)
		}
		checkAuthorize(t, r)
	})
}

// FuzzTokenClaims signs any payload with the server's secret, as a
// token whose signature is valid: whatever its claims, it is refused with
// a fixed message or accepted with an expiry (exp is required).
func FuzzTokenClaims(f *testing.F) {
	for _, s := range []string{
		`{"exp":9999999999,"subscribe":["a.*"],"publish":["a"]}`,
		`{"exp":1,"sub":"x"}`,
		`{"subscribe":["*"]}`,
		`{"exp":"soon"}`,
		`{"exp":9999999999,"nbf":9999999998}`,
		`{"exp":9999999999,"subscribe":"a"}`,
		`{"exp":1e400}`,
		`[]`,
	} {
		f.Add(`{"alg":"HS256","typ":"JWT"}`, s)
	}
	f.Add(`{"alg":"none"}`, `{"exp":9999999999}`)
	f.Add(`{"alg":"HS512"}`, `{"exp":9999999999}`)
	f.Fuzz(func(t *testing.T, header, payload string) {
		enc := base64.RawURLEncoding
		signed := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
		mac := hmac.New(sha256.New, []byte(fuzzSecret))
		mac.Write([]byte(signed))
		tok := signed + "." + enc.EncodeToString(mac.Sum(nil))
		r := &http.Request{URL: &url.URL{Path: "/ws", RawQuery: "token=" + tok}, Header: http.Header{}}
		checkAuthorize(t, r)
	})
}
