package httpapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// ingest stores a message and routes it: 201, or 200 with the message held
// for a repeated idempotency key. A failure to store it is 503.
func (s *Server) ingest(w http.ResponseWriter, r *http.Request) error {
	var req IngestRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	in, err := newMessage(req)
	if err != nil {
		return err
	}
	m, created, err := s.cfg.Writer.Ingest(r.Context(), in)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotStored, err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", Prefix+"/messages/"+m.ID.String())
	}
	s.log.Debug("message ingested", "message_id", m.ID, "source", m.Source, "status", m.Status, "new", created)
	writeJSON(w, status, messageOf(m))
	return nil
}

// newMessage is the message a request hands in, or every problem of the
// request at once: the payload's, and those the Writer would find.
func newMessage(req IngestRequest) (commands.NewMessage, error) {
	in := commands.NewMessage{Source: req.Source, From: req.From, To: req.To,
		ContentType: req.ContentType, IdempotencyKey: req.IdempotencyKey}
	var errs []error
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
		accepted := journal.MessageAccepted{Source: in.Source, From: in.From, To: in.To, ContentType: in.ContentType,
			PayloadSHA256: strings.Repeat("0", 64), IdempotencyKey: in.IdempotencyKey}
		if accepted.ContentType == "" {
			accepted.ContentType = "application/octet-stream"
		}
		errs = append(errs, accepted.Validate())
	}
	return in, invalid(errs...)
}

// The bounds of a page of messages.
const (
	defaultMessageLimit = 50
	maxMessageLimit     = 500
)

// listMessages pages the messages newest first, by (created_at, id)
// descending, on the messages_created index or, with a status or source,
// on messages_status_created or messages_source_created. With a target it
// walks that target's deliveries on deliveries_target_message, which holds
// their messages' (created_at, id), so a target with few messages costs
// no more than one with many.
func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, "status", "source", "target", "created_after", "created_before", "limit", "cursor")
	if err != nil {
		return err
	}
	var (
		where []string
		args  []any
		errs  []error
	)
	from, createdAt, id := "messages m", "m.created_at", "m.id"
	if q.Get("target") != "" {
		from, createdAt, id = "deliveries d JOIN messages m ON m.id = d.message_id", "d.message_created_at", "d.message_id"
	}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if v := q.Get("status"); v != "" {
		status, err := lifecycle.ParseMessageStatus(v)
		if err != nil {
			return &statusError{value: v}
		}
		where = append(where, "m.status = "+arg(status))
	}
	if v := q.Get("source"); v != "" {
		errs = append(errs, lifecycle.CheckName("source", v))
		where = append(where, "m.source = "+arg(v))
	}
	if v := q.Get("target"); v != "" {
		errs = append(errs, lifecycle.CheckName("target", v))
		where = append(where, "d.target = "+arg(v))
	}
	for _, p := range []struct{ name, op string }{{"created_after", ">"}, {"created_before", "<"}} {
		if v := q.Get(p.name); v != "" {
			t, err := parseTime(p.name, v)
			errs = append(errs, err)
			where = append(where, createdAt+" "+p.op+" "+arg(t))
		}
	}
	limit, err := limitOf(q, defaultMessageLimit, maxMessageLimit)
	errs = append(errs, err)
	if v := q.Get("cursor"); v != "" {
		at, cursorID, err := decodeMessageCursor(v)
		errs = append(errs, err)
		where = append(where, "("+createdAt+", "+id+") < ("+arg(at)+", "+arg(cursorID)+")")
	}
	if err := invalid(errs...); err != nil {
		return err
	}
	sql := "SELECT m.id FROM " + from
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY " + createdAt + " DESC, " + id + " DESC LIMIT " + arg(limit+1)

	var page []*projection.Message
	// One snapshot for the page and its deliveries, so every item is as it
	// was when the page was chosen.
	err = pgx.BeginTxFunc(r.Context(), s.cfg.DB, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			rows, err := tx.Query(r.Context(), sql, args...)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return err
			}
			loaded, err := projection.LoadMany(r.Context(), tx, ids)
			if err != nil {
				return err
			}
			byID := make(map[uuid.UUID]*projection.Message, len(loaded))
			for _, m := range loaded {
				byID[m.ID] = m
			}
			for _, id := range ids {
				if m := byID[id]; m != nil {
					page = append(page, m)
				}
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("list messages: %w", err)
	}
	out := MessageList{Items: make([]Message, 0, min(len(page), limit))}
	if len(page) > limit {
		last := page[limit-1]
		cursor := encodeMessageCursor(last.CreatedAt, last.ID)
		out.NextCursor = &cursor
		page = page[:limit]
	}
	for _, m := range page {
		out.Items = append(out.Items, messageOf(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// A message cursor is the (created_at, id) of the last message of a page,
// in microseconds since 1970 and the id, as unpadded base64url.
func encodeMessageCursor(at time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "m1:%d:%s", at.UnixMicro(), id))
}

func decodeMessageCursor(s string) (time.Time, uuid.UUID, error) {
	bad := &lifecycle.FieldError{Field: "cursor", Problem: "is not a cursor of this list: pass next_cursor as it was given"}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, uuid.Nil, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "m1" {
		return time.Time{}, uuid.Nil, bad
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := uuid.Parse(parts[2])
	if err1 != nil || err2 != nil {
		return time.Time{}, uuid.Nil, bad
	}
	return time.UnixMicro(micros).UTC(), id, nil
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
	writeJSON(w, http.StatusOK, messageOf(m))
	return nil
}

// getPayload answers the message's bytes with their content type. The
// bytes are the source's, not ours: the headers keep a browser from
// running them as a page of the API's origin.
func (s *Server) getPayload(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var (
		contentType string
		expunged    bool
		body        []byte
	)
	err = s.cfg.DB.QueryRow(r.Context(), `SELECT m.content_type, m.payload_expunged, p.body FROM messages m
		LEFT JOIN payloads p ON p.message_id = m.id WHERE m.id = $1`, id).Scan(&contentType, &expunged, &body)
	switch {
	case err == nil && expunged:
		return &expungedError{id: id}
	case errors.Is(err, pgx.ErrNoRows) || err == nil && body == nil:
		return fmt.Errorf("payload of message %s: %w", id, commands.ErrNotFound)
	case err != nil:
		return fmt.Errorf("payload of message %s: %w", id, err)
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	return nil
}

// getHistory answers the message's events, read from the journal.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
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

// redispatch matches the current routes again for a dispatched message.
func (s *Server) redispatch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := s.readJSON(w, r, &ActionRequest{}, true); err != nil {
		return err
	}
	operator := identity(r).Name
	m, err := s.cfg.Writer.Redispatch(r.Context(), id, operator)
	if err != nil {
		return err
	}
	s.log.Info("message redispatched", "message_id", id, "operator", operator, "deliveries", len(m.Deliveries))
	writeJSON(w, http.StatusOK, messageOf(m))
	return nil
}

// redeliver queues one delivery of the message again.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	deliveryID, err := pathID(r, "delivery_id")
	if err != nil {
		return err
	}
	if err := s.readJSON(w, r, &ActionRequest{}, true); err != nil {
		return err
	}
	operator := identity(r).Name
	m, err := s.cfg.Writer.Redeliver(r.Context(), id, deliveryID, operator)
	if err != nil {
		return err
	}
	s.log.Info("delivery redelivered", "message_id", id, "delivery_id", deliveryID, "operator", operator)
	writeJSON(w, http.StatusOK, messageOf(m))
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
	if req.Outcome != ReceiptPositive && req.Outcome != ReceiptNegative {
		return fieldError("outcome", fmt.Sprintf("%q: allowed are positive, negative", req.Outcome))
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
	writeJSON(w, http.StatusOK, deliveryOf(m.Deliveries[i]))
	return nil
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

// query returns the request's query parameters, refusing any not named in
// allowed and any given twice.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fieldError("query", "is not a valid query string: "+err.Error())
	}
	var errs []error
	for name, values := range q {
		switch {
		case !slices.Contains(allowed, name):
			errs = append(errs, &lifecycle.FieldError{Field: name,
				Problem: "is not a parameter here: allowed are " + strings.Join(allowed, ", ")})
		case len(values) > 1:
			errs = append(errs, &lifecycle.FieldError{Field: name, Problem: "is given more than once"})
		}
	}
	return q, invalid(errs...)
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
