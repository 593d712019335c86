package interop_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally"
)

// echoServer serves the browser's test page at / and a rally echo server
// in mode at /ws.
// A text message "close CODE REASON" makes the server close with that code
// and reason; "bad-utf8" makes it send a text frame that is not UTF-8.
// How each connection ended is sent on the returned channel.
func echoServer(t *testing.T, mode serverMode) (string, chan *rally.CloseError) {
	ends := make(chan *rally.CloseError, 16)
	ws := &rally.Server{
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if typ == rally.Text {
				if rest, ok := strings.CutPrefix(string(p), "close "); ok {
					codeText, reason, _ := strings.Cut(rest, " ")
					code, _ := strconv.Atoi(codeText)
					c.Close(uint16(code), reason)
					return
				}
				if string(p) == "bad-utf8" {
					c.Write(ctx, rally.Text, []byte{0x68, 0xff})
					return
				}
			}
			c.Write(ctx, typ, p)
		},
		Close: func(c *rally.Conn, ce *rally.CloseError) { ends <- ce },
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", ws)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(browserPage))
	})
	return serveRally(t, mode, ws, mux).URL, ends
}

// serverEnd waits for how the server saw the connection end.
func serverEnd(t *testing.T, ends chan *rally.CloseError) *rally.CloseError {
	t.Helper()
	select {
	case ce := <-ends:
		return ce
	case <-time.After(waitFor):
		t.Fatal("the rally server saw no end of the connection")
	}
	return nil
}
