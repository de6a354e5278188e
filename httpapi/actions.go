package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The operator's actions on a message: each takes If-Match with the
// version the operator acted on (the message's ETag), and answers the
// message as the action left it.

// etag is a message version as the ETag and If-Match headers carry it.
func etag(version int) string { return `"` + strconv.Itoa(version) + `"` }

// action is the commands.Action of a request: its token's name, and the
// version If-Match names (none, or "*", for any).
func action(r *http.Request, reason string) (commands.Action, error) {
	a := commands.Action{Operator: identity(r).Name, Reason: reason}
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" || v == "*" {
		return a, nil
	}
	n, err := strconv.Atoi(strings.Trim(v, `"`))
	if err != nil || n < 1 || !strings.HasPrefix(v, `"`) || !strings.HasSuffix(v, `"`) {
		return a, &lifecycle.FieldError{Field: "If-Match",
			Problem: fmt.Sprintf("%q is not a version of a message: send its ETag as it was given, such as \"7\"", v)}
	}
	a.IfVersion = n
	return a, nil
}

// acted answers the message an action left, with its new ETag.
func (s *Server) acted(w http.ResponseWriter, m *projection.Message, what string, args ...any) {
	s.log.Info(what, append([]any{"message_id", m.ID, "version", m.Version}, args...)...)
	w.Header().Set("ETag", etag(m.Version))
	writeJSON(w, http.StatusOK, messageOf(m))
}

// actOn reads the path's message id, the body into req (which may be
// absent) and the action, and runs do.
func (s *Server) actOn(w http.ResponseWriter, r *http.Request, req any, reason func() string,
	do func(id uuid.UUID, a commands.Action) (*projection.Message, error), what string, logArgs ...any) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := s.readJSON(w, r, req, true); err != nil {
		return err
	}
	a, err := action(r, reason())
	if err != nil {
		return invalid(err)
	}
	m, err := do(id, a)
	if err != nil {
		return err
	}
	s.acted(w, m, what, append([]any{"operator", a.Operator}, logArgs...)...)
	return nil
}

func noReason() string { return "" }

// redispatch matches the current routes again for a dispatched message.
func (s *Server) redispatch(w http.ResponseWriter, r *http.Request) error {
	return s.actOn(w, r, &ActionRequest{}, noReason, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.Redispatch(r.Context(), id, a)
	}, "message redispatched")
}

// deliverNow makes a scheduled message's deliveries due now.
func (s *Server) deliverNow(w http.ResponseWriter, r *http.Request) error {
	return s.actOn(w, r, &ActionRequest{}, noReason, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.DeliverNow(r.Context(), id, a)
	}, "message delivered now")
}

// redeliver queues one delivery of the message again.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) error {
	deliveryID, err := pathID(r, "delivery_id")
	if err != nil {
		return err
	}
	return s.actOn(w, r, &ActionRequest{}, noReason, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.Redeliver(r.Context(), id, deliveryID, a)
	}, "delivery redelivered", "delivery_id", deliveryID)
}

// skip settles a delivery without sending it, with the reason the body
// may give.
func (s *Server) skip(w http.ResponseWriter, r *http.Request) error {
	deliveryID, err := pathID(r, "delivery_id")
	if err != nil {
		return err
	}
	var req SkipRequest
	return s.actOn(w, r, &req, func() string { return req.Reason }, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.Skip(r.Context(), id, deliveryID, a)
	}, "delivery skipped", "delivery_id", deliveryID)
}

// resend sends the message again as a new generation, to the targets of
// the current one or those the body names.
func (s *Server) resend(w http.ResponseWriter, r *http.Request) error {
	var req ResendRequest
	return s.actOn(w, r, &req, func() string { return req.Reason }, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.Resend(r.Context(), id, req.Targets, a)
	}, "message resent")
}

// replay sends the message again as a new generation, to the targets the
// routes match now.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) error {
	var req ReplayRequest
	return s.actOn(w, r, &req, func() string { return req.Reason }, func(id uuid.UUID, a commands.Action) (*projection.Message, error) {
		return s.cfg.Writer.Replay(r.Context(), id, a)
	}, "message replayed")
}
