package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func TestHTTPPublishDeliversJSONTextAndBytes(t *testing.T) {
	ts := serve(t, Config{})
	b := dial(t, ts.ws+"/ws", nil)
	b.send(`{"type":"subscribe","topic":"orders","id":1}`)
	b.expect(`{"type":"ack","id":1}`)
	for _, tc := range []struct {
		name, contentType string
		body              []byte
		delivery          string
	}{
		{"JSON as data", "application/json; charset=utf-8", []byte(`{"id": 7, "items": ["a"]}`),
			`{"type":"message","topic":"orders","data":{"id":7,"items":["a"]}}`},
		{"text as a string", "text/plain", []byte("héllo \"world\""),
			`{"type":"message","topic":"orders","data":"héllo \"world\""}`},
		{"JSON-looking text without the JSON type as a string", "", []byte(`{"a":1}`),
			`{"type":"message","topic":"orders","data":"{\"a\":1}"}`},
		{"bytes that are not UTF-8 as base64", "application/octet-stream", []byte{0xff, 0x00, 0xfe},
			`{"type":"message","topic":"orders","data":"/wD+","encoding":"base64"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ans := post(t, ts.http+"/publish/orders", tc.contentType, "", tc.body)
			if status != 200 || !sameJSON(ans, `{"topic":"orders","received":1,"dropped":0}`) {
				t.Fatalf("answer %d %s", status, ans)
			}
			b.expect(tc.delivery)
		})
	}
	if got := metric(t, ts.http, `rally_publishes_total{source="http"}`); got != 4 {
		t.Errorf("rally_publishes_total{source=\"http\"} = %v, want 4", got)
	}
}

func TestHTTPPublishToATopicWithoutSubscribersSaysNoneReceivedIt(t *testing.T) {
	ts := serve(t, Config{})
	status, ans := post(t, ts.http+"/publish/empty", "text/plain", "", []byte("x"))
	if status != 200 || !sameJSON(ans, `{"topic":"empty","received":0,"dropped":0}`) {
		t.Fatalf("answer %d %s", status, ans)
	}
}

func TestHTTPPublishRefusesBadRequests(t *testing.T) {
	ts := serve(t, Config{MaxMessageBytes: 100})
	for _, tc := range []struct {
		name, path, contentType string
		body                    string
		status                  int
		code                    string
	}{
		{"invalid JSON", "/publish/t", "application/json", `{"a":`, 400, codeBadRequest},
		{"invalid topic", "/publish/a*b", "text/plain", "x", 400, codeInvalidTopic},
		{"body over the limit", "/publish/t", "text/plain", strings.Repeat("x", 101), 413, codeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ans := post(t, ts.http+tc.path, tc.contentType, "", []byte(tc.body))
			if status != tc.status || !strings.Contains(ans, `"code":"`+tc.code+`"`) {
				t.Fatalf("answer %d %s, want %d with code %s", status, ans, tc.status, tc.code)
			}
		})
	}
	status, _ := post(t, ts.http+"/publish/t", "text/plain", "", []byte(strings.Repeat("x", 100)))
	if status != 200 {
		t.Fatalf("a body of exactly the limit got %d, want 200", status)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	ts := serve(t, Config{})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(ts.http + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d, want 200", path, resp.StatusCode)
		}
	}
	ts.stop()
	rec := &recorder{header: http.Header{}}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "/readyz", nil)
	ts.Handler().ServeHTTP(rec, req)
	if rec.status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after shutdown began: %d, want 503", rec.status)
	}
}

type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) WriteHeader(status int)      { r.status = status }
