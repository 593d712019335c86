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
	"strings"
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

// The kinds of data a publish body makes.
const (
	dataJSON = iota
	dataText
	dataBase64
)

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
	topic := strings.TrimPrefix(r.URL.Path, "/publish/")
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
	// The delivery is built once, in one buffer: the envelope around the
	// data, which is its middle (JSON as it came, compacted; text as a
	// JSON string; other bytes as base64).
	kind := dataBase64
	size := base64.StdEncoding.EncodedLen(len(body)) + 2
	switch {
	case isJSON(r.Header.Get("Content-Type")):
		kind, size = dataJSON, len(body)
	case utf8.Valid(body):
		kind, size = dataText, len(body)+2
	}
	env := appendEnvelopeStart(make([]byte, 0, envelopeSize(topic, size)), topic)
	start := len(env)
	switch kind {
	case dataJSON:
		buf := bytes.NewBuffer(env)
		if err := json.Compact(buf, body); err != nil {
			httpError(w, http.StatusBadRequest, codeBadRequest, "the body is not valid JSON: "+err.Error())
			return
		}
		env = buf.Bytes()
	case dataText:
		env = appendJSONString(env, body)
	default:
		env = append(env, '"')
		env = base64.StdEncoding.AppendEncode(env, body)
		env = append(env, '"')
	}
	b64 := kind == dataBase64
	if s.historyOf(topic) {
		s.publishHistory(w, topic, env[start:], b64)
		return
	}
	env = appendEnvelopeEnd(env, b64)
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

// isJSON reports whether a Content-Type is application/json, parameters
// aside; the plain value is told without parsing (mime.ParseMediaType
// makes a map for every call).
func isJSON(contentType string) bool {
	if strings.IndexByte(contentType, ';') < 0 {
		return strings.EqualFold(strings.TrimSpace(contentType), "application/json")
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "application/json"
}

// The values of the headers of every JSON answer, shared rather than made
// for each answer (header values are only ever replaced, never changed in
// place).
var (
	contentTypeJSON = []string{"application/json"}
	noStore         = []string{"no-store"}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// jsonString returns text as a JSON string (see appendJSONString).
func jsonString(text []byte) []byte {
	return appendJSONString(make([]byte, 0, len(text)+2), text)
}

// appendJSONString appends text to dst as a JSON string, as encoding/json
// writes it with HTML escaping off: only what JSON requires is escaped
// ("d->c" stays "d->c", not "d-\u003ec"), plus U+2028 and U+2029 (which
// JavaScript once did not allow in strings), and bytes that are not UTF-8
// become U+FFFD.
func appendJSONString(dst, text []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	done := 0 // text[:done] is in dst
	for i := 0; i < len(text); {
		c := text[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		var esc []byte
		size := 1
		switch c {
		case '"':
			esc = []byte(`\"`)
		case '\\':
			esc = []byte(`\\`)
		case '\b':
			esc = []byte(`\b`)
		case '\f':
			esc = []byte(`\f`)
		case '\n':
			esc = []byte(`\n`)
		case '\r':
			esc = []byte(`\r`)
		case '\t':
			esc = []byte(`\t`)
		default:
			if c < 0x20 {
				esc = []byte{'\\', 'u', '0', '0', hex[c>>4], hex[c&0xf]}
				break
			}
			var r rune
			r, size = utf8.DecodeRune(text[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				esc = []byte(`\ufffd`)
			case r == '\u2028' || r == '\u2029':
				esc = []byte{'\\', 'u', '2', '0', '2', hex[r&0xf]}
			}
		}
		if esc != nil {
			dst = append(dst, text[done:i]...)
			dst = append(dst, esc...)
			done = i + size
		}
		i += size
	}
	dst = append(dst, text[done:]...)
	return append(dst, '"')
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
