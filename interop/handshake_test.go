package interop_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/rallyws/rally"
)

// TestServerHandshakeMatchesNpmWs sends opening handshakes that break one
// rule each to npm ws's WebSocketServer and to rally.Server (in each
// mode), and compares the status (and the Sec-WebSocket-Version header)
// each one answers.
func TestServerHandshakeMatchesNpmWs(t *testing.T) {
	node := startNode(t, "interop-peer.mjs")
	_, port := node.listen(t, 0)
	wsAddr := fmt.Sprintf("127.0.0.1:%d", port)

	rows := []struct {
		name   string
		method string
		header map[string]string
		want   string // npm ws
		rally  string // when it differs
		diff   string
	}{
		{"a valid request", "GET", nil, "101", "", ""},
		{"version 12", "GET", map[string]string{"Sec-WebSocket-Version": "12"}, "400 version=13, 8", "426 version=13", diffVersion426},
		{"version 8, which ws still speaks", "GET", map[string]string{"Sec-WebSocket-Version": "8"}, "101", "426 version=13", diffVersion426},
		{"no version", "GET", map[string]string{"Sec-WebSocket-Version": ""}, "400 version=13, 8", "426 version=13", diffVersion426},
		{"method POST", "POST", nil, "405", "", ""},
		{"no key", "GET", map[string]string{"Sec-WebSocket-Key": ""}, "400", "", ""},
		{"a key of 15 bytes", "GET", map[string]string{"Sec-WebSocket-Key": "AAAAAAAAAAAAAAAAAAAA"}, "400", "", ""},
		{"no Upgrade header", "GET", map[string]string{"Upgrade": ""}, "426", "400", diffNoUpgrade},
		{"Upgrade: h2c", "GET", map[string]string{"Upgrade": "h2c"}, "400", "", ""},
	}
	t.Run("npm ws", func(t *testing.T) {
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				if got := answer(t, wsAddr, r.method, r.header); got != r.want {
					t.Errorf("npm ws (the reference) answers %s, the row says %s", got, r.want)
				}
			})
		}
	})
	t.Run("rally", func(t *testing.T) {
		inModes(t, func(t *testing.T, mode serverMode) {
			rallyAddr, _ := newRallyServer(t, mode, &rally.AcceptOptions{})
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) {
					want := r.want
					if r.rally != "" {
						want = r.rally
						t.Logf("rally differs from npm ws here: %s", r.diff)
					}
					if got := answer(t, rallyAddr, r.method, r.header); got != want {
						t.Errorf("rally answers %s, want %s", got, want)
					}
				})
			}
		})
	})
}

// answer renders a handshake's answer: the status, and the supported
// versions when the server names them.
func answer(t *testing.T, addr, method string, header map[string]string) string {
	status, h := handshake(t, addr, method, header)
	s := fmt.Sprint(status)
	if v := h.Get("Sec-WebSocket-Version"); v != "" && status != http.StatusSwitchingProtocols {
		s += " version=" + v
	}
	return s
}
