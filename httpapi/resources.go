package httpapi

import (
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// IngestRequest is the body of POST /messages. Exactly one of Payload (text)
// and PayloadBase64 (any bytes) is given.
type IngestRequest struct {
	Source  string  `json:"source"`
	From    string  `json:"from"`
	To      string  `json:"to"`
	Payload *string `json:"payload"`
	// PayloadBase64 is the payload in standard base64 with padding.
	PayloadBase64 *string `json:"payload_base64"`
	// ContentType is the payload's media type. Default "text/plain;
	// charset=utf-8" for Payload, "application/octet-stream" for
	// PayloadBase64.
	ContentType string `json:"content_type"`
	// IdempotencyKey, when given, makes a repeat from the same source return
	// the message already held; up to 255 bytes.
	IdempotencyKey string `json:"idempotency_key"`
	// OrderingKey, when given, puts the message's deliveries to fifo targets
	// in the lanes of that key; 1 to 200 bytes.
	OrderingKey string `json:"ordering_key"`
	// DuplicateKey, when given, is the sender's identity of the message (a
	// control id, up to 255 bytes): an earlier message of the source with
	// the same key makes this one a possible duplicate of it. It is stored
	// and delivered all the same.
	DuplicateKey string `json:"duplicate_key"`
	// CallbackURL, when given, is POSTed the message's outcome each time
	// it settles: an absolute http or https URL.
	CallbackURL string `json:"callback_url"`
	// Type, when given, is what the message is in the sender's words,
	// such as invoice.created: 1 to 255 bytes of A-Z a-z 0-9 . _ : / -.
	Type string `json:"type"`
	// DeliverAt (RFC 3339) or Delay (a duration such as "90s"), when one
	// is given, schedules the message: its deliveries are made now but
	// first due then, at most 30 days ahead; a time past is now.
	DeliverAt *time.Time          `json:"deliver_at"`
	Delay     *lifecycle.Duration `json:"delay"`
	// Headers, when given, are the message's headers: string values, at
	// most 64 of them and 8 KiB in all; names are case-insensitive and
	// kept lower case.
	Headers map[string]string `json:"headers"`
}

// Message is the message resource.
type Message struct {
	ID uuid.UUID `json:"id"`
	// Version is the message's stream's version, its ETag: an action sent
	// with If-Match applies only while the message is at it.
	Version int                     `json:"version"`
	Source  string                  `json:"source"`
	From    string                  `json:"from"`
	To      string                  `json:"to"`
	Stage   lifecycle.MessageStage  `json:"stage"`
	Status  lifecycle.MessageStatus `json:"status"`
	// Generation counts the message's sends, from 1; the status reads the
	// current generation's deliveries.
	Generation int `json:"generation"`
	// Error is why the message was refused, or the last error of its first
	// failed (else stalled) delivery; null when there is none.
	Error         *string   `json:"error"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	PayloadSize   int64     `json:"payload_size"`
	PayloadSHA256 string    `json:"payload_sha256"`
	// PayloadExpunged is true once retention dropped the payload.
	PayloadExpunged bool `json:"payload_expunged"`
	// OrderingKey is the message's ordering key; null when it has none.
	OrderingKey *string `json:"ordering_key"`
	// DuplicateKey is the sender's identity of the message; null when none
	// was given. PossibleDuplicateOf is the latest earlier message of its
	// source with the same key, null when there is none.
	DuplicateKey        *string    `json:"duplicate_key"`
	PossibleDuplicateOf *uuid.UUID `json:"possible_duplicate_of"`
	// Type is what the message is in its sender's words; null when none
	// was given.
	Type *string `json:"type"`
	// DeliverAt is when a scheduled message's deliveries come due; null
	// unless the message is scheduled.
	DeliverAt *time.Time `json:"deliver_at"`
	// Headers are the message's headers, names lower case; {} for none.
	Headers map[string]string `json:"headers"`
	// Deliveries are every generation's, newest generation first, each in
	// the order it was made.
	Deliveries []Delivery `json:"deliveries"`
	// Callback is the message's outcome callback; null when it has no
	// callback URL.
	Callback *MessageCallback `json:"callback"`
	// Trace is the W3C trace context the message belongs to; null when it
	// has none.
	Trace *MessageTrace `json:"trace"`
}

// MessageTrace is a message's trace context, without its baggage, which
// holds the sender's own values.
type MessageTrace struct {
	Traceparent string `json:"traceparent"`
	// Tracestate is null when the trace has none.
	Tracestate *string `json:"tracestate"`
}

// MessageCallback is a message's outcome callback: the call of its URL for
// its latest settlement.
type MessageCallback struct {
	URL string `json:"url"`
	// Seq counts the settlements called back for; 0 before the first.
	Seq int `json:"seq"`
	// State is the call's: queued, delivering, retrying, delivered or
	// failed; null before the first settlement.
	State    *lifecycle.DeliveryState `json:"state"`
	Attempts int                      `json:"attempts"`
	// NextAttemptAt is when the next call is due while queued or
	// retrying; null otherwise.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastError     *string    `json:"last_error"`
	FinishedAt    *time.Time `json:"finished_at"`
}

// Delivery is one delivery of a message to one target.
type Delivery struct {
	ID uuid.UUID `json:"id"`
	// Generation is the message's generation the delivery belongs to.
	Generation int                     `json:"generation"`
	Target     string                  `json:"target"`
	State      lifecycle.DeliveryState `json:"state"`
	Attempts   int                     `json:"attempts"`
	// NextAttemptAt is when the delivery is next woken while queued or
	// retrying, or comes due while scheduled; null in any other state.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	LastError     *string    `json:"last_error"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	// FinishedAt is when it was delivered, failed or skipped; null before.
	FinishedAt *time.Time `json:"finished_at"`
	// LaneSeq is the delivery's place in the lane of its target and its
	// message's ordering key; null when it is in no lane.
	LaneSeq *int64 `json:"lane_seq"`
}

// ResendRequest is the body of POST /messages/{id}/resend: none, {}, the
// targets to send to, a reason.
type ResendRequest struct {
	// Targets, when given, are those of the current generation to send to;
	// all of them when left out.
	Targets []string `json:"targets"`
	Reason  string   `json:"reason"`
}

// ReplayRequest is the body of POST /messages/{id}/replay: none, {}, or a
// reason.
type ReplayRequest struct {
	Reason string `json:"reason"`
}

// SkipRequest is the body of POST /messages/{id}/deliveries/{delivery_id}/skip:
// none, {}, or a reason.
type SkipRequest struct {
	// Reason is kept in the journal with the operator.
	Reason string `json:"reason"`
}

// LaneHead is the delivery that holds a lane.
type LaneHead struct {
	MessageID  uuid.UUID               `json:"message_id"`
	DeliveryID uuid.UUID               `json:"delivery_id"`
	State      lifecycle.DeliveryState `json:"state"`
	// Since is when it became the lane's head.
	Since time.Time `json:"since"`
}

// Lane is one lane of a fifo target: its ordering key, the delivery at its
// head, and the deliveries waiting behind it.
type Lane struct {
	OrderingKey string    `json:"ordering_key"`
	Head        *LaneHead `json:"head"`
	Waiting     int64     `json:"waiting"`
	// WaitingSince is when the first of them began to wait behind this
	// head; null when none waits.
	WaitingSince *time.Time `json:"waiting_since"`
}

// LaneList is a page of a target's lanes, by ordering key. NextCursor
// continues the list; null on its last page. OrderingMode is the target's
// ordering.mode, so an empty page of a target that keeps no order says
// why it is empty.
type LaneList struct {
	Items        []Lane                 `json:"items"`
	NextCursor   *string                `json:"next_cursor"`
	OrderingMode lifecycle.OrderingMode `json:"ordering_mode"`
}

// MessageList is a page of messages, newest first. NextCursor continues
// the list; null on its last page.
type MessageList struct {
	Items      []Message `json:"items"`
	NextCursor *string   `json:"next_cursor"`
}

// HistoryEntry is one event of a message, read from the journal. The
// delivery fields are null for an event of the message itself.
type HistoryEntry struct {
	Position   int64                    `json:"position"`
	At         time.Time                `json:"at"`
	Kind       journal.Kind             `json:"kind"`
	Actor      string                   `json:"actor"`
	DeliveryID *uuid.UUID               `json:"delivery_id"`
	Target     *string                  `json:"target"`
	OldState   *lifecycle.DeliveryState `json:"old_state"`
	NewState   *lifecycle.DeliveryState `json:"new_state"`
	Text       string                   `json:"text"`
}

// History is a message's events in journal order.
type History struct {
	Items []HistoryEntry `json:"items"`
}

// ReceiptOutcome is what a receipt says.
type ReceiptOutcome string

// The receipt outcomes.
const (
	ReceiptPositive ReceiptOutcome = "positive"
	ReceiptNegative ReceiptOutcome = "negative"
)

// ReceiptRequest is the body of POST /deliveries/{id}/receipt.
type ReceiptRequest struct {
	Outcome ReceiptOutcome `json:"outcome"`
	// Text is the receiver's detail, kept in the history; at most
	// lifecycle.MaxReceiptTextLength bytes.
	Text string `json:"text"`
}

// ExternalReceiptRequest is the body of POST /receipts: a receipt that
// names its delivery by the receiver's own id for the message.
type ExternalReceiptRequest struct {
	// Target is the target whose receiver sends the receipt; an id is
	// unique per target.
	Target     string `json:"target"`
	ExternalID string `json:"external_id"`
	// Final false is an intermediate receipt, which settles nothing.
	// Default true.
	Final *bool `json:"final"`
	// Outcome is required of a final receipt.
	Outcome ReceiptOutcome `json:"outcome"`
	// Status and Code are the receiver's own, kept as they are.
	Status string `json:"status"`
	Code   string `json:"code"`
	// Text is the receiver's detail, kept in the history; at most
	// lifecycle.MaxReceiptTextLength bytes.
	Text string `json:"text"`
}

// ActionRequest is the body of the operator actions: none, or {}.
type ActionRequest struct{}

// RouteRequest is the body of POST /routes and PUT /routes/{id}.
type RouteRequest struct {
	Source string `json:"source"`
	From   string `json:"from"`
	To     string `json:"to"`
	Target string `json:"target"`
	// Types are the message types the route takes (*, exact, or a
	// prefix such as invoice.*); none takes any.
	Types []string `json:"types"`
	// Filter is a CEL expression over the message that must yield true
	// for the route to match (docs/routing.md).
	Filter string `json:"filter"`
}

// route is the route req describes, with id.
func (req RouteRequest) route(id uuid.UUID) lifecycle.Route {
	return lifecycle.Route{ID: id, Source: req.Source, From: req.From, To: req.To, Target: req.Target,
		Types: req.Types, Filter: req.Filter}
}

// RouteList is every route, oldest first.
type RouteList struct {
	Items []lifecycle.Route `json:"items"`
}

// TargetList is every target, by name.
type TargetList struct {
	Items []lifecycle.Target `json:"items"`
}

// Stats are the figures of GET /stats.
type Stats struct {
	// InFlightMessages are received, in progress, retrying or awaiting
	// their receipt, whenever they were created.
	InFlightMessages int64 `json:"in_flight_messages"`
	// FailedLast24h are the messages created in the last 24 hours that are
	// now in error or stalled.
	FailedLast24h int64 `json:"failed_last_24h"`
	// RefusedLast24h are the messages created in the last 24 hours that
	// were refused.
	RefusedLast24h int64 `json:"refused_last_24h"`
	// MessagesLast7d are the messages created in the last 7 days.
	MessagesLast7d int64 `json:"messages_last_7d"`
	// DeliveriesByState counts the deliveries in each state; every state
	// has an entry.
	DeliveriesByState map[lifecycle.DeliveryState]int64 `json:"deliveries_by_state"`
	// DueDeliveries are queued or retrying deliveries whose wake-up is due.
	DueDeliveries int64 `json:"due_deliveries"`
	// OldestDueSeconds is how long the most overdue of them has been due;
	// 0 when none is.
	OldestDueSeconds float64 `json:"oldest_due_seconds"`
	// Targets are the figures of each target that has had a delivery, by
	// name.
	Targets []TargetStats `json:"targets"`
}

// TargetStats are the figures of one target in GET /stats.
type TargetStats struct {
	Target string `json:"target"`
	// InFlight are its deliveries queued, blocked, delivering, retrying
	// or awaiting a receipt.
	InFlight int64 `json:"in_flight"`
	// FailedLast24h are its deliveries, of messages created in the last
	// 24 hours, that are now failed or stalled.
	FailedLast24h int64 `json:"failed_last_24h"`
	// OldestDueSeconds is how long its most overdue delivery due for a
	// wake-up has been due; 0 when none is.
	OldestDueSeconds float64 `json:"oldest_due_seconds"`
}

// JournalEvent is one event of the journal as GET /journal gives it, the
// form the retention archive keeps too.
type JournalEvent journal.Line

// JournalPage is a page of the journal in commit order. NextCursor is
// where the next read continues; it is never null, so an auditor keeps it
// and asks again for what committed since.
type JournalPage struct {
	Items      []JournalEvent `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// messageOf is the resource of a folded message.
func messageOf(m *projection.Message) Message {
	out := Message{ID: m.ID, Version: m.Version, Source: m.Source, From: m.From, To: m.To, Stage: m.Stage, Status: m.Status,
		Generation: m.Generation, Error: optional(m.Error), CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		PayloadSize: m.PayloadSize, PayloadSHA256: m.PayloadSHA256, PayloadExpunged: m.PayloadExpunged, OrderingKey: optional(m.OrderingKey),
		DuplicateKey: optional(m.DuplicateKey), Type: optional(m.Type), DeliverAt: optionalTime(m.ScheduledUntil()),
		Headers: m.Headers, Deliveries: make([]Delivery, 0, len(m.Deliveries))}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	if m.PossibleDuplicateOf != uuid.Nil {
		out.PossibleDuplicateOf = &m.PossibleDuplicateOf
	}
	for _, d := range m.NewestFirst() {
		out.Deliveries = append(out.Deliveries, deliveryOf(d))
	}
	if m.Trace.Parent != "" {
		out.Trace = &MessageTrace{Traceparent: m.Trace.Parent, Tracestate: optional(m.Trace.State)}
	}
	if cb := m.Callback; cb != nil {
		out.Callback = &MessageCallback{URL: cb.URL, Seq: cb.Seq, Attempts: cb.Attempts, LastError: optional(cb.LastError),
			FinishedAt: optionalTime(cb.FinishedAt)}
		if cb.State != "" {
			state := cb.State
			out.Callback.State = &state
		}
		if cb.State == lifecycle.StateQueued || cb.State == lifecycle.StateRetrying {
			out.Callback.NextAttemptAt = optionalTime(cb.NextDue)
		}
	}
	return out
}

// deliveryOf is the resource of one delivery.
func deliveryOf(d projection.Delivery) Delivery {
	var next *time.Time
	if d.State == lifecycle.StateQueued || d.State == lifecycle.StateRetrying || d.State == lifecycle.StateScheduled {
		next = optionalTime(d.NextDue)
	}
	out := Delivery{ID: d.ID, Generation: d.Generation, Target: d.Target, State: d.State,
		Attempts: d.Attempts, NextAttemptAt: next, LastError: optional(d.LastError),
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, FinishedAt: optionalTime(d.FinishedAt)}
	if d.LaneSeq > 0 {
		out.LaneSeq = &d.LaneSeq
	}
	return out
}

// seesRemoteWords reports whether the request's token may read what remote
// servers answered (status lines, body excerpts, in the errors): admin and
// reader tokens. The others are given a sender's or a receiver's reach,
// and a callback URL a sender chose must not make Waybill a way to read
// another server's answers.
func seesRemoteWords(r *http.Request) bool {
	role := identity(r).Role
	return role == auth.RoleAdmin || role == auth.RoleReader
}

// messageFor is the message resource as the request's token may see it:
// for a token that does not see remote words (seesRemoteWords), each
// error is only its code (errorCode).
func messageFor(r *http.Request, m *projection.Message) Message {
	out := messageOf(m)
	if seesRemoteWords(r) {
		return out
	}
	out.Error = errorCode(out.Error)
	for i := range out.Deliveries {
		out.Deliveries[i].LastError = errorCode(out.Deliveries[i].LastError)
	}
	if out.Callback != nil {
		out.Callback.LastError = errorCode(out.Callback.LastError)
	}
	return out
}

// deliveryFor is the delivery resource as the request's token may see it,
// as messageFor.
func deliveryFor(r *http.Request, d projection.Delivery) Delivery {
	out := deliveryOf(d)
	if !seesRemoteWords(r) {
		out.LastError = errorCode(out.LastError)
	}
	return out
}

// errorCode is lifecycle.ErrorCode of an error; null for none.
func errorCode(text *string) *string {
	if text == nil {
		return nil
	}
	code := lifecycle.ErrorCode(*text)
	return &code
}

// historyOf is the history entry of an event.
func historyOf(e journal.Event) HistoryEntry {
	j := journal.LineOf(e, nil)
	return HistoryEntry{Position: j.Position, At: j.At, Kind: j.Kind, Actor: j.Actor, DeliveryID: j.DeliveryID,
		Target: j.Target, OldState: j.OldState, NewState: j.NewState, Text: j.Text}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nonNil makes an empty list [] in JSON rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// OperationRequest is the body of POST /operations.
type OperationRequest struct {
	Action lifecycle.OperationAction `json:"action"`
	Filter lifecycle.OperationFilter `json:"filter"`
	// Reason is journaled with the operation and with each of its skips,
	// resends and replays.
	Reason string `json:"reason"`
	// DryRun decides each message the filter matches as the operation
	// would, and writes nothing.
	DryRun bool `json:"dry_run"`
}

// DryRun is the answer of POST /operations with dry_run: how many
// messages the operation would take, the first of them in the order it
// would take them, and how each would come out if it ran now (Done and
// Refused as the operation resource would count them).
type DryRun struct {
	Matched int         `json:"matched"`
	Sample  []uuid.UUID `json:"sample"`
	// Decided is how many of the matched messages, the first in the
	// operation's order, were decided: all of them unless the dry run's
	// time (commands.PreviewBudget) ran out; Done and Refused count those.
	Decided int `json:"decided"`
	Done    int `json:"done"`
	Refused int `json:"refused"`
	// Refusals counts the refusals by code, the most numerous first.
	Refusals []DryRunRefusals `json:"refusals"`
}

// DryRunRefusals counts the refusals of a dry run that share a code: the
// error code the action answers for such a message (NOT_REDELIVERABLE,
// NOT_RESENDABLE, ...), with the reason of the first of them, as the
// operation's refusals would record it.
type DryRunRefusals struct {
	Code    string `json:"code"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// Operation is the bulk operation resource.
type Operation struct {
	ID     uuid.UUID                 `json:"id"`
	Action lifecycle.OperationAction `json:"action"`
	Filter lifecycle.OperationFilter `json:"filter"`
	// Reason is null when none was given.
	Reason *string                  `json:"reason"`
	State  lifecycle.OperationState `json:"state"`
	// Matched is how many messages the filter matched when the operation
	// was created; Done how many it has acted on, Refused how many could
	// not take the action (GET /operations/{id}/refusals says why).
	Matched int `json:"matched"`
	Done    int `json:"done"`
	Refused int `json:"refused"`
	// CreatedBy is the name of the token that created it.
	CreatedBy string    `json:"created_by"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// FinishedAt is when it ended: done, cancelled or failed.
	FinishedAt *time.Time `json:"finished_at"`
	// Error is why a failed operation failed; null otherwise.
	Error *string `json:"error"`
	// Rate is the messages per second it has taken over its latest
	// batches, and EtaSeconds the time left at that rate; null when it
	// is not running or no rate is measured yet.
	Rate       *float64 `json:"rate"`
	EtaSeconds *int64   `json:"eta_seconds"`
}

// OperationList is a page of operations, newest first. NextCursor
// continues the list; null on its last page.
type OperationList struct {
	Items      []Operation `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

// CancelRequest is the body of POST /operations/{id}/cancel: none, {}, or
// a reason.
type CancelRequest struct {
	Reason string `json:"reason"`
}

// OperationRefusal is a message an operation could not act on, and why.
type OperationRefusal struct {
	MessageID uuid.UUID `json:"message_id"`
	Reason    string    `json:"reason"`
}

// RefusalList is a page of an operation's refusals, in the order it met
// them. NextCursor continues the list; null on its last page.
type RefusalList struct {
	Items      []OperationRefusal `json:"items"`
	NextCursor *string            `json:"next_cursor"`
}
