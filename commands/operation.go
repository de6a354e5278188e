package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// Bulk operations. An operation's stream holds its creation, the messages
// its filter matched at that moment (operation.matched), each batch it
// takes (operation.progressed) and its end. A batch is one transaction
// that locks the operation's row, acts on each of its messages (each
// message event carrying the operation's id) and records the batch's
// progress: the actions and the progress commit together or not at all,
// and two batches of one operation take turns on its row, each checking
// that the operation is at the version it was read at. So a message is
// never acted on twice by one operation, whoever runs it and whatever
// stops in between.

// OperationSpec is what an operator asks of a bulk operation.
type OperationSpec struct {
	Action lifecycle.OperationAction
	Filter lifecycle.OperationFilter
	Reason string
}

// CheckOperation checks every field of spec, returning every problem
// (ErrInvalid), and returns it with its times as the journal keeps them.
func CheckOperation(spec OperationSpec) (OperationSpec, error) {
	var errs []error
	if _, err := lifecycle.ParseOperationAction(string(spec.Action)); err != nil {
		errs = append(errs, &lifecycle.FieldError{Field: "action", Problem: err.Error()})
	}
	var err error
	spec.Reason, err = checkReason(spec.Reason)
	errs = append(errs, err, spec.Filter.Validate())
	spec.Filter.CreatedAfter = journal.StoredTime(spec.Filter.CreatedAfter)
	spec.Filter.CreatedBefore = journal.StoredTime(spec.Filter.CreatedBefore)
	return spec, invalid(errors.Join(errs...))
}

// checkReason returns an operation's reason as the journal keeps it
// (journal.StoredText: a NUL or an invalid byte takes three), refused
// past lifecycle.MaxReasonLength in that form, which the journal checks.
func checkReason(reason string) (string, error) {
	stored := journal.StoredText(reason)
	if len(stored) > lifecycle.MaxReasonLength {
		return stored, &lifecycle.FieldError{Field: "reason", Problem: fmt.Sprintf("must be at most %d bytes, got %d as stored (a NUL or a byte that is not UTF-8 takes 3)",
			lifecycle.MaxReasonLength, len(stored))}
	}
	return stored, nil
}

// CreateOperation starts a bulk operation: in one transaction it reads the
// ids of the messages the filter matches (one statement, so one
// snapshot), oldest first but each ordering key's in its lanes' order
// (projection.InLaneOrder), and journals the operation's creation with
// those ids; messages that arrive later are not among them. A filter that
// matches more than lifecycle.MaxOperationMessages is ErrInvalid.
func (w *Writer) CreateOperation(ctx context.Context, spec OperationSpec, operator string) (*projection.Operation, error) {
	spec, err := CheckOperation(spec)
	if err == nil {
		err = Action{Operator: operator}.check()
	}
	if err != nil {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	id := uuid.Must(uuid.NewV7())
	actor := journal.OperatorActor(operator)
	var o *projection.Operation
	err = pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		ids, err := projection.MatchMessages(ctx, tx, spec.Filter, lifecycle.MaxOperationMessages+1)
		if err != nil {
			return err
		}
		if len(ids) > lifecycle.MaxOperationMessages {
			return tooManyMessages()
		}
		if ids, err = projection.InLaneOrder(ctx, tx, ids); err != nil {
			return err
		}
		now := w.now()
		o = &projection.Operation{}
		var events []journal.Event
		record := func(p journal.Payload) error {
			e, err := projection.RecordOperation(o, journal.Event{RecordedAt: now, Stream: journal.OperationStream(id),
				Actor: actor, Payload: p})
			events = append(events, e)
			return err
		}
		if err := record(&journal.OperationCreated{Action: spec.Action, Filter: spec.Filter, Reason: spec.Reason,
			Matched: len(ids)}); err != nil {
			return err
		}
		for i := 0; i < len(ids); i += projection.OperationChunk {
			if err := record(&journal.OperationMatched{Messages: ids[i:min(i+projection.OperationChunk, len(ids))]}); err != nil {
				return err
			}
		}
		b := &pgx.Batch{}
		projection.QueueOperation(b, nil, o)
		if err := journal.Queue(b, events...); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	return o, nil
}

// CancelOperation cancels a running operation: it takes no batch after
// this one commits (one in flight finishes first, the two take turns on
// the operation's row). An operation that has ended is ErrNotCancellable.
func (w *Writer) CancelOperation(ctx context.Context, id uuid.UUID, operator, reason string) (*projection.Operation, error) {
	if err := (Action{Operator: operator}).check(); err != nil {
		return nil, fmt.Errorf("cancel operation %s: %w", id, err)
	}
	reason, err := checkReason(reason)
	if err != nil {
		return nil, fmt.Errorf("cancel operation %s: %w", id, invalid(err))
	}
	o, err := w.changeOperation(ctx, id, func(*projection.Operation) (journal.Event, error) {
		return journal.Event{Actor: journal.OperatorActor(operator), Payload: &journal.OperationCancelled{Reason: reason}}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel operation %s: %w", id, refused(ErrNotCancellable, err))
	}
	return o, nil
}

// FinishOperation ends o, as it was read: done when failure is empty (it
// must have taken every message it matched), else failed with failure as
// the reason. ErrOperationMoved when o has moved since.
func (w *Writer) FinishOperation(ctx context.Context, o *projection.Operation, failure string) (*projection.Operation, error) {
	after, err := w.changeOperation(ctx, o.ID, func(cur *projection.Operation) (journal.Event, error) {
		if cur.Version != o.Version {
			return journal.Event{}, ErrOperationMoved
		}
		p := &journal.OperationFinished{State: lifecycle.OperationDone}
		if failure != "" {
			p.State, p.Error = lifecycle.OperationFailed, failure
		}
		return journal.Event{Actor: journal.ActorSystem, Payload: p}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish operation %s: %w", o.ID, err)
	}
	return after, nil
}

// changeOperation records the event decide makes on the operation as it
// is with its row locked, and writes the row, in one transaction.
func (w *Writer) changeOperation(ctx context.Context, id uuid.UUID,
	decide func(*projection.Operation) (journal.Event, error)) (*projection.Operation, error) {
	var after *projection.Operation
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		read := projection.QueueLoadOperationLocked(b, id)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		cur := read()
		if cur == nil {
			return ErrNotFound
		}
		e, err := decide(cur)
		if err != nil {
			return err
		}
		next := *cur
		e.RecordedAt = w.now()
		if e, err = projection.RecordOperation(&next, e); err != nil {
			return err
		}
		b = &pgx.Batch{}
		projection.QueueOperation(b, cur, &next)
		if err := journal.Queue(b, e); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		after = &next
		return nil
	})
	return after, err
}

// Operate takes one batch of a running operation, o as it was read: ids
// are the messages of its list from o.Next() on, as its stream lists them
// (projection.LoadMatched). In one transaction it locks the operation's
// row (ErrOperationMoved when it is no longer at o's version), acts on
// each message as the operation's action says, journaled under the
// operator who started it and carrying the operation's id, and records the
// batch (operation.progressed): the messages acted on as done, each one
// that could not take the action as refused with the reason. It returns
// the operation as the batch left it. When the messages of one batch move
// one lane too far for one transaction, it takes the first message alone.
func (w *Writer) Operate(ctx context.Context, o *projection.Operation, ids []uuid.UUID) (*projection.Operation, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("operation %s: %w", o.ID, invalid(errors.New("a batch takes at least one message")))
	}
	start := time.Now()
	operator := journal.OperatorName(o.CreatedBy)
	side := &operationSide{want: o}
	ops, err := w.bulkBatch(ctx, o.Action, o.Filter.Target, Action{Operator: operator, Reason: o.Reason, Operation: o.ID}, ids, side)
	if errors.Is(err, errLaneSplit) && len(ids) > 1 {
		return w.Operate(ctx, o, ids[:1])
	}
	if err != nil {
		return nil, fmt.Errorf("operation %s: batch from message %d: %w", o.ID, o.Next(), err)
	}
	for _, p := range ops {
		if p.c != nil {
			w.committed(p.c)
		}
	}
	w.traceOperation(ctx, start, o, ops)
	return side.after, nil
}

// bulkBatch decides the messages ids as one batch of a bulk operation
// doing action (to target, when it is given) as a, in one transaction with
// side, and returns its ops: each with its change, or the error that
// refused it.
func (w *Writer) bulkBatch(ctx context.Context, action lifecycle.OperationAction, target string, a Action,
	ids []uuid.UUID, side *operationSide) ([]*op, error) {
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, err
	}
	var payloads map[uuid.UUID][]byte
	if action == lifecycle.ActionReplay || action == lifecycle.ActionResend {
		if payloads, err = w.routingPayloads(ctx, cfg, ids...); err != nil {
			return nil, err
		}
	}
	decide := bulkDecision(cfg, payloads, action, target, a)
	ops := make([]*op, len(ids))
	for i, id := range ids {
		ops[i] = &op{ctx: ctx, on: message(id), decide: decide, key: id}
	}
	return ops, w.retry(ctx, ops, side)
}

// operationSide is the part of a batch that belongs to its bulk
// operation: the read of the operation's row, locked, before the messages,
// and its progress, recorded once the batch's messages are decided. A side
// without an operation (want nil) is a preview's: its batch decides and
// writes nothing.
type operationSide struct {
	want  *projection.Operation
	read  func() *projection.Operation
	after *projection.Operation
}

func (s *operationSide) queueRead(b *pgx.Batch) {
	if s.want != nil {
		s.read = projection.QueueLoadOperationLocked(b, s.want.ID)
	}
}

// decide records the batch's progress on the operation as read: every op
// without an error done, every other refused with its error as the
// reason. It fails the batch when the operation is gone or has moved, or
// when an op's context ended.
func (s *operationSide) decide(ops []*op, d *decided, now time.Time) error {
	for _, o := range ops {
		if err := o.ctx.Err(); err != nil {
			return err
		}
	}
	if s.want == nil {
		return nil
	}
	cur := s.read()
	switch {
	case cur == nil:
		return fmt.Errorf("operation %s: %w", s.want.ID, ErrNotFound)
	case cur.Version != s.want.Version:
		return fmt.Errorf("%w: operation %s is at version %d, not %d", ErrOperationMoved, cur.ID, cur.Version, s.want.Version)
	}
	p := &journal.OperationProgressed{From: cur.Next(), Done: []uuid.UUID{}, Refused: []journal.OperationRefusal{}}
	for _, o := range ops {
		if o.err == nil {
			p.Done = append(p.Done, o.on.messageID)
		} else {
			p.Refused = append(p.Refused, journal.OperationRefusal{MessageID: o.on.messageID, Reason: refusalReason(o.err)})
		}
	}
	next := *cur
	e, err := projection.RecordOperation(&next, journal.Event{RecordedAt: now, Actor: journal.ActorSystem, Payload: p})
	if err != nil {
		return fmt.Errorf("operation %s: %w", cur.ID, err)
	}
	d.events = append(d.events, e)
	d.operation = func(b *pgx.Batch) { projection.QueueOperation(b, cur, &next) }
	s.after = &next
	return nil
}

// refusalReason is why a bulk operation could not act on a message, as it
// records the refusal: err, the error the message's action met.
func refusalReason(err error) string {
	if errors.Is(err, ErrNotFound) {
		// Listed when the operation was created, the message has left
		// since: retention removes settled messages.
		return "the message is gone: retention removed it after the operation listed it"
	}
	return err.Error()
}

// refusalClass is what a refusal is counted under in a preview: the
// sentinel of err, the error the message's action met.
func refusalClass(err error) error {
	var se *StateError
	if errors.As(err, &se) {
		return se.Err
	}
	for _, sentinel := range []error{ErrNotFound, ErrStale, ErrPayloadExpunged, ErrInvalid} {
		if errors.Is(err, sentinel) {
			return sentinel
		}
	}
	return err
}

// previewPage is how many messages a preview decides in one transaction:
// as many as a batch of the runner takes at most.
const previewPage = 100

// PreviewBudget is the time a preview decides messages for: a dry run
// answers within one HTTP request's time (30 s) however many messages its
// filter matches. The messages past it are counted, a page of
// previewCountPage at a time, not decided.
const PreviewBudget = 10 * time.Second

// previewCountPage is how many matched messages one read counts once the
// budget is spent.
const previewCountPage = 10_000

// Preview is what a bulk operation would do if it ran now.
type Preview struct {
	// Matched counts the messages the filter chooses, Sample the first of
	// them in the order the operation would take them.
	Matched int
	Sample  []uuid.UUID
	// Decided counts the messages decided, the first of those matched in
	// the operation's order: all of them unless PreviewBudget ran out.
	Decided int
	// Done counts those the action would be taken on; Refused those that
	// could not take it, by class, the most numerous first: of the
	// messages decided.
	Done    int
	Refused []RefusalClass
}

// RefusalClass counts the refusals of one kind.
type RefusalClass struct {
	// Err is the first of them met, in the order the operation would take
	// its messages; its sentinel (ErrNotRedeliverable, ErrNotResendable,
	// ...) is the class.
	Err error
	// Reason is Err as the operation would record it.
	Reason string
	Count  int
}

// PreviewOperation says what the bulk operation spec would do if operator
// started it now, and changes nothing: it decides each message the filter
// chooses exactly as the run does (Operate), in pages of previewPage
// messages, oldest first, each page one transaction that locks and reads
// what a batch of the run would and then rolls back; sample bounds
// Preview.Sample. A filter that matches more than
// lifecycle.MaxOperationMessages is ErrInvalid, as CreateOperation has it.
// The pages are read one after another, so a message that changes
// meanwhile is seen as it is when its page is read. Once PreviewBudget has
// passed, the messages left are counted, not decided.
func (w *Writer) PreviewOperation(ctx context.Context, spec OperationSpec, operator string, sample int) (*Preview, error) {
	spec, err := CheckOperation(spec)
	if err == nil {
		err = Action{Operator: operator}.check()
	}
	if err != nil {
		return nil, fmt.Errorf("preview operation: %w", err)
	}
	a := Action{Operator: operator, Reason: spec.Reason}
	pv := &Preview{}
	class := map[string]int{} // by the class's text: an error's type need not be comparable
	var at projection.MatchAt
	start := w.now()
	for {
		deciding := w.now().Sub(start) < PreviewBudget
		page := previewPage
		if !deciding {
			page = previewCountPage
		}
		ids, last, err := projection.MatchPage(ctx, w.db, spec.Filter, at, page)
		if err != nil {
			return nil, fmt.Errorf("preview operation: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		at = last
		if pv.Matched += len(ids); pv.Matched > lifecycle.MaxOperationMessages {
			return nil, fmt.Errorf("preview operation: %w", tooManyMessages())
		}
		pv.Sample = append(pv.Sample, ids[:min(len(ids), sample-len(pv.Sample))]...)
		for from := 0; deciding && from < len(ids); {
			ops, err := w.bulkBatch(ctx, spec.Action, spec.Filter.Target, a, ids[from:], &operationSide{})
			if errors.Is(err, errLaneSplit) && len(ids)-from > 1 {
				// As Operate, which then takes the first message alone.
				ops, err = w.bulkBatch(ctx, spec.Action, spec.Filter.Target, a, ids[from:from+1], &operationSide{})
			}
			if err != nil {
				return nil, fmt.Errorf("preview operation: from message %d: %w", pv.Matched-len(ids)+from, err)
			}
			from += len(ops)
			pv.Decided += len(ops)
			for _, o := range ops {
				if o.err == nil {
					pv.Done++
					continue
				}
				k := refusalClass(o.err).Error()
				i, ok := class[k]
				if !ok {
					i = len(pv.Refused)
					class[k] = i
					pv.Refused = append(pv.Refused, RefusalClass{Err: o.err, Reason: refusalReason(o.err)})
				}
				pv.Refused[i].Count++
			}
		}
		if len(ids) < page {
			break
		}
	}
	slices.SortStableFunc(pv.Refused, func(x, y RefusalClass) int { return y.Count - x.Count })
	return pv, nil
}

// tooManyMessages refuses a filter that matches more messages than one
// operation takes.
func tooManyMessages() error {
	return invalid(&lifecycle.FieldError{Field: "filter", Problem: fmt.Sprintf(
		"matches more than %d messages, the most one operation takes: narrow it (created_after, created_before)",
		lifecycle.MaxOperationMessages)})
}

// bulkDecision is what an operation's action does to one message:
//
//   - redeliver queues again the current generation's deliveries that
//     failed or stalled (those to target, when it is given);
//   - skip settles those of the current generation the skip rule admits
//     (to target, when it is given);
//   - resend and replay send the message again as a new generation, as
//     Resend and Replay do, whatever target.
//
// A message with nothing the action may take is refused with the reason.
func bulkDecision(cfg *configState, payloads map[uuid.UUID][]byte, action lifecycle.OperationAction, target string, a Action) decision {
	switch action {
	case lifecycle.ActionResend:
		return resendDecision(cfg, payloads, a, func(m *projection.Message, _ *configState, _ []byte) (routing.Decision, error) {
			targets, err := resendTargets(m, nil)
			return routing.Decision{Targets: targets}, err
		}, false)
	case lifecycle.ActionReplay:
		return resendDecision(cfg, payloads, a, routed, true)
	case lifecycle.ActionRedeliver:
		return eachDelivery(target, ErrNotRedeliverable, "failed or stalled",
			func(d *projection.Delivery) bool {
				return d.State == lifecycle.StateFailed || d.State == lifecycle.StateStalled
			},
			func(c *change, lanes *projection.LaneBook, d uuid.UUID, now time.Time) error {
				return redeliverOn(c, lanes, d, now, a)
			})
	}
	return eachDelivery(target, ErrNotSkippable, "waiting or failed",
		func(d *projection.Delivery) bool { return lifecycle.SkipRule.Admits(d.State) },
		func(c *change, _ *projection.LaneBook, d uuid.UUID, now time.Time) error { return skipOn(c, d, now, a) })
}

// eachDelivery acts on every delivery of the message's current generation
// that takes admits (to target, when it is given), in their order, in one
// change; with none, the message is refused with sentinel.
func eachDelivery(target string, sentinel error, what string, takes func(*projection.Delivery) bool,
	act func(*change, *projection.LaneBook, uuid.UUID, time.Time) error) decision {
	return func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		c := newChange(m)
		var found []string
		for i := range m.Deliveries {
			d := &m.Deliveries[i]
			if !m.Current(d) || target != "" && d.Target != target {
				continue
			}
			found = append(found, d.Target+" "+string(d.State))
			if !takes(d) {
				continue
			}
			if err := act(c, lanes, d.ID, now); err != nil {
				return c, refusedToSend(sentinel, err)
			}
		}
		if len(c.events) > 0 {
			return c, nil
		}
		of := fmt.Sprintf("generation %d", m.Generation)
		if target != "" {
			of += " to " + target
		}
		has := "it has none"
		if len(found) > 0 {
			has = "its deliveries: " + strings.Join(found, ", ")
		}
		return nil, &StateError{Err: sentinel, Reason: fmt.Sprintf("no delivery of %s is %s (%s)", of, what, has)}
	}
}
