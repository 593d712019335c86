package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/rallyws/rally"
	"github.com/rallyws/rally/pubsub"
)

// publishAnswer is the JSON answer of POST /publish/{topic}.
type publishAnswer struct {
	Topic string `json:"topic"`
	// Received counts this node's subscribers that were sent the message
	// or have it queued; subscribers on other nodes are not counted.
	Received int `json:"received"`
	// Dropped counts this node's subscribers that were too slow (their
	// send buffer was full).
	Dropped int `json:"dropped"`
	// Offset and Epoch are the position the message got, on a topic with
	// history.
	Offset  *uint64 `json:"offset,omitempty"`
	Epoch   string  `json:"epoch,omitempty"`
	Code    string  `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
}

// publish serves POST /publish/{topic}: the body becomes the delivery's
// data (JSON as it is, other UTF-8 text as a string, other bytes as
// base64 with "encoding":"base64").
func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.cfg.APIKey != "":
		if !keyMatches(r, s.cfg.APIKey) {
			s.m.refusals.WithLabelValues("api_key").Inc()
			s.log.Info("publish refused: no valid API key", "remote", r.RemoteAddr)
			w.Header().Set("Www-Authenticate", `Bearer realm="rally"`)
			httpError(w, http.StatusUnauthorized, "unauthorized", "the publish API needs the API key as an Authorization: Bearer header")
			return
		}
	case s.secret != nil:
		s.m.refusals.WithLabelValues("api_key").Inc()
		httpError(w, http.StatusForbidden, codeForbidden, "the publish API is closed: the server has a token secret but no API key")
		return
	}
	if s.draining.Load() {
		httpError(w, http.StatusServiceUnavailable, codeUnavailable, "server shutting down")
		return
	}
	topic := r.PathValue("topic")
	if err := validTopic(topic); err != nil {
		httpError(w, http.StatusBadRequest, codeInvalidTopic, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxMessageBytes)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.m.refusals.WithLabelValues("message_size").Inc()
			httpError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than "+strconv.Itoa(s.cfg.MaxMessageBytes)+" bytes")
			return
		}
		httpError(w, http.StatusBadRequest, codeBadRequest, "reading the body failed")
		return
	}
	var data []byte
	b64 := false
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "application/json":
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			httpError(w, http.StatusBadRequest, codeBadRequest, "the body is not valid JSON: "+err.Error())
			return
		}
		data = buf.Bytes()
	case utf8.Valid(body):
		data = jsonString(body)
	default:
		b64 = true
		data = make([]byte, 0, base64.StdEncoding.EncodedLen(len(body))+2)
		data = append(data, '"')
		data = base64.StdEncoding.AppendEncode(data, body)
		data = append(data, '"')
	}
	if s.historyOf(topic) {
		s.publishHistory(w, topic, data, b64)
		return
	}
	env := envelope(topic, data, b64)
	res, err := s.hub.Publish(topic, rally.Text, env)
	s.published("http", res, len(env))
	ans := publishAnswer{Topic: topic, Received: res.Received(), Dropped: res.Dropped}
	status := http.StatusOK
	if err != nil {
		s.m.drops.WithLabelValues("broker").Inc()
		ans.Code, ans.Message, status = codeUnavailable, "delivered on this node only: "+err.Error(), http.StatusBadGateway
		if errors.Is(err, pubsub.ErrTooLarge) {
			ans.Code, status = codeTooLarge, http.StatusRequestEntityTooLarge
		}
	}
	writeJSON(w, status, ans)
}

func httpError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// jsonString returns text (valid UTF-8) as a JSON string, with only what
// JSON requires escaped: "d->c" stays "d->c", not "d-\u003ec".
func jsonString(text []byte) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(string(text))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// stats serves GET /stats, the live counters of the demo page.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Node          string `json:"node"`
		Connections   int64  `json:"connections"`
		Subscriptions int64  `json:"subscriptions"`
		Publishes     int64  `json:"publishes"`
		Deliveries    int64  `json:"deliveries"`
	}{s.hub.Node(), s.wsConns.Load(), s.subs.Load(), s.publishes.Load(), s.deliveries.Load()})
}
