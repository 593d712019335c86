package interop_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/server"
)

// h2Page fetches /ping first (Chromium opens a WebSocket over HTTP/2 only
// on an HTTP/2 session it already holds to the host), then opens a
// WebSocket to /ws, sends a message, waits for its echo and closes.
const h2Page = `<!doctype html><body><script>
window.h2echo = async (path) => {
  const ping = await fetch('/ping');
  await ping.text();
  return await new Promise((resolve) => {
    const ws = new WebSocket('wss://' + location.host + path);
    let echoed = '';
    ws.onopen = () => ws.send('over h2 ✓');
    ws.onmessage = (e) => { echoed = e.data; ws.close(1000, 'bye'); };
    ws.onclose = (e) => resolve({ echoed, code: e.code, wasClean: e.wasClean });
    ws.onerror = () => {};
  });
};
</script></body>`

// Headless Chromium opens a WebSocket over HTTP/2 to a rally Server on a
// TLS server whose certificate a CA made for the test signed: checked
// from the server side (the WebSocket's request arrived as HTTP/2).
func TestChromiumOpensWebSocketOverHTTP2(t *testing.T) {
	ca := newH2CA(t)
	protos := make(chan int, 4)
	closed := make(chan *rally.CloseError, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, h2Page) })
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	mux.Handle("/ws", &rally.Server{
		Upgrade: func(w http.ResponseWriter, r *http.Request) (any, bool) {
			protos <- r.ProtoMajor
			return nil, true
		},
		Message: func(c *rally.Conn, typ rally.MessageType, p []byte) { c.Write(context.Background(), typ, p) },
		Close:   func(c *rally.Conn, ce *rally.CloseError) { closed <- ce },
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.cert}}
	srv.StartTLS()
	defer srv.Close()

	ctx := startBrowserTrusting(t, ca)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatalf("chromium: opening the page: %v", err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`h2echo("/ws")`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	var r struct {
		Echoed   string `json:"echoed"`
		Code     int    `json:"code"`
		WasClean bool   `json:"wasClean"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	if r.Echoed != "over h2 ✓" || r.Code != 1000 || !r.WasClean {
		t.Fatalf("page saw %+v, want the echo and a clean 1000", r)
	}
	if p := <-protos; p != 2 {
		t.Fatalf("Chromium's WebSocket arrived over HTTP/%d, want HTTP/2", p)
	}
	if ce := <-closed; ce.Code != rally.CloseNormal {
		t.Fatalf("server saw %v", ce)
	}
}

// startBrowserTrusting starts a headless Chromium that trusts the key of
// ca's server certificate (the browser cannot be given the test CA on the
// command line) and stops it when t ends.
func startBrowserTrusting(t *testing.T, ca *h2CA) context.Context {
	t.Helper()
	leaf, err := x509.ParseCertificate(ca.cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	opts := chromiumOptions(chromiumPath(t), t.TempDir(),
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])))
	limit, cancelLimit := context.WithTimeout(context.Background(), 90*time.Second)
	alloc, cancelAlloc := chromedp.NewExecAllocator(limit, opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		cancelLimit()
	})
	return ctx
}

// Headless Chromium on a page of `rally serve`'s TLS listener opens a
// WebSocket to /echo over HTTP/2; /metrics counts it as h2.
func TestChromiumOpensWebSocketOverHTTP2ToRallyServe(t *testing.T) {
	ca := newH2CA(t)
	srv, err := server.New(server.Config{TLSCert: ca.certFile, TLSKey: ca.keyFile, ShutdownTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() {
		cancel()
		<-served
	}()
	base := "https://" + ln.Addr().String()
	ctx := startBrowserTrusting(t, ca)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatalf("chromium: opening the demo page: %v", err)
	}
	// The demo page is open on an HTTP/2 session: a WebSocket to /echo
	// from it goes over that session.
	const js = `new Promise((resolve) => {
  const ws = new WebSocket('wss://' + location.host + '/echo');
  let echoed = '';
  ws.onopen = () => ws.send('over h2 ✓');
  ws.onmessage = (e) => { echoed = e.data; ws.close(1000, 'bye'); };
  ws.onclose = (e) => resolve({ echoed, code: e.code, wasClean: e.wasClean });
})`
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	var r struct {
		Echoed   string `json:"echoed"`
		Code     int    `json:"code"`
		WasClean bool   `json:"wasClean"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	if r.Echoed != "over h2 ✓" || r.Code != 1000 || !r.WasClean {
		t.Fatalf("page saw %+v, want the echo and a clean 1000", r)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `rally_connections_by_protocol_total{protocol="h2"} 1`) {
		t.Fatalf("/metrics does not count Chromium's WebSocket as h2:\n%s", body)
	}
}
