package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// GET /client.js answers the embedded module as JavaScript that any
// origin may import, with an ETag that a revalidation matches (304, no
// body).
func TestClientJSIsServedAsAModuleWithAnETag(t *testing.T) {
	ts := serve(t, Config{})
	resp, err := http.Get(ts.http + "/client.js")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, clientJS) || !bytes.Contains(body, []byte("export class Client")) {
		t.Fatalf("GET /client.js: %d, %d bytes, want 200 and the module (%d bytes)", resp.StatusCode, len(body), len(clientJS))
	}
	for h, want := range map[string]string{
		"Content-Type":                "text/javascript; charset=utf-8",
		"Cache-Control":               "no-cache",
		"Access-Control-Allow-Origin": "*",
		"X-Content-Type-Options":      "nosniff",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	tag := resp.Header.Get("ETag")
	if len(tag) < 3 || tag[0] != '"' {
		t.Fatalf("ETag %q, want a quoted tag", tag)
	}

	req, _ := http.NewRequest("GET", ts.http+"/client.js", nil)
	req.Header.Set("If-None-Match", tag)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Fatalf("revalidation with the ETag: %d with %d bytes, want 304 and nothing", resp.StatusCode, len(body))
	}
}
