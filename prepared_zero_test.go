package rally_test

import (
	"errors"
	"testing"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/internal/rawpeer"
)

// A PreparedMessage not made by NewPreparedMessage (its zero value, or
// nil) is refused at the call on both sides, with
// ErrInvalidPreparedMessage, and nothing is written: the next frame on the
// wire is the message sent after the refusals. A server used to write a
// bare continuation frame (81 00 without its type: 80 00) and report
// Sent.
func TestZeroPreparedMessageIsRefusedAtTheCallAndNothingIsWritten(t *testing.T) {
	closeSides(t, func(t *testing.T, c *rally.Conn, p *rawpeer.Peer, masked bool) {
		for _, pm := range []*rally.PreparedMessage{{}, nil} {
			st, err := c.SendPrepared(pm)
			if st != rally.Dropped || !errors.Is(err, rally.ErrInvalidPreparedMessage) {
				t.Errorf("SendPrepared(%v) = %v, %v; want dropped, rally.ErrInvalidPreparedMessage", pm, st, err)
			}
			if err := c.WritePrepared(ctxT(t), pm); !errors.Is(err, rally.ErrInvalidPreparedMessage) {
				t.Errorf("WritePrepared(%v) = %v, want rally.ErrInvalidPreparedMessage", pm, err)
			}
		}
		if err := c.Write(ctxT(t), rally.Text, []byte("after")); err != nil {
			t.Fatalf("Write after the refusals = %v", err)
		}
		wantFrame(t, p, rawpeer.OpText, "after", masked)
	})
}
