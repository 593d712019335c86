// Package pusherwire holds what both ends of the Pusher Channels protocol
// compute the same way: the signature of the auth strings and the HTTP
// API, and the data of a pusher: event. rally serve's Pusher server and
// rally bench's Pusher client share it.
package pusherwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Sign returns hex(HMAC-SHA256(secret, msg)): Pusher's signature of a
// channel subscription (SOCKET_ID:CHANNEL[:CHANNEL_DATA]), a user's sign-in
// and an HTTP API request.
func Sign(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// DataObject decodes the data of a pusher: event into v. The protocol's
// data is a string holding JSON; some clients and servers send the object
// itself, which is taken as well.
func DataObject(raw json.RawMessage, v any) error {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		raw = []byte(s)
	}
	return json.Unmarshal(raw, v)
}
