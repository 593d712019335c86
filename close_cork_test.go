package rally_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// answerClose is a peer that answers a close at once: it reads frames
// until the close frame, records each, sends its own close 1000, and
// closes TCP (after the server did, if the peer is the client). It returns
// what it read, or the error that stopped it.
func answerClose(p *rawpeer.Peer, rallyIsServer bool) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		var seen []string
		defer func() { out <- seen }()
		for {
			f, err := p.ReadFrame()
			if err != nil {
				seen = append(seen, "error: "+err.Error())
				return
			}
			if f.Opcode != rawpeer.OpClose {
				seen = append(seen, fmt.Sprintf("opcode %#x %q", f.Opcode, f.Payload))
				continue
			}
			code, reason, _ := rawpeer.ParseClose(f.Payload)
			seen = append(seen, fmt.Sprintf("close %d %q", code, reason))
			if err := p.WriteFrame(rawpeer.Close(1000, "")); err != nil {
				seen = append(seen, "error: "+err.Error())
				return
			}
			if rallyIsServer {
				if err := p.WaitEOF(); err != nil {
					seen = append(seen, "error: "+err.Error())
				}
			}
			p.Close()
			return
		}
	}()
	return out
}

// Close inside the caller's own Cork sends what the cork gathered and the
// close frame at once, and completes the handshake: it used to queue the
// close frame behind the cork and wait for an answer that could not come
// before the cork ended, so nothing left until CloseTimeout and Close
// reported 1006.
func TestCloseInsideTheCallersOwnCorkCompletesTheHandshake(t *testing.T) {
	for _, side := range []string{"Server", "Client"} {
		t.Run(side, func(t *testing.T) {
			opts := rally.ConnOptions{CloseTimeout: wireTimeout}
			var c *rally.Conn
			var p *rawpeer.Peer
			if side == "Server" {
				c, p = acceptConn(t, &rally.AcceptOptions{ConnOptions: opts})
			} else {
				c, p = dialRaw(t, &rally.DialOptions{ConnOptions: opts})
			}
			seen := answerClose(p, side == "Server")
			var err error
			c.Cork(func() {
				if st, err := c.Send(rally.Text, []byte("before")); st != rally.Sent || err != nil {
					t.Errorf("Send in the cork = %v, %v; want sent", st, err)
				}
				err = c.Close(1000, "bye")
			})
			if err != nil {
				t.Errorf("Close inside Cork = %v, want nil (the peer answered)", err)
			}
			got := <-seen
			want := []string{`opcode 0x1 "before"`, `close 1000 "bye"`}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the peer saw %q, want %q", got, want)
			}
			if err := c.Close(1000, ""); !errors.Is(err, rally.ErrClosed) {
				t.Errorf("Close after the handshake = %v, want rally.ErrClosed", err)
			}
		})
	}
}
