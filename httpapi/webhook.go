package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/sources"
)

// webhookPattern is the one route served without a token: a webhook
// source's sender proves itself by its signature instead.
const webhookPattern = "POST " + Prefix + "/sources/{name}/webhook"

// WebhookReceived is the answer to a verified webhook request: the id of
// its message, stored now (201) or held already for its delivery id (200).
type WebhookReceived struct {
	MessageID uuid.UUID `json:"message_id"`
}

// webhook takes a request posted to a webhook source without a token.
// The body limit holds before anything else is done; a source that is
// unknown, disabled or of another kind is 404 alike; a request whose
// signature does not verify is 401 SIGNATURE_INVALID, counted by reason in
// waybill_ingest_refused_total and stored nowhere. A verified one is
// ingested as a message of the source, its content type and body as
// received, keyed by its delivery id (sources.WebhookKeyPrefix), so a
// repeat stores nothing and answers 200 with the message held.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) error {
	limit := s.cfg.MaxPayload
	if r.ContentLength > limit {
		return &http.MaxBytesError{Limit: limit}
	}
	name := r.PathValue("name")
	src, ok, err := s.cfg.Writer.Source(r.Context(), name)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	if !ok || !src.Enabled || src.Kind != sources.KindWebhook {
		// One answer for all three: a caller without a token learns
		// nothing of the sources.
		return fmt.Errorf("webhook source %q: %w", name, commands.ErrNotFound)
	}
	cfg, err := sources.Webhook(src)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return tooLarge
	}
	if err != nil {
		return fieldError("body", "could not be read: "+err.Error())
	}
	in, err := cfg.Check(r.Header, body, s.cfg.Now())
	if err != nil {
		var refused *sources.Unverified
		if errors.As(err, &refused) {
			s.metrics.refused.WithLabelValues(name, refused.Reason).Inc()
			s.log.Info("webhook refused", "source", name, "reason", refused.Reason, "detail", refused.Detail,
				"remote", r.RemoteAddr)
		}
		return err
	}
	msg := commands.NewMessage{Source: name, From: cfg.From, To: cfg.To, ContentType: r.Header.Get("Content-Type"),
		Payload: body, Type: in.Type, Headers: in.Headers}
	if msg.ContentType == "" {
		msg.ContentType = sources.DefaultContentType
	}
	if in.ID != "" {
		msg.IdempotencyKey = sources.WebhookKeyPrefix + in.ID
	}
	m, created, err := s.cfg.Writer.Ingest(r.Context(), msg)
	if errors.Is(err, commands.ErrIdempotencyConflict) || errors.Is(err, commands.ErrInvalid) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	s.log.Debug("webhook ingested", "message_id", m.ID, "source", name, "new", created)
	writeJSON(w, status, WebhookReceived{MessageID: m.ID})
	return nil
}
