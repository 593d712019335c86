package loadgen

import "testing"

// One URL rule for every rally command: http:// and https:// stand for
// ws:// and wss://.
func TestHostileScenariosTakeHTTPURLsAsWebSocketOnes(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:8080/echo":   "ws://127.0.0.1:8080/echo",
		"http://127.0.0.1:8080/echo": "ws://127.0.0.1:8080/echo",
		"https://example.com/ws":     "wss://example.com/ws",
		"wss://example.com/ws":       "wss://example.com/ws",
	} {
		if got, err := wsURL(in); err != nil || got != want {
			t.Errorf("wsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://x/", "localhost:8080", ""} {
		if got, err := wsURL(in); err == nil {
			t.Errorf("wsURL(%q) = %q, want an error", in, got)
		}
	}
}
