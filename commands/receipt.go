package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// ErrCorrelationConsumed: a final receipt by the receiver's id came
// already; this one changed nothing.
var ErrCorrelationConsumed = errors.New("correlation consumed")

// ExternalReceipt is a receipt that names its delivery by the receiver's
// own id for the message, which the delivery's hand-over took from the
// receiver's answer (a target's receipt.correlate).
type ExternalReceipt struct {
	Target     string
	ExternalID string
	// Final false is an intermediate receipt ("accepted", "en route"): it
	// is journaled and settles nothing.
	Final bool
	// Positive is a final receipt's outcome: delivered, or failed.
	Positive bool
	// Status and Code are the receiver's own, kept as they are; Text is
	// its detail, at most lifecycle.MaxReceiptTextLength bytes.
	Status, Code, Text string
}

// Validate checks every field and returns all problems joined.
func (r ExternalReceipt) Validate() error {
	errs := []error{lifecycle.CheckName("target", r.Target), lifecycle.CheckExternalID("external_id", r.ExternalID),
		lifecycle.CheckReceiptText("text", r.Text)}
	for _, f := range []struct{ name, v string }{{"status", r.Status}, {"code", r.Code}} {
		if f.v != "" {
			errs = append(errs, lifecycle.CheckExternalID(f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// errCorrelationMoved: the id's correlation moved to another delivery
// between its read and its lock, or the delivery was handed over again in
// the receipt's own batch; the receipt is decided again.
var errCorrelationMoved = errors.New("correlation moved")

// ReceiptByExternalID applies a receipt that names its delivery by the
// receiver's id: an unknown id is ErrNotFound and a consumed one
// ErrCorrelationConsumed, both changing nothing. An intermediate receipt
// is journaled (delivery.receipt_intermediate) and settles nothing. A
// final one settles the delivery when it awaits its receipt, as Receipt
// does, or is journaled as refused (ErrReceiptRefused) when it does not;
// either way it consumes the correlation in the same transaction, whose
// row it locks, so of two final receipts at once one settles and the other
// finds the id consumed. It returns the message and the delivery's id.
func (w *Writer) ReceiptByExternalID(ctx context.Context, r ExternalReceipt, actor string) (*projection.Message, uuid.UUID, error) {
	if err := errors.Join(r.Validate(), journal.CheckActor(actor)); err != nil {
		return nil, uuid.Nil, invalid(err)
	}
	start := time.Now()
	for try := 1; ; try++ {
		m, id, err := w.receiptByExternalID(ctx, r, actor)
		if errors.Is(err, errCorrelationMoved) && try < maxTries {
			continue
		}
		w.traceReceipt(ctx, start, m, id, actor, r.Positive, r.Final, err)
		if err != nil && !errors.Is(err, ErrReceiptRefused) {
			return nil, uuid.Nil, fmt.Errorf("receipt by id %q of %s: %w", r.ExternalID, r.Target, err)
		}
		return m, id, err
	}
}

// receiptByExternalID reads the id's correlation, then runs the receipt on
// its delivery as a command whose batch locks the message's row and then
// the correlation's, in that order, as every writer locks them, and
// decides on what it read under the locks, as the commands decided before
// it in the same batch left it (a hand-over that took the id, a receipt
// that consumed it): a correlation that moved to another delivery
// meanwhile is read again, one consumed meanwhile is
// ErrCorrelationConsumed.
func (w *Writer) receiptByExternalID(ctx context.Context, r ExternalReceipt, actor string) (*projection.Message, uuid.UUID, error) {
	key := projection.CorrelationKey{Target: r.Target, ExternalID: r.ExternalID}
	seen, err := projection.LoadCorrelation(ctx, w.db, key)
	if err != nil {
		return nil, uuid.Nil, err
	}
	if seen.Consumed {
		return nil, uuid.Nil, ErrCorrelationConsumed
	}
	corr := &correlated{key: key}
	// A negative receipt reads the delivery's last hand-over, in the
	// transaction that holds its message, to know whether the id came from
	// an earlier one.
	superseding := r.Final && !r.Positive
	var last journal.HandOver
	read := func(b *pgx.Batch) {
		corr.read = projection.Correlation{}
		projection.QueueCorrelation(b, key, &corr.read)
		if superseding {
			last = journal.HandOver{}
			journal.QueueLastHandOver(b, seen.MessageID, seen.DeliveryID, &last)
		}
	}
	decide := func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		switch {
		case corr.now.DeliveryID != seen.DeliveryID:
			return nil, errCorrelationMoved
		case corr.now.Consumed:
			return nil, ErrCorrelationConsumed
		}
		c := newChange(m)
		receipt := journal.Receipt{Detail: r.Text, ExternalID: r.ExternalID, Status: r.Status, Code: r.Code}
		e := journal.Event{RecordedAt: now, DeliveryID: seen.DeliveryID, Actor: actor}
		if !r.Final {
			e.Payload = &journal.ReceiptIntermediate{Receipt: receipt}
			return c, c.record(e)
		}
		d := c.after.Delivery(seen.DeliveryID)
		if superseding && d.State == lifecycle.StateAwaitingAck && d.Attempts != last.Attempt {
			// The hand-over the delivery awaits is an earlier command's
			// of this batch, not in the journal yet: decide again once
			// it is.
			return nil, errCorrelationMoved
		}
		if superseding && supersedes(last, d, r.ExternalID) {
			as := "without an id"
			if last.ExternalID != "" {
				as = fmt.Sprintf("as %q", last.ExternalID)
			}
			reason := fmt.Sprintf("the delivery was handed over again, %s, after the hand-over that gave %q, and awaits that receipt", as, r.ExternalID)
			e.Payload = &journal.ReceiptRefused{Receipt: receipt, Reason: reason, SupersededBy: last.Version}
			if err := c.record(e); err != nil {
				return nil, err
			}
			c.result = &StateError{Err: ErrReceiptRefused, State: string(lifecycle.StateAwaitingAck), Reason: reason}
			return c, nil
		}
		e.Payload = &journal.ReceiptReceived{Positive: r.Positive, Receipt: receipt}
		err := c.record(e)
		var ill *projection.IllegalError
		if !errors.As(err, &ill) {
			return c, err
		}
		e.Payload = &journal.ReceiptRefused{Positive: r.Positive, Receipt: receipt, Reason: ill.Reason}
		if err := c.record(e); err != nil {
			return nil, err
		}
		c.result = &StateError{Err: ErrReceiptRefused, State: ill.State, Allowed: ill.Allowed, Reason: ill.Reason}
		return c, nil
	}
	m, err := w.runOp(&op{ctx: ctx, on: delivery(seen.DeliveryID), read: read, correlation: corr, decide: decide})
	if err != nil && !errors.Is(err, ErrReceiptRefused) {
		return nil, uuid.Nil, err
	}
	return m, seen.DeliveryID, err
}

// supersedes reports whether last, the last hand-over of d the journal
// holds and the one d awaits the receipt of, came after the hand-over that
// gave id: it was made under another id, or none.
func supersedes(last journal.HandOver, d *projection.Delivery, id string) bool {
	return last.Version > 0 && d.State == lifecycle.StateAwaitingAck && last.ExternalID != id
}
