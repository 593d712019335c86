package natsbroker

import (
	"net/url"
	"strings"
)

// redact returns the server URLs of url (comma-separated) with any user
// and password removed, for error messages.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		switch {
		case err != nil:
			parts[i] = "(unparsable URL)"
		case u.User != nil:
			u.User = nil
			parts[i] = u.String()
		default:
			parts[i] = p
		}
	}
	return strings.Join(parts, ",")
}
