package console

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// previewLimit bounds the part of a payload the message page shows.
const previewLimit = 64 << 10

// messageView is the message page.
type messageView struct {
	Summary    summaryView
	Deliveries deliveriesView
	Events     []journal.Event
	// Timeline draws Events.
	Timeline timeline
	Preview  preview
	// Version is the last version of the history shown: the live history
	// continues after it.
	Version int
	// Live is the live history's status as the page opens.
	Live liveStatus
}

// summaryView is the message's facts and actions, which the live history
// replaces as they change.
type summaryView struct {
	Message *projection.Message
	Admin   bool
	// OOB marks the copy the live history sends, which replaces the one
	// on the page (hx-swap-oob).
	OOB bool
}

// deliveriesView is the rows of the deliveries table, which the live
// history replaces as they change.
type deliveriesView struct {
	Message *projection.Message
	Admin   bool
	OOB     bool
}

// preview is what the page shows of the payload: text, escaped, or only
// the facts of bytes that are not text.
type preview struct {
	Text   string
	IsText bool
	// Shown is how many bytes Text holds, less than the size when the
	// payload is longer than the preview.
	Shown int64
}

// message shows a message: its facts, payload, deliveries and history.
func (c *Console) message(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	m, err := projection.Load(r.Context(), c.cfg.DB, id)
	if err != nil {
		return err
	}
	events, err := journal.Stream(r.Context(), c.cfg.DB, journal.MessageStream(id))
	if err != nil {
		return err
	}
	payload, err := projection.LoadPayload(r.Context(), c.cfg.DB, id, previewLimit)
	if err != nil && !errors.Is(err, projection.ErrPayloadExpunged) {
		return err
	}
	admin := s.Role.Allows(auth.Administer)
	v := messageView{Summary: summaryView{Message: m, Admin: admin}, Deliveries: deliveriesView{Message: m, Admin: admin},
		Live:   liveStatus{MessageID: m.ID, Live: true},
		Events: events, Timeline: buildTimeline(m, events)}
	if !m.PayloadExpunged {
		v.Preview = previewOf(payload)
	}
	if len(events) > 0 {
		v.Version = events[len(events)-1].Version
	}
	c.render(w, r, http.StatusOK, "message", page{Title: "Message " + id.String(), Nav: "messages", View: v})
	return nil
}

// previewOf shows a payload as text when it is UTF-8 without control
// characters other than white space, whatever its content type says.
func previewOf(p projection.Payload) preview {
	body := p.Body
	if int64(len(body)) < p.Size {
		// The preview may have cut the last character in two.
		for i := 0; i < utf8.UTFMax-1 && len(body) > 0; i++ {
			if r, n := utf8.DecodeLastRune(body); r != utf8.RuneError || n != 1 {
				break
			}
			body = body[:len(body)-1]
		}
	}
	if !utf8.Valid(body) || bytes.ContainsFunc(body, func(r rune) bool {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' || r == 0x7f
	}) {
		return preview{}
	}
	return preview{Text: string(body), IsText: true, Shown: int64(len(body))}
}

// payload answers the message's bytes as a download, with the API's
// headers: a browser never runs them as a page of the console.
func (c *Console) payload(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	p, err := projection.LoadPayload(r.Context(), c.cfg.DB, id, 0)
	if err != nil {
		return err
	}
	name := id.String()
	if exts, _ := mime.ExtensionsByType(p.ContentType); len(exts) > 0 {
		name += exts[0]
	} else {
		name += ".bin"
	}
	h := w.Header()
	h.Set("Content-Type", p.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(p.Body)))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(p.Body)
	return nil
}

// confirmView asks before an action: what it does, to what. Its form
// posts to the page's own path, which does it.
type confirmView struct {
	Question    string
	Explanation string
	Button      string
	// Danger marks an action that is hard to take back.
	Danger bool
	Action string
	// Back is where Cancel leads.
	Back string
	// Version, for an action on a message, is the message's version the
	// page shows; the form carries it back, and the action is taken on
	// that version or not at all (messageAction).
	Version int
	// Checks and Fields are the inputs the action takes, if any.
	Checks  []checks
	Fields  []field
	Problem *errorView
	// Stale says the message moved since the page was shown: the page
	// sends the operator back to it rather than asking again.
	Stale bool
}

// confirm answers an action's page: on GET it asks; on POST it runs act
// and leads back with its notice, or asks again with the API's reason
// when the action was refused.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, title string, v confirmView, act func() (string, error)) error {
	v.Action = r.URL.Path
	status := http.StatusOK
	if r.Method == http.MethodPost {
		notice, err := act()
		if err == nil {
			c.done(w, r, v.Back, notice)
			return nil
		}
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Problem, status, v.Stale = &p, p.Status, errors.Is(err, commands.ErrStale)
		for i := range v.Fields {
			v.Fields[i].Problems = problemsFor(v.Fields[i].Name, &p)
		}
		for i := range v.Checks {
			v.Checks[i].Problems = problemsFor(v.Checks[i].Name, &p)
		}
	}
	c.render(w, r, status, "confirm", page{Title: title, Nav: navOf(v.Back), View: v})
	return nil
}

// messageAction is the commands.Action of a confirmed form on a message:
// the operator, the reason, and the version of the message the
// confirmation showed, which its form carries back. The Writer then acts
// only on that version: had the message moved since (a worker's attempt,
// another operator), nothing is written and the operator looks again.
func messageAction(r *http.Request, s *auth.Session, reason string) (commands.Action, error) {
	v := r.PostForm.Get("version")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return commands.Action{}, invalidField("version",
			fmt.Sprintf("%q is not a version of the message: the confirmation page sends the version it showed; open it again", v))
	}
	return commands.Action{Operator: s.Name, IfVersion: n, Reason: reason}, nil
}

// reasonField is the optional reason of an action, as the form gave it on
// a POST.
func reasonField(r *http.Request) field {
	f := field{Name: "reason", Label: "Reason (optional)", Hint: "Kept in the journal with your name."}
	if r.Method == http.MethodPost {
		f.Value = strings.TrimSpace(r.PostForm.Get("reason"))
	}
	return f
}

// navOf is the bar's item of a page of the console.
func navOf(path string) string {
	for _, nav := range []string{"messages", "sources", "targets", "routes", "operations", "settings", "tokens"} {
		if strings.HasPrefix(path, Prefix+nav) {
			return nav
		}
	}
	return "dashboard"
}

// redispatch asks, then matches the current routes again for a message
// (POST /messages/{id}/redispatch).
func (c *Console) redispatch(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, err := c.loadMessage(r)
	if err != nil {
		return err
	}
	id := m.ID
	of := "of it"
	if m.Generation > 1 {
		of = fmt.Sprintf("in generation %d, the current one,", m.Generation)
	}
	stay := fmt.Sprintf("Its %d deliveries stay as they are.", len(m.Deliveries))
	if len(m.Deliveries) == 1 {
		stay = "Its delivery stays as it is."
	}
	v := confirmView{
		Question: "Redispatch message " + id.String() + "?",
		Explanation: fmt.Sprintf("The message from %s (%s → %s) is matched against the current routes again, and "+
			"every matched target that has no delivery %s gets one. %s",
			m.Source, m.From, m.To, of, stay),
		Button:  "Redispatch",
		Back:    "/ui/messages/" + id.String(),
		Version: m.Version,
	}
	return c.confirm(w, r, "Redispatch", v, func() (string, error) {
		a, err := messageAction(r, s, "")
		if err != nil {
			return "", err
		}
		after, err := c.cfg.Writer.Redispatch(r.Context(), id, a)
		if err != nil {
			return "", err
		}
		added := len(after.Deliveries) - len(m.Deliveries)
		c.log.Info("message redispatched", "message_id", id, "operator", s.Name, "version", after.Version,
			"deliveries", len(after.Deliveries), "via", "console")
		switch added {
		case 0:
			return "Redispatched: every matched target had a delivery already.", nil
		case 1:
			return "Redispatched: 1 new delivery.", nil
		}
		return fmt.Sprintf("Redispatched: %d new deliveries.", added), nil
	})
}

// deliverNow asks, then makes a scheduled message's deliveries due now
// (POST /messages/{id}/deliver-now).
func (c *Console) deliverNow(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, err := c.loadMessage(r)
	if err != nil {
		return err
	}
	id := m.ID
	v := confirmView{
		Question: "Deliver message " + id.String() + " now?",
		Explanation: fmt.Sprintf("The message from %s (%s → %s) is scheduled for %s. Delivering it now queues its deliveries at once, ahead of that time.",
			m.Source, m.From, m.To, stamp(m.ScheduledUntil())),
		Button:  "Deliver now",
		Back:    "/ui/messages/" + id.String(),
		Version: m.Version,
	}
	return c.confirm(w, r, "Deliver now", v, func() (string, error) {
		a, err := messageAction(r, s, "")
		if err != nil {
			return "", err
		}
		after, err := c.cfg.Writer.DeliverNow(r.Context(), id, a)
		if err != nil {
			return "", err
		}
		c.log.Info("message delivered now", "message_id", id, "operator", s.Name, "version", after.Version, "via", "console")
		return "Delivered now: its deliveries are queued.", nil
	})
}

// redeliver asks, then queues one delivery of a message again (POST
// /messages/{id}/deliveries/{delivery_id}/redeliver): "Send again" for a
// delivered one.
func (c *Console) redeliver(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, d, err := c.loadDelivery(r)
	if err != nil {
		return err
	}
	v := confirmView{Button: "Redeliver", Back: "/ui/messages/" + m.ID.String(), Version: m.Version}
	if d.State == lifecycle.StateDelivered {
		v.Button = "Send again"
		v.Question = fmt.Sprintf("Send message %s again to %s?", m.ID, d.Target)
		v.Explanation = fmt.Sprintf("It was delivered to %s at %s. Sending it again queues a new attempt: %s receives the payload a second time.",
			d.Target, stamp(d.FinishedAt), d.Target)
		v.Danger = true
	} else {
		v.Question = fmt.Sprintf("Redeliver message %s to %s?", m.ID, d.Target)
		v.Explanation = fmt.Sprintf("The delivery to %s is %s %s. Redelivering queues it again now, with a fresh retry budget.",
			d.Target, strings.ToLower(d.State.Label()), attemptsText(d.Attempts))
	}
	return c.confirm(w, r, v.Button, v, func() (string, error) {
		a, err := messageAction(r, s, "")
		if err != nil {
			return "", err
		}
		after, err := c.cfg.Writer.Redeliver(r.Context(), m.ID, d.ID, a)
		if err != nil {
			return "", err
		}
		c.log.Info("delivery redelivered", "message_id", m.ID, "delivery_id", d.ID, "operator", s.Name, "version", after.Version, "via", "console")
		return fmt.Sprintf("The delivery to %s is queued again.", d.Target), nil
	})
}

// skip asks, with an optional reason, then settles one delivery of a
// message without sending it (POST
// /messages/{id}/deliveries/{delivery_id}/skip). Skipping a lane's head
// lets the next delivery of the lane go.
func (c *Console) skip(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, d, err := c.loadDelivery(r)
	if err != nil {
		return err
	}
	reason := reasonField(r)
	v := confirmView{
		Question: fmt.Sprintf("Skip the delivery of message %s to %s?", m.ID, d.Target),
		Explanation: fmt.Sprintf("The delivery to %s is %s %s. Skipping settles it without sending it: %s does not receive the message unless it is sent again later.",
			d.Target, strings.ToLower(d.State.Label()), attemptsText(d.Attempts), d.Target),
		Button:  "Skip",
		Danger:  true,
		Back:    "/ui/messages/" + m.ID.String(),
		Version: m.Version,
		Fields:  []field{reason},
	}
	if d.State == lifecycle.StateAwaitingAck {
		v.Explanation = fmt.Sprintf("%s has the message and its receipt is awaited. Skipping settles the delivery without waiting for the receipt.", d.Target)
	}
	v.Explanation += laneText(m, d)
	return c.confirm(w, r, "Skip", v, func() (string, error) {
		a, err := messageAction(r, s, reason.Value)
		if err != nil {
			return "", err
		}
		after, err := c.cfg.Writer.Skip(r.Context(), m.ID, d.ID, a)
		if err != nil {
			return "", err
		}
		c.log.Info("delivery skipped", "message_id", m.ID, "delivery_id", d.ID, "operator", s.Name, "version", after.Version, "via", "console")
		return fmt.Sprintf("The delivery to %s is skipped.", d.Target), nil
	})
}

// laneText says what skipping d does to its lane: takes a waiting one out
// of it, or lets the next go after the head; nothing when d is in no lane
// or has settled for it already.
func laneText(m *projection.Message, d *projection.Delivery) string {
	onFailure := lifecycle.OnFailureBlock
	if d.LaneContinue {
		onFailure = lifecycle.OnFailureContinue
	}
	switch {
	case d.LaneSeq == 0 || lifecycle.LaneSettled(d.State, onFailure):
		return ""
	case d.State == lifecycle.StateBlocked:
		return fmt.Sprintf(" It waits at place %d of the lane of ordering key %q: skipping takes it out of the lane, and the deliveries behind it keep waiting for the lane's head.",
			d.LaneSeq, m.OrderingKey)
	}
	return fmt.Sprintf(" It holds the lane of ordering key %q: skipping it lets the next delivery of the lane go at once.", m.OrderingKey)
}

// loadDelivery is the message and the delivery the path names; not found
// when the delivery is not one of the message's.
func (c *Console) loadDelivery(r *http.Request) (*projection.Message, *projection.Delivery, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, nil, err
	}
	deliveryID, err := pathID(r, "delivery_id")
	if err != nil {
		return nil, nil, err
	}
	m, err := projection.Load(r.Context(), c.cfg.DB, id)
	if err != nil {
		return nil, nil, err
	}
	d := m.Delivery(deliveryID)
	if d == nil {
		return nil, nil, fmt.Errorf("delivery %s of message %s: %w", deliveryID, id, commands.ErrNotFound)
	}
	return m, d, nil
}

// attemptsText says how many attempts came before.
func attemptsText(n int) string {
	switch n {
	case 0:
		return "before any attempt"
	case 1:
		return "after 1 attempt"
	}
	return fmt.Sprintf("after %d attempts", n)
}

// pathID reads a UUID from the path; a page whose id is not one is not
// found, as one whose id names nothing.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	v := r.PathValue(name)
	id, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		return uuid.Nil, fmt.Errorf("%s %q: %w", name, v, commands.ErrNotFound)
	}
	return id, nil
}

// nextAttempt is when a delivery is next woken while it is queued or
// retrying, or comes due while scheduled, zero in any other state: the
// API's next_attempt_at.
func nextAttempt(d projection.Delivery) time.Time {
	if d.State == lifecycle.StateQueued || d.State == lifecycle.StateRetrying || d.State == lifecycle.StateScheduled {
		return d.NextDue
	}
	return time.Time{}
}
