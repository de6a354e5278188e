package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/netguard"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/sources"
)

// ingest stores a message and routes it: 201, or 200 with the message held
// for a repeated idempotency key, 409 when that message differs. A failure
// to store it is 503.
func (s *Server) ingest(w http.ResponseWriter, r *http.Request) error {
	var req IngestRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		for _, fe := range fieldErrors(err) {
			if fe.Field == "payload" && strings.HasPrefix(fe.Problem, "must be a string") {
				// A JSON document given as JSON, the likeliest slip.
				fe.Problem += `: a JSON document goes in it as text ("{\"order\": 1}"), other bytes in payload_base64`
			}
		}
		return err
	}
	if err := s.mayPost(r, req.Source); err != nil {
		return err
	}
	in, err := newMessage(req)
	if err != nil {
		return err
	}
	if err := s.checkCallback(r.Context(), in.CallbackURL); err != nil {
		return err
	}
	ctx, traced := s.traceIngest(r, &in)
	m, created, err := s.cfg.Writer.Ingest(ctx, in)
	traced(m, created, err)
	if errors.Is(err, commands.ErrIdempotencyConflict) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", Prefix+"/messages/"+m.ID.String())
	}
	s.log.DebugContext(ctx, "message ingested", "message_id", m.ID, "source", m.Source, "status", m.Status, "new", created)
	writeJSON(w, status, messageFor(r, m))
	return nil
}

// checkCallback refuses a callback URL that the settings' callbacks do not
// allow by its host alone: a special address written literally, or
// localhost (callbacks.allowed_networks), or a host outside a non-empty
// callbacks.allowed_hosts. A name that resolves to a special address
// fails its calls instead, when they dial it.
func (s *Server) checkCallback(ctx context.Context, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil // the Writer's check says what is wrong with it
	}
	settings, err := s.cfg.Writer.CachedSettings(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	c := settings.Callbacks
	err = netguard.Policy{Networks: c.Networks(), Hosts: c.AllowedHosts}.CheckHost(u.Hostname())
	switch {
	case errors.Is(err, netguard.ErrHost):
		return fieldError("callback_url", fmt.Sprintf("host %q is not among callbacks.allowed_hosts, which an admin sets", u.Hostname()))
	case err != nil:
		return fieldError("callback_url", fmt.Sprintf("%v, which callbacks reach only in a network callbacks.allowed_networks lists; an admin sets it", err))
	}
	return nil
}

// mayPost refuses a message to a source out of the token's scope, or to
// a source Waybill polls: that source's messages, and the keys they are
// known by, are its own.
func (s *Server) mayPost(r *http.Request, source string) error {
	id := identity(r)
	if !id.Source(source) {
		return outOfScope(r, auth.Ingest, scopeOf(id)+", not to "+source)
	}
	polled, ok, err := s.cfg.Writer.Source(r.Context(), source)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	if ok && polled.Kind == sources.KindWebhook {
		return outOfScope(r, auth.Ingest, fmt.Sprintf(
			"source %s is a webhook source: its messages come only from its sender's signed requests to %s/sources/%s/webhook; post under another source name",
			source, Prefix, source))
	}
	if ok {
		return outOfScope(r, auth.Ingest, fmt.Sprintf(
			"source %s is a %s source that Waybill polls itself: its messages come only from there; post under another source name",
			source, polled.Kind))
	}
	return nil
}

// newMessage is the message a request hands in, or every problem of the
// request at once: the payload's, and those the Writer would find.
func newMessage(req IngestRequest) (commands.NewMessage, error) {
	in := commands.NewMessage{Source: req.Source, From: req.From, To: req.To, ContentType: req.ContentType,
		IdempotencyKey: req.IdempotencyKey, OrderingKey: req.OrderingKey, DuplicateKey: req.DuplicateKey,
		CallbackURL: req.CallbackURL, Type: req.Type, Delay: req.Delay, Headers: req.Headers}
	if req.DeliverAt != nil {
		in.DeliverAt = *req.DeliverAt
	}
	var errs []error
	if ct := req.ContentType; ct != "" {
		// What a target sends the receiver as its Content-Type: a media
		// type, type/subtype, with parameters if any.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !strings.Contains(mt, "/") {
			errs = append(errs, &lifecycle.FieldError{Field: "content_type",
				Problem: fmt.Sprintf("%q is not a media type such as application/json or text/plain; charset=utf-8", lifecycle.Cut(ct, 100))})
		}
	}
	if sources.ReservedKey(req.IdempotencyKey) {
		errs = append(errs, &lifecycle.FieldError{Field: "idempotency_key", Problem: fmt.Sprintf(
			"may not start with %q, %q or %q: those keys are the sources' own", sources.RowKeyPrefix, sources.FileKeyPrefix,
			sources.WebhookKeyPrefix)})
	}
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		errs = append(errs, &lifecycle.FieldError{Field: "payload", Problem: "give payload (text) or payload_base64 (bytes), not both"})
	case req.Payload != nil:
		in.Payload = []byte(*req.Payload)
		if in.ContentType == "" {
			in.ContentType = "text/plain; charset=utf-8"
		}
	case req.PayloadBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "payload_base64", Problem: "must be standard base64 with padding: " + err.Error()})
		}
		in.Payload = b
		if in.ContentType == "" {
			in.ContentType = "application/octet-stream"
		}
	default:
		errs = append(errs, &lifecycle.FieldError{Field: "payload", Problem: "is required: give payload (text) or payload_base64 (bytes)"})
	}
	if len(errs) > 0 {
		// The Writer's check of the other fields, which it would run
		// only once the payload is right.
		errs = append(errs, checkAccepted(in)...)
	}
	return in, invalid(errs...)
}

// The bounds of a page of messages.
const (
	defaultMessageLimit = 50
	maxMessageLimit     = 500
)

// messageParams are the query parameters of the messages list.
var messageParams = []string{"status", "source", "target", "ordering_key", "possible_duplicate", "type", "from", "to",
	"idempotency_key", "created_after", "created_before", "limit", "cursor"}

// listMessages pages the messages newest first (projection.ListMessages).
func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	f, err := messageFilterOf(r.URL.Query())
	if err != nil {
		return err
	}
	if id := identity(r); id.Scope != nil {
		switch {
		case f.Source == "":
			f.Sources = id.Scope.Sources
		case !id.Source(f.Source):
			return outOfScope(r, auth.Read, scopeOf(id)+", not to "+f.Source)
		}
	}
	page, next, err := projection.ListMessages(r.Context(), s.cfg.DB, f)
	if err != nil {
		return err
	}
	out := MessageList{Items: make([]Message, 0, len(page))}
	if next != nil {
		cursor := next.String()
		out.NextCursor = &cursor
	}
	for _, m := range page {
		out.Items = append(out.Items, messageOf(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// messageFilterOf reads the messages list's filter from its query
// parameters, or every problem of them at once.
func messageFilterOf(q url.Values) (projection.MessageFilter, error) {
	var (
		f    projection.MessageFilter
		errs []error
		err  error
	)
	if v := q.Get("status"); v != "" {
		if f.Status, err = lifecycle.ParseMessageStatus(v); err != nil {
			return f, &statusError{value: v}
		}
	}
	if f.Source = q.Get("source"); f.Source != "" {
		errs = append(errs, lifecycle.CheckName("source", f.Source))
	}
	if f.Target = q.Get("target"); f.Target != "" {
		errs = append(errs, lifecycle.CheckName("target", f.Target))
	}
	if f.OrderingKey = q.Get("ordering_key"); f.OrderingKey != "" {
		errs = append(errs, lifecycle.CheckOrderingKey("ordering_key", f.OrderingKey))
	}
	if f.Type = q.Get("type"); f.Type != "" {
		errs = append(errs, lifecycle.CheckMessageType("type", f.Type))
	}
	if f.From = q.Get("from"); f.From != "" {
		errs = append(errs, lifecycle.CheckParty("from", f.From))
	}
	if f.To = q.Get("to"); f.To != "" {
		errs = append(errs, lifecycle.CheckParty("to", f.To))
	}
	f.IdempotencyKey = q.Get("idempotency_key")
	errs = append(errs, lifecycle.CheckKey("idempotency_key", f.IdempotencyKey))
	if v := q.Get("possible_duplicate"); v != "" {
		// One spelling, as the docs give it: true.
		if f.PossibleDuplicate = v == "true"; !f.PossibleDuplicate {
			errs = append(errs, &lifecycle.FieldError{Field: "possible_duplicate", Problem: fmt.Sprintf("%q: allowed is true", v)})
		}
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"created_after", &f.CreatedAfter}, {"created_before", &f.CreatedBefore}} {
		if v := q.Get(p.name); v != "" {
			*p.t, err = parseTime(p.name, v)
			errs = append(errs, err)
		}
	}
	f.Limit, err = limitOf(q, defaultMessageLimit, maxMessageLimit)
	errs = append(errs, err)
	if v := q.Get("cursor"); v != "" {
		c, err := projection.ParseCursor(v)
		errs = append(errs, err)
		f.After = &c
	}
	return f, invalid(errs...)
}

// getMessage answers the message resource.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	m, err := projection.Load(r.Context(), s.cfg.DB, id)
	if err != nil {
		return err
	}
	if err := inScope(r, m); err != nil {
		return err
	}
	w.Header().Set("ETag", etag(m.Version))
	writeJSON(w, http.StatusOK, messageOf(m))
	return nil
}

// inScope answers a message out of the scope of the request's token as
// one that does not exist: the token learns nothing of other sources.
func inScope(r *http.Request, m *projection.Message) error {
	if !identity(r).Source(m.Source) {
		return fmt.Errorf("message %s: %w", m.ID, commands.ErrNotFound)
	}
	return nil
}

// scopedMessage is inScope for a handler that does not load the message
// itself: it loads it only for a scoped token.
func (s *Server) scopedMessage(r *http.Request, id uuid.UUID) error {
	if identity(r).Scope == nil {
		return nil
	}
	m, err := projection.Load(r.Context(), s.cfg.DB, id)
	if err != nil {
		return err
	}
	return inScope(r, m)
}

// getPayload answers the message's bytes with their content type. The
// bytes are the source's, not ours: the headers keep a browser from
// running them as a page of the API's origin.
func (s *Server) getPayload(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := s.scopedMessage(r, id); err != nil {
		return err
	}
	p, err := projection.LoadPayload(r.Context(), s.cfg.DB, id, 0)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", p.ContentType)
	h.Set("Content-Length", strconv.Itoa(len(p.Body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(p.Body)
	return nil
}

// getHistory answers the message's events, read from the journal.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := s.scopedMessage(r, id); err != nil {
		return err
	}
	events, err := journal.Stream(r.Context(), s.cfg.DB, journal.MessageStream(id))
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return fmt.Errorf("history of message %s: %w", id, commands.ErrNotFound)
	}
	out := History{Items: make([]HistoryEntry, len(events))}
	for i, e := range events {
		out.Items[i] = historyOf(e)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// receipt settles a delivery awaiting its receipt and answers the delivery,
// nothing more of its message: a receipt token reads only what it confirms.
// A receipt for a delivery in any other state is journaled as refused and
// answered 409.
func (s *Server) receipt(w http.ResponseWriter, r *http.Request) error {
	deliveryID, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req ReceiptRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	var errs []error
	if req.Outcome != ReceiptPositive && req.Outcome != ReceiptNegative {
		errs = append(errs, &lifecycle.FieldError{Field: "outcome", Problem: fmt.Sprintf("%q: allowed are positive, negative", req.Outcome)})
	}
	if err := invalid(append(errs, lifecycle.CheckReceiptText("text", req.Text))...); err != nil {
		return err
	}
	if id := identity(r); id.Scope != nil {
		target, err := projection.DeliveryTarget(r.Context(), s.cfg.DB, deliveryID)
		if err != nil {
			return err
		}
		if !id.Target(target) {
			// The other target is not named: the token learns nothing of
			// a delivery outside its scope.
			return outOfScope(r, auth.Confirm, scopeOf(id)+", not to this delivery's")
		}
	}
	operator := identity(r).Name
	m, err := s.cfg.Writer.Receipt(r.Context(), deliveryID, req.Outcome == ReceiptPositive, req.Text, actor(r))
	if m != nil {
		s.log.Info("receipt", "message_id", m.ID, "delivery_id", deliveryID, "operator", operator,
			"outcome", req.Outcome, "refused", errors.Is(err, commands.ErrReceiptRefused))
	}
	if err != nil {
		return err
	}
	i := slices.IndexFunc(m.Deliveries, func(d projection.Delivery) bool { return d.ID == deliveryID })
	if i < 0 {
		return fmt.Errorf("receipt: delivery %s is not among its message's", deliveryID)
	}
	writeJSON(w, http.StatusOK, deliveryFor(r, m.Deliveries[i]))
	return nil
}

// externalReceipt applies a receipt that names its delivery by the
// receiver's id and answers the delivery, as receipt does. An unknown id
// is 404 and a consumed one 409 CORRELATION_CONSUMED; both change nothing.
func (s *Server) externalReceipt(w http.ResponseWriter, r *http.Request) error {
	var req ExternalReceiptRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	in, err := externalReceiptOf(req)
	if err != nil {
		return err
	}
	if id := identity(r); !id.Target(in.Target) {
		return outOfScope(r, auth.Confirm, scopeOf(id)+", not to "+in.Target)
	}
	m, deliveryID, err := s.cfg.Writer.ReceiptByExternalID(r.Context(), in, actor(r))
	result := receiptSettled
	switch {
	case errors.Is(err, commands.ErrNotFound):
		result = receiptUnknown
	case errors.Is(err, commands.ErrCorrelationConsumed):
		result = receiptConsumed
	case errors.Is(err, commands.ErrReceiptRefused):
		result = receiptRefused
	case err != nil:
		return err
	case !in.Final:
		result = receiptIntermediate
	}
	s.metrics.receipts.WithLabelValues(result).Inc()
	s.log.Info("receipt by receiver's id", "target", in.Target, "external_id", in.ExternalID, "final", in.Final,
		"result", result, "operator", identity(r).Name, "delivery_id", deliveryID)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(m.Deliveries, func(d projection.Delivery) bool { return d.ID == deliveryID })
	if i < 0 {
		return fmt.Errorf("receipt: delivery %s is not among its message's", deliveryID)
	}
	writeJSON(w, http.StatusOK, deliveryFor(r, m.Deliveries[i]))
	return nil
}

// externalReceiptOf is the receipt a request by the receiver's id
// hands in, or every problem of it at once.
func externalReceiptOf(req ExternalReceiptRequest) (commands.ExternalReceipt, error) {
	in := commands.ExternalReceipt{Target: req.Target, ExternalID: req.ExternalID, Final: req.Final == nil || *req.Final,
		Positive: req.Outcome == ReceiptPositive, Status: req.Status, Code: req.Code, Text: req.Text}
	var errs []error
	switch {
	case req.Outcome == "" && in.Final:
		errs = append(errs, &lifecycle.FieldError{Field: "outcome", Problem: "is required of a final receipt: positive or negative"})
	case req.Outcome != "" && req.Outcome != ReceiptPositive && req.Outcome != ReceiptNegative:
		errs = append(errs, &lifecycle.FieldError{Field: "outcome", Problem: fmt.Sprintf("%q: allowed are positive, negative", req.Outcome)})
	}
	return in, invalid(append(errs, in.Validate())...)
}

// pathID reads a UUID from the path.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	v := r.PathValue(name)
	id, err := uuid.Parse(v)
	if err != nil || len(v) != 36 {
		return uuid.Nil, fieldError(name, fmt.Sprintf("%q is not a UUID: write it as 8-4-4-4-12 hexadecimal digits", v))
	}
	return id, nil
}

// limitOf reads the limit parameter: def when absent, 1 to max.
func limitOf(q url.Values, def, max int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return def, &lifecycle.FieldError{Field: "limit", Problem: fmt.Sprintf("%q: must be a whole number from 1 to %d", v, max)}
	}
	return n, nil
}

// parseTime reads an RFC 3339 time. A '+' of the offset arrives as a space
// when the client did not escape it; it is taken back.
func parseTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, strings.Replace(v, " ", "+", 1))
	if err != nil {
		return time.Time{}, &lifecycle.FieldError{Field: name,
			Problem: fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T08:00:00Z", v)}
	}
	return t, nil
}
