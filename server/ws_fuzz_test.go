package server

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rallyws/rally"
)

// FuzzWSProtocol sends any text message to /ws, then a marker request,
// and checks every reply up to the marker's: each is a JSON object of
// type ack, error or message, and a connection the server ends is closed
// with 1008 (a message that is not a request), never 1011 (a panic).
func FuzzWSProtocol(f *testing.F) {
	for _, s := range []string{
		`{"type":"subscribe","topic":"a","id":1}`,
		`{"type":"subscribe","topic":"a.b-c_d","id":"x"}`,
		`{"type":"unsubscribe","topic":"a","id":2}`,
		`{"type":"publish","topic":"a","data":{"k":[1,2,{"z":null}]},"id":3,"self":true}`,
		`{"type":"publish","topic":"a","data":"text"}`,
		`{"type":"publish","topic":"a"}`,
		`{"type":"subscribe","topic":"x.y*z>","id":1}`,
		`{"type":"subscribe","topic":"","id":1e300}`,
		`{"type":"nope","id":[1]}`,
		`{"type":"subscribe","id":null}`,
		`{"id":{"a":1}}`,
		`{"type":1}`,
		`[]`, `null`, `"s"`, `{`, ``, `{"type":"publish","topic":"a","data":"\ud800"}`,
	} {
		f.Add(s)
	}
	s := serve(f, Config{})
	var c *rally.Conn
	dialWS := func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		c, _, err = rally.Dial(ctx, s.ws+"/ws", nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
	}
	f.Cleanup(func() {
		if c != nil {
			c.CloseNow()
		}
	})
	const marker = `{"type":"marker","id":"__marker__"}`
	f.Fuzz(func(t *testing.T, msg string) {
		if !utf8.ValidString(msg) || len(msg) > defaultWSMaxMessageBytes {
			return // the engine's business (1007, 1009), not the protocol's
		}
		if c == nil {
			dialWS(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Write(ctx, rally.Text, []byte(msg))
		c.Write(ctx, rally.Text, []byte(marker))
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				var ce *rally.CloseError
				if !errors.As(err, &ce) || (ce.Code != rally.ClosePolicyViolation) {
					t.Fatalf("after %q the connection ended with %v, want a close with 1008 or a reply", msg, err)
				}
				c.CloseNow()
				c = nil
				return
			}
			var reply struct {
				Type string          `json:"type"`
				ID   json.RawMessage `json:"id"`
				Code string          `json:"code"`
			}
			if typ != rally.Text || json.Unmarshal(p, &reply) != nil {
				t.Fatalf("after %q the server sent %v %q, not a JSON object", msg, typ, p)
			}
			switch reply.Type {
			case "ack", "message":
			case "error":
				if reply.Code == "" {
					t.Fatalf("after %q an error without a code: %s", msg, p)
				}
				if string(reply.ID) == `"__marker__"` {
					return
				}
			default:
				t.Fatalf("after %q a reply of type %q: %s", msg, reply.Type, p)
			}
		}
	})
}
