package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"
)

// hookEvent is one event of a Pusher webhook.
type hookEvent struct {
	Name     string `json:"name"`
	Channel  string `json:"channel"`
	Event    string `json:"event,omitempty"`
	Data     string `json:"data,omitempty"`
	SocketID string `json:"socket_id,omitempty"`
	UserID   string `json:"user_id,omitempty"`
}

// webhooks sends an app's webhook events to its URLs: the events of a
// short while in one request, signed (X-Pusher-Key, X-Pusher-Signature:
// HMAC-SHA256 of the body with the app's secret), retried with backoff.
type webhooks struct {
	app    *PusherApp
	urls   []string
	events chan hookEvent
	client *http.Client
	log    *slog.Logger
	ctx    context.Context
	// batch is how long events wait for others to join their request.
	batch time.Duration
}

// hookQueue bounds the events waiting to be sent; past it they are
// dropped (and logged).
const hookQueue = 10000

func newWebhooks(ctx context.Context, app *PusherApp, log *slog.Logger) *webhooks {
	h := &webhooks{app: app, urls: app.Webhooks, events: make(chan hookEvent, hookQueue),
		client: &http.Client{Timeout: 10 * time.Second}, log: log, ctx: ctx, batch: 50 * time.Millisecond}
	go h.run()
	return h
}

// hook queues a webhook event (nothing without webhook URLs).
func (a *pusherApp) hook(e hookEvent) {
	if a.hooks == nil {
		return
	}
	select {
	case a.hooks.events <- e:
	default:
		a.hooks.log.Warn("pusher webhook dropped: queue full", "app", a.ID, "event", e.Name)
	}
}

func (h *webhooks) run() {
	for {
		var batch []hookEvent
		select {
		case <-h.ctx.Done():
			return
		case e := <-h.events:
			batch = append(batch, e)
		}
		t := time.NewTimer(h.batch)
	collect:
		for len(batch) < 100 {
			select {
			case e := <-h.events:
				batch = append(batch, e)
			case <-t.C:
				break collect
			}
		}
		t.Stop()
		body, _ := json.Marshal(map[string]any{"time_ms": time.Now().UnixMilli(), "events": batch})
		for _, u := range h.urls {
			h.post(u, body)
		}
	}
}

// post sends body to url, retrying with backoff (0.5 s doubling, 5
// tries) on a network error or a status other than 2xx.
func (h *webhooks) post(url string, body []byte) {
	wait := 500 * time.Millisecond
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(h.ctx, "POST", url, bytes.NewReader(body))
		if err != nil {
			h.log.Warn("pusher webhook: bad URL", "url", url, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pusher-Key", h.app.Key)
		req.Header.Set("X-Pusher-Signature", h.app.sign(string(body)))
		resp, err := h.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
		}
		if try == 5 || h.ctx.Err() != nil {
			h.log.Warn("pusher webhook not delivered", "url", url, "tries", try)
			return
		}
		select {
		case <-time.After(wait):
		case <-h.ctx.Done():
			return
		}
		wait *= 2
	}
}
