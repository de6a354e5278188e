package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/routing"
)

// TryRequest is the body of POST /routes/try: a stored message by its id,
// or a message in the ingest body's shape.
type TryRequest struct {
	// MessageID names a stored message to try, with its payload; alone.
	MessageID   string            `json:"message_id"`
	Source      string            `json:"source"`
	From        string            `json:"from"`
	To          string            `json:"to"`
	Type        string            `json:"type"`
	Headers     map[string]string `json:"headers"`
	ContentType string            `json:"content_type"`
	Payload     *string           `json:"payload"`
	// PayloadBase64 is the payload in standard base64 with padding.
	PayloadBase64 *string `json:"payload_base64"`
}

// Trial is what the routes and the targets' transforms make of a message,
// evaluated as a dispatch would, with nothing written.
type Trial struct {
	// Targets are the targets the message would go to, in name order.
	Targets []string `json:"targets"`
	// Routes are the routes' verdicts, oldest route first: for a token
	// scoped to sources, those of the message's source only.
	Routes []RouteVerdict `json:"routes"`
	// Shapes are what each target of Targets would be sent, in its order.
	Shapes []TrialShape `json:"shapes"`
}

// RouteVerdict is whether a route takes the message, and why not.
type RouteVerdict struct {
	Route   lifecycle.Route `json:"route"`
	Matched bool            `json:"matched"`
	// Why says why it does not take the message: its source, parties or
	// types, its filter yielding false, or its filter's error.
	Why string `json:"why,omitempty"`
	// FilterError is the error of a filter that failed on the message,
	// which does not match.
	FilterError string `json:"filter_error,omitempty"`
}

// TrialShape is what a target's transform makes of the delivery: the
// journal's shape of it, and the payload sent instead of the message's,
// when it is another.
type TrialShape struct {
	Target string `json:"target"`
	// Outcome is as_is (no transform, or one that changed nothing),
	// shaped, cancelled or failed.
	Outcome string `json:"outcome"`
	journal.Shape
	Payload string `json:"payload,omitempty"`
}

// tryRoutes answers what the routes and the targets' transforms make of
// a message (commands.Writer.Try, as the console's box), writing nothing.
func (s *Server) tryRoutes(w http.ResponseWriter, r *http.Request) error {
	var req TryRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	m, err := s.tryMessage(r, req)
	if err != nil {
		return err
	}
	trial, err := s.cfg.Writer.Try(r.Context(), m)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, trialOf(trial, identity(r).Scope != nil, redact.Hides(identity(r).Role), m.Source))
	return nil
}

// tryMessage is the message req names or gives, within the token's scope:
// a stored message of another source is not found, as for every read,
// and a given one of another source is refused.
func (s *Server) tryMessage(r *http.Request, req TryRequest) (routing.Message, error) {
	if req.MessageID == "" {
		in, err := newMessage(IngestRequest{Source: req.Source, From: req.From, To: req.To, Type: req.Type, Headers: req.Headers,
			ContentType: req.ContentType, Payload: req.Payload, PayloadBase64: req.PayloadBase64})
		if err == nil {
			err = invalid(checkAccepted(in)...)
		}
		if err != nil {
			return routing.Message{}, err
		}
		if id := identity(r); !id.Source(in.Source) {
			return routing.Message{}, outOfScope(r, auth.Read, scopeOf(id)+", not to "+in.Source)
		}
		headers, _ := lifecycle.LowerHeaders("headers", in.Headers) // checked above
		return routing.Message{Source: in.Source, From: in.From, To: in.To, Type: in.Type, Headers: headers,
			ContentType: in.ContentType, Size: int64(len(in.Payload)), Payload: in.Payload}, nil
	}
	if req.Source != "" || req.From != "" || req.To != "" || req.Type != "" || req.Headers != nil || req.ContentType != "" ||
		req.Payload != nil || req.PayloadBase64 != nil {
		return routing.Message{}, fieldError("message_id", "comes alone: give a stored message's id, or a message, not both")
	}
	id, err := uuid.Parse(req.MessageID)
	if err != nil {
		return routing.Message{}, fieldError("message_id", "must be a message id (a UUID)")
	}
	m, err := projection.Load(r.Context(), s.cfg.DB, id)
	if err == nil {
		err = inScope(r, m)
	}
	if err != nil {
		return routing.Message{}, err
	}
	p, err := projection.LoadPayload(r.Context(), s.cfg.DB, id, 0)
	if err != nil {
		return routing.Message{}, fmt.Errorf("try message %s: %w", id, err)
	}
	return commands.RoutingMessage(m, p.Body), nil
}

// trialOf is the answer of a trial of a message of source; a scoped
// token sees the verdicts of that source's routes only, and one that may
// not administer the values of the headers a transform sets masked
// (redact.Shape).
func trialOf(t routing.Trial, scoped, hide bool, source string) Trial {
	out := Trial{Targets: nonNil(t.Targets), Routes: []RouteVerdict{}, Shapes: make([]TrialShape, 0, len(t.Targets))}
	failed := map[uuid.UUID]string{}
	for _, e := range t.FilterErrors {
		failed[e.Route] = e.Error
	}
	for _, v := range t.Verdicts {
		if scoped && v.Route.Source != source {
			continue
		}
		out.Routes = append(out.Routes, RouteVerdict{Route: v.Route, Matched: v.Matched, Why: v.Why, FilterError: failed[v.Route.ID]})
	}
	for _, target := range t.Targets {
		sh := TrialShape{Target: target, Outcome: "as_is"}
		if s := t.Shapes[target]; s != nil {
			sh = TrialShape{Target: target, Outcome: "shaped", Shape: s.Shape, Payload: string(s.Body)}
			if hide {
				sh.Shape = redact.Shape(s.Shape)
			}
			switch {
			case s.Cancel != "":
				sh = TrialShape{Target: target, Outcome: "cancelled", Shape: journal.Shape{Cancel: s.Cancel}}
			case s.Error != "":
				sh = TrialShape{Target: target, Outcome: "failed", Shape: journal.Shape{Error: s.Error}}
			}
		}
		out.Shapes = append(out.Shapes, sh)
	}
	return out
}

// checkAccepted is every problem the Writer would find in in's fields but
// the payload's.
func checkAccepted(in commands.NewMessage) []error {
	accepted := journal.MessageAccepted{Source: in.Source, From: in.From, To: in.To, ContentType: in.ContentType,
		PayloadSHA256: strings.Repeat("0", 64), IdempotencyKey: in.IdempotencyKey, OrderingKey: in.OrderingKey,
		DuplicateKey: in.DuplicateKey, CallbackURL: in.CallbackURL, Type: in.Type}
	var errs []error
	var err error
	if accepted.Headers, err = lifecycle.LowerHeaders("headers", in.Headers); err != nil {
		errs = append(errs, err)
	}
	if accepted.ContentType == "" {
		accepted.ContentType = "application/octet-stream"
	}
	return append(errs, accepted.ValidateNew())
}
