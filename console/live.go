package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// liveLifetime bounds one live stream. The browser then reconnects from
// the last event it has (Last-Event-ID), and the session is checked again.
const liveLifetime = 5 * time.Minute

// liveRetryAfter is the wait a refused stream's answer suggests.
const liveRetryAfter = 10 * time.Second

// liveView is what the live history sends for new events.
type liveView struct {
	Events     []journal.Event
	Summary    summaryView
	Deliveries deliveriesView
}

// live follows a message's history as server-sent events. It first sends
// the status "followed live" (event "status"), then the message's events
// after the last one the page has, if any, and then again each time the
// process's tail (feed.Tail) tells it that events of the message have
// committed: it reads them after the last one sent, on the journal's
// (stream, version) key, and sends their rows (event "history") and the
// message's summary and deliveries as they are now (event "state"), which
// replace those on the page. A message's events commit in version order,
// so none is missed. The state event carries the last version sent as its
// id, for the browser to resume from. A stream over the caps of the
// settings console.max_streams_per_session or console.max_streams is
// refused with 429, and every write has a deadline, so a reader that
// stalls frees its stream.
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
	settings, err := c.cfg.Writer.CachedSettings(r.Context())
	if err != nil {
		return err
	}
	release, refusal := c.streams.take(s, settings.WithDefaults().Console)
	if refusal != "" {
		c.log.Info("console: live history refused", "message_id", id, "operator", s.Name, "reason", refusal)
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Retry-After", strconv.Itoa(int(liveRetryAfter.Seconds())))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintln(w, "Live updates paused: "+refusal)
		return nil
	}
	defer release()
	stream := journal.MessageStream(id)
	watch, err := c.tail.Watch(r.Context(), stream)
	if err != nil {
		return err
	}
	defer watch.Close()

	rc := http.NewResponseController(w)
	// The connection may serve another request once the stream ends:
	// the last write's deadline must not stay on it.
	defer rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var status bytes.Buffer
	if err := c.views.pages["message"].ExecuteTemplate(&status, "live-status", liveStatus{MessageID: id, Live: true}); err != nil {
		c.log.Error("console: render live status", "message_id", id, "err", err)
		return nil
	}
	if !c.send(rc, w, "retry: 2000\n\nevent: status\n"+sseData(status.String())+"\n") {
		return nil
	}

	lifetime := min(liveLifetime, s.Expires.Sub(c.cfg.Now()))
	ctx, cancel := context.WithTimeout(r.Context(), lifetime)
	defer cancel()
	defer context.AfterFunc(c.closed, cancel)()
	admin := s.Role.Allows(auth.Administer)
	var secret string
	if cookie, err := r.Cookie(sessionCookie); err == nil {
		secret = cookie.Value
	}
	// The first read takes what committed before the watch began.
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-watch.C:
			}
		}
		events, err := journal.StreamAfter(ctx, c.cfg.DB, stream, after)
		if err == nil && len(events) == 0 {
			continue
		}
		// A browser signed out, or whose token was revoked, since the
		// stream began is told nothing more: it reconnects, and is sent
		// to the sign-in.
		if _, err := c.cfg.Tokens.Session(ctx, secret, c.cfg.Now()); err != nil {
			return nil
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
		if !c.send(rc, w, fmt.Sprintf("event: history\n%s\nevent: state\nid: %d\n%s\n",
			sseData(history.String()), after, sseData(state.String()))) {
			return nil
		}
	}
}

// send writes text to a stream and flushes it within the write deadline
// (Config.LiveWriteTimeout), and reports whether it could: a reader that
// does not take what is sent in time ends its stream. The deadline is the
// network's, on the wall clock.
func (c *Console) send(rc *http.ResponseController, w io.Writer, text string) bool {
	if err := rc.SetWriteDeadline(time.Now().Add(c.cfg.LiveWriteTimeout)); err != nil {
		c.log.Error("console: live history: set write deadline", "err", err)
		return false
	}
	if _, err := io.WriteString(w, text); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// liveStatus is the line above the history that says whether it is
// followed live, or why not.
type liveStatus struct {
	MessageID uuid.UUID
	// Live is true while a stream follows the history.
	Live bool
	// Paused says why it is not, when a stream was refused.
	Paused string
}

// liveState answers the page's question when its stream fails
// (GET /ui/messages/{id}/live/status): why live updates paused, when this
// session or this process is at its cap of streams, else that the page
// is reconnecting. htmx asks it on the stream's error and swaps it in.
func (c *Console) liveState(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if _, err := projection.Load(r.Context(), c.cfg.DB, id); err != nil {
		return err
	}
	settings, err := c.cfg.Writer.CachedSettings(r.Context())
	if err != nil {
		return err
	}
	v := liveStatus{MessageID: id, Paused: c.streams.full(s, settings.WithDefaults().Console)}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := c.views.pages["message"].ExecuteTemplate(w, "live-status", v); err != nil {
		return fmt.Errorf("render live status: %w", err)
	}
	return nil
}

// streams counts the live streams open in this process, in all and by
// session (known by its CSRF value, a secret of its own).
type streams struct {
	mu        sync.Mutex
	n         int
	bySession map[string]int
}

// take counts a new stream of session s within the caps, and returns its
// release; or, over a cap, why not.
func (st *streams) take(s *auth.Session, caps lifecycle.ConsoleSettings) (release func(), refusal string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if refusal := st.fullLocked(s, caps); refusal != "" {
		return nil, refusal
	}
	st.n++
	st.bySession[s.CSRF]++
	var once sync.Once
	return func() {
		once.Do(func() {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.n--
			if st.bySession[s.CSRF]--; st.bySession[s.CSRF] == 0 {
				delete(st.bySession, s.CSRF)
			}
		})
	}, ""
}

// full says why a new stream of s would be refused now; "" when it would
// not.
func (st *streams) full(s *auth.Session, caps lifecycle.ConsoleSettings) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fullLocked(s, caps)
}

func (st *streams) fullLocked(s *auth.Session, caps lifecycle.ConsoleSettings) string {
	switch {
	case st.bySession[s.CSRF] >= caps.MaxStreamsPerSession:
		return fmt.Sprintf("this session follows as many pages live as the setting console.max_streams_per_session allows (%d); "+
			"close one of them, and this one resumes by itself", caps.MaxStreamsPerSession)
	case st.n >= caps.MaxStreams:
		return fmt.Sprintf("the server follows as many pages live as the setting console.max_streams allows (%d); "+
			"this page resumes by itself once one of them closes", caps.MaxStreams)
	}
	return ""
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
