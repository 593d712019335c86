package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"
)

// The JavaScript client of /ws (docs/CLIENT-JS.md): one ES module, no
// dependencies, no build step.
//
//go:embed client/client.js
var clientJS []byte

// clientJSTag names this build's client.js: pages revalidate it with
// If-None-Match and get 304 until the server runs another version.
var clientJSTag = func() string {
	sum := sha256.Sum256(clientJS)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// clientModule serves client.js. Any origin may import it (modules
// loaded across origins need CORS); what it may then connect to is still
// decided by /ws's origin check. no-cache makes browsers ask again each
// time, cheaply (304), so that a page never runs a client older than the
// server it talks to.
func clientModule() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", clientJSTag)
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "client.js", time.Time{}, bytes.NewReader(clientJS))
	})
}
