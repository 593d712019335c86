package rally

// Following redirects in Dial (DialOptions.FollowRedirects): which answers
// redirect, where to, and what is not sent on to another origin.

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// maxRedirects is how many redirects in a row Dial follows (npm ws's
// default too).
const maxRedirects = 10

// isRedirect reports whether status redirects a handshake (RFC 9110 15.4);
// 300 Multiple Choices and 304 Not Modified do not.
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// redirectTarget resolves a Location header against the URL redirected
// from (RFC 9110 10.2.2: it may be relative) and returns the URL of the
// next handshake and whether it is secure. A fragment is dropped: it means
// nothing to a WebSocket server. Errors never quote the Location.
func redirectTarget(from *url.URL, location string) (*url.URL, bool, error) {
	ref, err := url.Parse(location)
	if err != nil {
		return nil, false, errors.New("redirected to a Location that is not a valid URL (not shown, it may hold credentials): " + whyMalformed(err))
	}
	next := from.ResolveReference(ref)
	next.Fragment, next.RawFragment = "", ""
	secure, err := checkDialURL(next)
	if err != nil {
		return nil, false, errors.New("redirected to " + redactURL(next) + ", where " + err.Error())
	}
	return next, secure, nil
}

// sameOrigin reports whether two URLs to dial reach the same server the
// same way: security (ws and http are one, wss and https the other), host
// and port alike.
func sameOrigin(a *url.URL, aSecure bool, b *url.URL, bSecure bool) bool {
	return aSecure == bSecure && strings.EqualFold(hostPortOf(a, aSecure), hostPortOf(b, bSecure))
}

// withoutCredentials returns h without the headers that must not follow a
// redirect to another origin: Authorization and Cookie (credentials for
// the first server) and Host (its name).
func withoutCredentials(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		switch http.CanonicalHeaderKey(name) {
		case "Authorization", "Cookie", "Host":
			continue
		}
		out[name] = values
	}
	return out
}
