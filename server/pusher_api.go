package server

import (
	"crypto/hmac"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rallyws/rally"
)

// The Pusher HTTP API, /apps/{app_id}/..., for backends and their SDKs.

// pusherAPI checks a request's app and signature, then calls h.
func (s *Server) pusherAPI(h func(w http.ResponseWriter, r *http.Request, a *pusherApp, body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := s.pusherIDs[r.PathValue("app_id")]
		if a == nil {
			pusherHTTPError(w, http.StatusNotFound, "unknown app")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, int64(s.cfg.MaxMessageBytes)+int64(a.MaxMessageBytes)*10+1))
		if err != nil {
			pusherHTTPError(w, http.StatusBadRequest, "could not read the body")
			return
		}
		if msg := a.checkRequest(r, body, time.Now()); msg != "" {
			pusherHTTPError(w, http.StatusUnauthorized, msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		h(w, r, a, body)
	}
}

func pusherHTTPError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(b)
}

// checkRequest checks Pusher's request signature: auth_key is the app's,
// auth_timestamp within 600 s of now, auth_version 1.0, body_md5 the MD5
// of a body, and auth_signature the HMAC-SHA256 of "METHOD\nPATH\nQUERY"
// where QUERY is every other parameter, keys lowercased and sorted,
// KEY=VALUE joined by &. It returns what is wrong, or "".
func (a *pusherApp) checkRequest(r *http.Request, body []byte, now time.Time) string {
	q := r.URL.Query()
	if q.Get("auth_key") != a.Key {
		return "auth_key is not the app's key"
	}
	ts, err := strconv.ParseInt(q.Get("auth_timestamp"), 10, 64)
	if err != nil {
		return "auth_timestamp is missing"
	}
	if d := now.Unix() - ts; d > 600 || d < -600 {
		return "Timestamp expired: auth_timestamp is more than 600 s from the server's time"
	}
	if v := q.Get("auth_version"); v != "1.0" {
		return "auth_version must be 1.0"
	}
	if len(body) > 0 {
		sum := md5.Sum(body)
		if q.Get("body_md5") != hex.EncodeToString(sum[:]) {
			return "body_md5 does not match the body"
		}
	}
	if !a.checkSignature(r.Method, r.URL.Path, q, q.Get("auth_signature")) {
		return "Invalid signature: you should have sent HmacSHA256Hex(" + strconv.Quote(stringToSign(r.Method, r.URL.Path, q)) + ", your_secret_key)"
	}
	return ""
}

func (a *pusherApp) checkSignature(method, path string, q map[string][]string, sig string) bool {
	want := a.sign(stringToSign(method, path, q))
	return hmac.Equal([]byte(sig), []byte(want))
}

// stringToSign is what a request's signature signs.
func stringToSign(method, path string, q map[string][]string) string {
	keys := make([]string, 0, len(q))
	low := make(map[string]string, len(q))
	for k, v := range q {
		lk := strings.ToLower(k)
		if lk == "auth_signature" || len(v) == 0 {
			continue
		}
		keys = append(keys, lk)
		low[lk] = v[0]
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(method + "\n" + path + "\n")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + low[k])
	}
	return b.String()
}

// pusherEvent is one event triggered over the HTTP API.
type pusherEvent struct {
	Name     string   `json:"name"`
	Data     string   `json:"data"`
	Channels []string `json:"channels"`
	Channel  string   `json:"channel"`
	SocketID string   `json:"socket_id"`
	Info     string   `json:"info"`
}

func (s *Server) pusherEvents(w http.ResponseWriter, r *http.Request, a *pusherApp, body []byte) {
	var e pusherEvent
	if err := json.Unmarshal(body, &e); err != nil {
		pusherHTTPError(w, http.StatusBadRequest, "body is not a JSON event: "+err.Error())
		return
	}
	if e.Channel != "" {
		e.Channels = append(e.Channels, e.Channel)
	}
	if msg := s.checkEvent(a, &e, 100); msg != "" {
		status := http.StatusBadRequest
		if strings.HasPrefix(msg, "data") {
			status = http.StatusRequestEntityTooLarge
		}
		pusherHTTPError(w, status, msg)
		return
	}
	frames := eventFrames(&e)
	if !a.reserveCache(frames) {
		s.refuseNoMemory(w)
		return
	}
	s.trigger(a, &e, frames)
	if e.Info == "" {
		w.Write([]byte("{}"))
		return
	}
	out := map[string]any{}
	for _, ch := range e.Channels {
		out[ch] = a.channelInfo(s, ch, e.Info)
	}
	b, _ := json.Marshal(map[string]any{"channels": out})
	w.Write(b)
}

func (s *Server) checkEvent(a *pusherApp, e *pusherEvent, maxChannels int) string {
	switch {
	case e.Name == "" || len(e.Name) > 200:
		return "name is missing or longer than 200 bytes"
	case len(e.Channels) == 0:
		return "channels is missing"
	case len(e.Channels) > maxChannels:
		return "at most " + strconv.Itoa(maxChannels) + " channels per event"
	case len(e.Data) > a.MaxMessageBytes:
		return "data is larger than " + strconv.Itoa(a.MaxMessageBytes) + " bytes, the app's limit"
	}
	for _, ch := range e.Channels {
		if !validChannel(ch) {
			return "invalid channel name " + strconv.Quote(ch)
		}
	}
	return ""
}

// eventFrames builds an event's frame for each of its channels.
func eventFrames(e *pusherEvent) []pusherFrameOf {
	data, _ := json.Marshal(e.Data)
	out := make([]pusherFrameOf, len(e.Channels))
	for i, ch := range e.Channels {
		b, _ := json.Marshal(pusherMsg{Event: e.Name, Channel: ch, Data: data})
		out[i] = pusherFrameOf{ch, b}
	}
	return out
}

// trigger delivers an event, its frames built (eventFrames) and what cache
// channels keep of them charged (reserveCache), to the subscribers of its
// channels, on every node, but for the connection e.SocketID names.
func (s *Server) trigger(a *pusherApp, e *pusherEvent, frames []pusherFrameOf) {
	var except *rally.Conn
	if e.SocketID != "" {
		a.mu.Lock()
		except, _ = a.sockets.Get(e.SocketID)
		a.mu.Unlock()
	}
	// A socket_id of another node's connection: that node leaves it out
	// (told through the cluster, not the channel's topic).
	elsewhere := e.SocketID != "" && except == nil && s.pusherCluster != nil
	for _, f := range frames {
		ch, b := f.channel, f.frame
		if elsewhere {
			res, _ := s.hub.PublishLocal(nil, a.topic(ch), rally.Text, b)
			s.published("pusher_api", res, len(b))
			s.pusherCluster.tell(pusherNote{Ev: "event", App: a.ID, Channel: ch, SocketID: e.SocketID, Frame: b})
			a.storeCache(ch, b)
			continue
		}
		res, err := s.hub.PublishFrom(except, a.topic(ch), rally.Text, b)
		s.published("pusher_api", res, len(b))
		if err != nil {
			s.log.Warn("pusher event: other nodes not reached", "err", err)
		}
		a.storeCache(ch, b)
		s.pusherCluster.tellCache(a.ID, ch, b)
	}
}

// refuseNoMemory answers an API call whose cache channels' events the
// memory budget has no room to keep: nothing was published.
func (s *Server) refuseNoMemory(w http.ResponseWriter) {
	s.m.refusals.WithLabelValues("pusher_cache_memory").Inc()
	w.Header().Set("Retry-After", "1")
	pusherHTTPError(w, http.StatusServiceUnavailable, "the server's memory budget has no room for the cache channels' last event; nothing was triggered, retry later")
}

func (s *Server) pusherBatch(w http.ResponseWriter, r *http.Request, a *pusherApp, body []byte) {
	var req struct {
		Batch []pusherEvent `json:"batch"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		pusherHTTPError(w, http.StatusBadRequest, "body is not a JSON batch: "+err.Error())
		return
	}
	if len(req.Batch) > 10 {
		pusherHTTPError(w, http.StatusBadRequest, "at most 10 events per batch")
		return
	}
	info := false
	for i := range req.Batch {
		e := &req.Batch[i]
		if e.Channel != "" {
			e.Channels = []string{e.Channel}
		}
		if msg := s.checkEvent(a, e, 1); msg != "" {
			pusherHTTPError(w, http.StatusBadRequest, "batch["+strconv.Itoa(i)+"]: "+msg)
			return
		}
		info = info || e.Info != ""
	}
	// Charged for the whole batch first: all of it is triggered, or none.
	frames := make([][]pusherFrameOf, len(req.Batch))
	var all []pusherFrameOf
	for i := range req.Batch {
		frames[i] = eventFrames(&req.Batch[i])
		all = append(all, frames[i]...)
	}
	if !a.reserveCache(all) {
		s.refuseNoMemory(w)
		return
	}
	out := make([]any, 0, len(req.Batch))
	for i := range req.Batch {
		e := &req.Batch[i]
		s.trigger(a, e, frames[i])
		if e.Info != "" {
			out = append(out, a.channelInfo(s, e.Channels[0], e.Info))
		} else {
			out = append(out, map[string]any{})
		}
	}
	if !info {
		w.Write([]byte("{}"))
		return
	}
	b, _ := json.Marshal(map[string]any{"batch": out})
	w.Write(b)
}

// channelInfo is what the HTTP API tells of a channel: the attributes
// info asks for (user_count on presence channels, subscription_count).
func (a *pusherApp) channelInfo(s *Server, ch, info string) map[string]any {
	out := map[string]any{}
	for _, attr := range strings.Split(info, ",") {
		switch strings.TrimSpace(attr) {
		case "user_count":
			if isPresence(ch) {
				out["user_count"] = len(s.pusherMembers(a, ch))
			}
		case "subscription_count":
			out["subscription_count"] = s.pusherChannelCounts(a)[ch]
		}
	}
	return out
}

func (s *Server) pusherChannels(w http.ResponseWriter, r *http.Request, a *pusherApp, _ []byte) {
	prefix := r.URL.Query().Get("filter_by_prefix")
	info := r.URL.Query().Get("info")
	if strings.Contains(info, "user_count") && !strings.HasPrefix(prefix, "presence-") {
		pusherHTTPError(w, http.StatusBadRequest, "info=user_count needs filter_by_prefix=presence-")
		return
	}
	out := map[string]any{}
	for ch, n := range s.pusherChannelCounts(a) {
		if n > 0 && strings.HasPrefix(ch, prefix) {
			out[ch] = a.channelInfo(s, ch, info)
		}
	}
	b, _ := json.Marshal(map[string]any{"channels": out})
	w.Write(b)
}

func (s *Server) pusherChannel(w http.ResponseWriter, r *http.Request, a *pusherApp, _ []byte) {
	ch := r.PathValue("channel")
	info := r.URL.Query().Get("info")
	if strings.Contains(info, "user_count") && !isPresence(ch) {
		pusherHTTPError(w, http.StatusBadRequest, "user_count is for presence channels only")
		return
	}
	out := a.channelInfo(s, ch, info)
	out["occupied"] = s.pusherChannelCounts(a)[ch] > 0
	b, _ := json.Marshal(out)
	w.Write(b)
}

func (s *Server) pusherUsers(w http.ResponseWriter, r *http.Request, a *pusherApp, _ []byte) {
	ch := r.PathValue("channel")
	if !isPresence(ch) {
		pusherHTTPError(w, http.StatusBadRequest, "users are listed for presence channels only")
		return
	}
	type user struct {
		ID string `json:"id"`
	}
	ms := s.pusherMembers(a, ch)
	users := make([]user, 0, len(ms))
	for id := range ms {
		users = append(users, user{id})
	}
	sort.Slice(users, func(i, j int) bool { return users[i].ID < users[j].ID })
	b, _ := json.Marshal(map[string]any{"users": users})
	w.Write(b)
}

func (s *Server) pusherTerminate(w http.ResponseWriter, r *http.Request, a *pusherApp, _ []byte) {
	a.terminate(r.PathValue("user_id"))
	s.pusherCluster.tell(pusherNote{Ev: "terminate", App: a.ID, User: r.PathValue("user_id")})
	w.Write([]byte("{}"))
}
