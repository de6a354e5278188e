package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// The events of a bulk operation's stream (OperationStream): its creation
// with the messages it matched, its progress, and its end.

// OperationCreated: an operator started a bulk operation. The messages the
// filter matched, in one snapshot, are listed by the operation.matched
// events that follow in the same transaction.
type OperationCreated struct {
	Action lifecycle.OperationAction `json:"action"`
	Filter lifecycle.OperationFilter `json:"filter"`
	Reason string                    `json:"reason,omitempty"`
	// Matched is how many messages the filter matched.
	Matched int `json:"matched"`
}

func (*OperationCreated) Kind() Kind { return KindOperationCreated }
func (p *OperationCreated) Text() string {
	return withDetail(fmt.Sprintf("%s of %s started", p.Action, lifecycle.Count(p.Matched, "message", "messages")), p.Reason)
}
func (p *OperationCreated) Validate() error {
	var errs []error
	if _, err := lifecycle.ParseOperationAction(string(p.Action)); err != nil {
		errs = append(errs, field("action", err.Error()))
	}
	if p.Matched < 0 || p.Matched > lifecycle.MaxOperationMessages {
		errs = append(errs, field("matched", fmt.Sprintf("must be from 0 to %d, got %d", lifecycle.MaxOperationMessages, p.Matched)))
	}
	if len(p.Reason) > lifecycle.MaxReasonLength {
		errs = append(errs, field("reason", fmt.Sprintf("must be at most %d bytes", lifecycle.MaxReasonLength)))
	}
	return errors.Join(append(errs, p.Filter.Validate())...)
}

// OperationMatched lists, in order, the next of the messages an operation
// matched (oldest first, by created_at and id); the operation takes them
// in that order.
type OperationMatched struct {
	Messages []uuid.UUID `json:"messages"`
}

func (*OperationMatched) Kind() Kind { return KindOperationMatched }
func (p *OperationMatched) Text() string {
	return lifecycle.Count(len(p.Messages), "message", "messages") + " listed"
}
func (p *OperationMatched) Validate() error {
	if len(p.Messages) == 0 {
		return field("messages", "must list at least one message")
	}
	for i, id := range p.Messages {
		if id == uuid.Nil {
			return field(fmt.Sprintf("messages[%d]", i), "is required")
		}
	}
	return nil
}

// OperationRefusal is a message an operation could not act on, and why.
type OperationRefusal struct {
	MessageID uuid.UUID `json:"message_id"`
	Reason    string    `json:"reason"`
}

// OperationProgressed: a batch of an operation's messages was taken, in the
// same transaction as the actions on those it lists done. The batch is the
// messages of the list from From on, each either done or refused.
type OperationProgressed struct {
	From    int                `json:"from"`
	Done    []uuid.UUID        `json:"done"`
	Refused []OperationRefusal `json:"refused"`
}

func (*OperationProgressed) Kind() Kind { return KindOperationProgressed }
func (p *OperationProgressed) Text() string {
	return fmt.Sprintf("messages %d to %d taken: %d done, %d refused", p.From+1, p.From+p.Taken(), len(p.Done), len(p.Refused))
}

// Taken is how many messages the batch took.
func (p *OperationProgressed) Taken() int { return len(p.Done) + len(p.Refused) }

func (p *OperationProgressed) Validate() error {
	var errs []error
	if p.From < 0 {
		errs = append(errs, field("from", fmt.Sprintf("must not be negative, got %d", p.From)))
	}
	if p.Taken() == 0 {
		errs = append(errs, field("done", "a batch takes at least one message, done or refused"))
	}
	for i, id := range p.Done {
		errs = append(errs, required(fmt.Sprintf("done[%d]", i), id != uuid.Nil))
	}
	for i, r := range p.Refused {
		errs = append(errs, required(fmt.Sprintf("refused[%d].message_id", i), r.MessageID != uuid.Nil),
			required(fmt.Sprintf("refused[%d].reason", i), r.Reason != ""))
	}
	return errors.Join(errs...)
}

// OperationCancelled: an operator cancelled a running operation; it takes
// no further batch.
type OperationCancelled struct {
	Reason string `json:"reason,omitempty"`
}

func (*OperationCancelled) Kind() Kind        { return KindOperationCancelled }
func (p *OperationCancelled) Text() string    { return withDetail("cancelled", p.Reason) }
func (p *OperationCancelled) Validate() error { return nil }

// OperationFinished: an operation ended, done once it had taken every
// message it matched, or failed on what it cannot go on from.
type OperationFinished struct {
	State lifecycle.OperationState `json:"state"`
	// Error says why it failed; only for failed.
	Error string `json:"error,omitempty"`
}

func (*OperationFinished) Kind() Kind     { return KindOperationFinished }
func (p *OperationFinished) Text() string { return withDetail(string(p.State), p.Error) }
func (p *OperationFinished) Validate() error {
	switch {
	case p.State == lifecycle.OperationDone && p.Error != "":
		return field("error", "only a failed operation has an error")
	case p.State == lifecycle.OperationDone:
		return nil
	case p.State == lifecycle.OperationFailed && p.Error == "":
		return field("error", "is required for a failed operation")
	case p.State == lifecycle.OperationFailed:
		return nil
	}
	return field("state", fmt.Sprintf("%q: allowed are done, failed", p.State))
}

// ActingOperation is the bulk operation a message event was written by;
// uuid.Nil for any other event.
func ActingOperation(p Payload) uuid.UUID {
	switch p := p.(type) {
	case *MessageRedispatched:
		return p.Operation
	case *MessageResent:
		return p.Operation
	case *DeliveryRedelivered:
		return p.Operation
	case *DeliverySkipped:
		return p.Operation
	}
	return uuid.Nil
}

// ReadMatched returns the messages the OperationMatched events of
// operation op list at versions from through to of its stream, in order.
func ReadMatched(ctx context.Context, q Querier, op uuid.UUID, from, to int) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, `SELECT version, payload FROM journal WHERE stream = $1 AND version BETWEEN $2 AND $3
		ORDER BY version`, OperationStream(op), from, to)
	if err != nil {
		return nil, fmt.Errorf("read the matched of operation %s: %w", op, err)
	}
	var (
		version int
		payload []byte
		ids     []uuid.UUID
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &payload}, func() error {
		p, err := Decode(KindOperationMatched, payload)
		if err != nil {
			return fmt.Errorf("version %d: %w", version, err)
		}
		ids = append(ids, p.(*OperationMatched).Messages...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the matched of operation %s: %w", op, err)
	}
	return ids, nil
}

// ReadRefusals calls fn with up to limit refusals of operation op, in the
// order the operation met them, after the place (version, n): the version
// of an OperationProgressed event and the index, from 1, of a refusal in
// it ((0, 0) for the first). It reads them out of the events' payloads in
// the database, so that a long list costs the page it returns.
func ReadRefusals(ctx context.Context, q Querier, op uuid.UUID, version, n, limit int,
	fn func(version, n int, r OperationRefusal)) error {
	rows, err := q.Query(ctx, `SELECT j.version, x.n, (x.r->>'message_id')::uuid, x.r->>'reason'
		FROM journal j CROSS JOIN LATERAL json_array_elements(j.payload::json->'refused') WITH ORDINALITY AS x(r, n)
		WHERE j.stream = $1 AND j.kind = $2 AND j.version >= $3 AND (j.version > $3 OR x.n > $4)
		ORDER BY j.version, x.n LIMIT $5`,
		OperationStream(op), KindOperationProgressed, version, n, limit)
	if err == nil {
		var r OperationRefusal
		_, err = pgx.ForEachRow(rows, []any{&version, &n, &r.MessageID, &r.Reason}, func() error {
			fn(version, n, r)
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("read the refusals of operation %s: %w", op, err)
	}
	return nil
}
