package console

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
)

// liveLifetime bounds one live stream. The browser then reconnects from
// the last event it has (Last-Event-ID), and the session is checked again.
const liveLifetime = 5 * time.Minute

// liveView is what the live history sends for new events.
type liveView struct {
	Events     []journal.Event
	Summary    summaryView
	Deliveries deliveriesView
}

// live follows a message's history as server-sent events: every
// LivePoll it reads the message's events after the last one sent, on the
// journal's (stream, version) key, and sends their rows (event "history")
// and the message's summary and deliveries as they are now (event "state"),
// which replace those on the page. A message's events commit in version
// order, so none is missed. The state event carries the last version sent
// as its id, for the browser to resume from.
func (c *Console) live(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	after := 0
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v != "" {
		if after, err = strconv.Atoi(v); err != nil || after < 0 {
			return invalidField("after", fmt.Sprintf("%q: must be a version, a whole number from 0", v))
		}
	}
	if _, err := projection.Load(r.Context(), c.cfg.DB, id); err != nil {
		return err
	}

	rc := http.NewResponseController(w)
	// The server's write timeout is for answers, not for a stream.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	if err := rc.Flush(); err != nil {
		return nil
	}

	lifetime := min(liveLifetime, s.Expires.Sub(c.cfg.Now()))
	ctx, cancel := context.WithTimeout(r.Context(), lifetime)
	defer cancel()
	defer context.AfterFunc(c.closed, cancel)()
	tick := time.NewTicker(c.cfg.LivePoll)
	defer tick.Stop()
	admin := s.Role.Allows(auth.Administer)
	stream := journal.MessageStream(id)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		events, err := journal.StreamAfter(ctx, c.cfg.DB, stream, after)
		if err == nil && len(events) == 0 {
			continue
		}
		var m *projection.Message
		if err == nil {
			m, err = projection.Load(ctx, c.cfg.DB, id)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Error("console: live history", "message_id", id, "err", err)
			}
			return nil // the browser reconnects
		}
		view := liveView{Events: events,
			Summary:    summaryView{Message: m, Admin: admin, OOB: true},
			Deliveries: deliveriesView{Message: m, Admin: admin, OOB: true}}
		var history, state bytes.Buffer
		err = c.views.pages["message"].ExecuteTemplate(&history, "live-history", view)
		if err == nil {
			err = c.views.pages["message"].ExecuteTemplate(&state, "live-state", view)
		}
		if err != nil {
			c.log.Error("console: render live history", "message_id", id, "err", err)
			return nil
		}
		after = events[len(events)-1].Version
		if _, err := fmt.Fprintf(w, "event: history\n%s\nevent: state\nid: %d\n%s\n",
			sseData(history.String()), after, sseData(state.String())); err != nil {
			return nil
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}

// sseData is text as the data lines of one server-sent event.
func sseData(text string) string {
	var b strings.Builder
	for line := range strings.Lines(strings.ReplaceAll(text, "\r", "")) {
		b.WriteString("data: ")
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteByte('\n')
	}
	return b.String()
}
