package server

import (
	_ "embed"
	"net/http"
)

// The demo page: plain HTML, CSS and JavaScript, no build step.
//
//go:embed demo/index.html
var demoHTML []byte

func demoPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(demoHTML)
	})
}
