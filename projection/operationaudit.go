package projection

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// The audit of bulk operations. Each operation's stream folds through
// ApplyOperation; beside it the audit follows what the stream lists and
// which message events carry the operation, and checks, from the journal
// alone, that every message the operation counts done was acted on by it
// once, within the batch that counts it, and that no other was. A message
// retention removed is checked no more: its events left with it.

// opTrail is what the audit follows of one operation beside its fold.
type opTrail struct {
	// listed are the messages the operation.matched events listed, in
	// order; listedAt the position of the last of them.
	listed   []uuid.UUID
	inList   map[uuid.UUID]bool
	listedAt int64
	// batches are the positions of its operation.progressed events;
	// batchOf the index in batches of the event that counts a message done.
	batches []int64
	batchOf map[uuid.UUID]int
	// acted are the events that carry the operation, by message.
	acted map[uuid.UUID][]actedEvent
}

// actedEvent is a message event a bulk operation wrote.
type actedEvent struct {
	position int64
	delivery uuid.UUID
	kind     journal.Kind
}

func (f *Folded) trail(id uuid.UUID) *opTrail {
	t := f.trails[id]
	if t == nil {
		t = &opTrail{inList: map[uuid.UUID]bool{}, batchOf: map[uuid.UUID]int{}, acted: map[uuid.UUID][]actedEvent{}}
		f.trails[id] = t
	}
	return t
}

// foldOperation folds an event of an operation's stream.
func (f *Folded) foldOperation(id uuid.UUID, e journal.Event) {
	o := f.Operations[id]
	fresh := o == nil
	if fresh {
		o = &Operation{}
	}
	bad := func(problem string) {
		f.Violations = append(f.Violations, Violation{Position: e.Position, OperationID: id, Problem: problem})
	}
	if err := ApplyOperation(o, e); err != nil {
		bad(err.Error())
		return
	}
	if fresh {
		f.Operations[id] = o
		f.opsInOrder = append(f.opsInOrder, o)
	}
	if f.trails == nil {
		return
	}
	t := f.trail(id)
	switch p := e.Payload.(type) {
	case *journal.OperationCreated:
		t.listedAt = e.Position
	case *journal.OperationMatched:
		for _, m := range p.Messages {
			if t.inList[m] {
				bad(fmt.Sprintf("lists message %s twice", m))
			}
			t.inList[m] = true
		}
		t.listed, t.listedAt = append(t.listed, p.Messages...), e.Position
	case *journal.OperationProgressed:
		want := map[uuid.UUID]bool{}
		for _, m := range t.listed[p.From : p.From+p.Taken()] {
			want[m] = true
		}
		took := func(m uuid.UUID) {
			if !want[m] {
				bad(fmt.Sprintf("the batch of messages %d to %d takes message %s, which is not among them or is taken twice",
					p.From+1, p.From+p.Taken(), m))
			}
			delete(want, m)
		}
		for _, m := range p.Done {
			took(m)
			t.batchOf[m] = len(t.batches)
		}
		for _, r := range p.Refused {
			took(r.MessageID)
		}
		t.batches = append(t.batches, e.Position)
	}
}

// noteActed keeps a message event that carries the operation that wrote
// it, for the checks at the end of the journal.
func (f *Folded) noteActed(message uuid.UUID, e journal.Event) {
	id := journal.ActingOperation(e.Payload)
	if id == uuid.Nil || f.trails == nil {
		return
	}
	t := f.trail(id)
	t.acted[message] = append(t.acted[message], actedEvent{position: e.Position, delivery: e.DeliveryID, kind: e.Kind()})
}

// actionKind is the kind of event an operation's action writes.
func actionKind(a lifecycle.OperationAction) journal.Kind {
	switch a {
	case lifecycle.ActionRedeliver:
		return journal.KindDeliveryRedelivered
	case lifecycle.ActionSkip:
		return journal.KindDeliverySkipped
	}
	return journal.KindMessageResent
}

// finishOperations checks, at the end of the journal, every operation's
// acts against its count: each message it counts done carries it, in
// events of its action written between the operation's batch before and
// the batch that counts it (so in that batch's transaction: an operation's
// batches take turns on its row), on distinct deliveries, or in one
// message.resent; no other message carries it.
func (f *Folded) finishOperations() {
	ids := make([]uuid.UUID, 0, len(f.trails))
	for id := range f.trails {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		t := f.trails[id]
		o := f.Operations[id]
		var found []Violation
		bad := func(message uuid.UUID, problem string) {
			found = append(found, Violation{OperationID: id, MessageID: message, Problem: problem})
		}
		if o == nil {
			for m := range t.acted {
				bad(m, "an event of the message carries an operation the journal has no stream for")
			}
			f.Violations = append(f.Violations, sortViolations(found)...)
			continue
		}
		kind := actionKind(o.Action)
		for m, events := range t.acted {
			batch, done := t.batchOf[m]
			if !done {
				bad(m, "acted on by the operation, which does not count it done")
				continue
			}
			lo, hi := t.listedAt, t.batches[batch]
			if batch > 0 {
				lo = t.batches[batch-1]
			}
			deliveries := map[uuid.UUID]bool{}
			for _, e := range events {
				switch {
				case e.kind != kind:
					bad(m, fmt.Sprintf("position %d: a %s of an operation that does %s", e.position, e.kind, o.Action))
				case e.position <= lo || e.position >= hi:
					bad(m, fmt.Sprintf("position %d: acted on outside the batch that counts it done (positions %d to %d)", e.position, lo, hi))
				case deliveries[e.delivery]:
					// A message.resent has no delivery: a second one is
					// caught here too.
					bad(m, fmt.Sprintf("position %d: acted on twice by the operation", e.position))
				}
				deliveries[e.delivery] = true
			}
		}
		for m := range t.batchOf {
			switch {
			case len(t.acted[m]) > 0:
			case f.Messages[m] == nil && f.Removed.Batches > 0:
				// Retention removed the message, and the events that
				// carried the operation with it (docs/retention.md).
			default:
				bad(m, "counted done by the operation, but no event of the message carries it")
			}
		}
		f.Violations = append(f.Violations, sortViolations(found)...)
	}
}

func sortViolations(vs []Violation) []Violation {
	slices.SortStableFunc(vs, compareViolations)
	return vs
}

// checkOperations compares the operations table with the fold.
func checkOperations(ctx context.Context, q journal.Querier, f *Folded) (int, []Violation, error) {
	rows, err := q.Query(ctx, `SELECT `+operationColumns+` FROM operations o`)
	var stored []*Operation
	if err == nil {
		stored, err = scanOperations(rows)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("audit operations: %w", err)
	}
	var out []Violation
	seen := map[uuid.UUID]bool{}
	for _, got := range stored {
		seen[got.ID] = true
		want := f.Operations[got.ID]
		if want == nil {
			out = append(out, Violation{OperationID: got.ID, Problem: "in the operations table but not in the journal"})
			continue
		}
		for _, p := range diffOperations(got, want) {
			out = append(out, Violation{OperationID: got.ID, Problem: p})
		}
	}
	for _, o := range f.opsInOrder {
		if !seen[o.ID] {
			out = append(out, Violation{OperationID: o.ID, Problem: "in the journal but not in the operations table"})
		}
	}
	return len(stored), sortViolations(out), nil
}

// diffOperations lists the fields in which stored differs from folded,
// the filter's times by instant.
func diffOperations(stored, folded *Operation) []string {
	a, b := *stored, *folded
	out := diffFields(a, b, "Filter")
	fa, fb := a.Filter, b.Filter
	if !slices.Equal(fa.Status, fb.Status) || fa.Target != fb.Target || fa.Source != fb.Source ||
		!fa.CreatedAfter.Equal(fb.CreatedAfter) || !fa.CreatedBefore.Equal(fb.CreatedBefore) {
		out = append(out, fmt.Sprintf("Filter is %+v in the table, %+v by the journal", fa, fb))
	}
	return out
}

// copyOperations loads the fold's operations into the operations table,
// which tx created.
func copyOperations(ctx context.Context, tx pgx.Tx, ops []*Operation) error {
	if len(ops) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, o := range ops {
		QueueOperation(b, nil, o)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store operations: %w", err)
	}
	return nil
}
