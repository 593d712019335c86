package interop_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rallyws/rally"
)

// The client is the last line against duplicates: a server (here a fake
// one, since rally serve sends none) that sends a message again, or an
// older one, on the same epoch sees it dropped; a new epoch starts over.
func TestJSClientDropsMessagesItAlreadyDelivered(t *testing.T) {
	frames := []string{
		`{"type":"message","topic":"t","offset":1,"epoch":"e1","data":"1"}`,
		`{"type":"message","topic":"t","offset":2,"epoch":"e1","data":"2"}`,
		`{"type":"message","topic":"t","offset":2,"epoch":"e1","data":"2 again"}`,
		`{"type":"message","topic":"t","offset":1,"epoch":"e1","data":"1 again"}`,
		`{"type":"message","topic":"t","offset":5,"epoch":"e1","data":"5"}`,
		`{"type":"message","topic":"t","offset":1,"epoch":"e2","data":"1 of e2"}`,
		`{"type":"message","topic":"t","offset":1,"epoch":"e2","data":"1 of e2 again"}`,
		`{"type":"message","topic":"t","offset":2,"epoch":"e2","data":"2 of e2"}`,
	}
	want := []string{"1", "2", "5", "1 of e2", "2 of e2"}
	inModes(t, func(t *testing.T, mode serverMode) {
		fake := &rally.Server{
			Options: &rally.AcceptOptions{InsecureSkipOriginCheck: true},
			Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
				var req struct {
					Type string
					ID   json.RawMessage
				}
				if json.Unmarshal(p, &req) != nil || req.Type != "subscribe" {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				ack := `{"type":"ack","id":` + string(req.ID) + `,"topic":"t","offset":0,"epoch":"e1"}`
				for _, f := range append([]string{ack}, frames...) {
					if c.Write(ctx, rally.Text, []byte(f)) != nil {
						return
					}
				}
			},
		}
		hs := serveRally(t, mode, fake, nil)
		inRuntimes(t, jsRuntimes, func(t *testing.T, rt string) {
			srv := startRallyServe(t, mode, serverConfig()) // serves /client.js and the page
			base := "http://" + srv.addr
			c := startJSClient(t, rt, base, hs.URL+"/ws", fastBackoff)
			c.do("subscribe", map[string]any{"topic": "t"})
			c.do("connect", nil)
			c.until("subscribed")
			var got []string
			for len(got) < len(want) {
				var s string
				if err := json.Unmarshal(receive(t, c, "t"), &s); err != nil {
					t.Fatal(err)
				}
				got = append(got, s)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("delivered %q, want %q", got, want)
			}
		})
	})
}
