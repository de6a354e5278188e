package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// Claim is a worker's hold on one attempt at a delivery.
type Claim struct {
	Token    uuid.UUID
	Attempt  int
	LeaseEnd time.Time
	// Message is the state after the claim; Delivery is the claimed one.
	Message  *projection.Message
	Delivery projection.Delivery
}

// Claim takes a delivery for one attempt, by compare-and-swap on its state
// and due time: a queued or stalled delivery, a retrying one that is due or
// was woken, or a delivering one whose lease has run out (the expiry is
// journaled first). The claim counts the attempt, resets the wake-ups and
// holds the delivery until now + lease. ErrNotClaimable otherwise.
func (w *Writer) Claim(ctx context.Context, deliveryID uuid.UUID, lease time.Duration) (Claim, error) {
	if lease <= 0 {
		return Claim{}, invalid(&lifecycle.FieldError{Field: "lease", Problem: "must be positive"})
	}
	var claim Claim
	m, err := w.run(ctx, w.loadDelivery(ctx, deliveryID), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		d := c.after.Delivery(deliveryID)
		actor := journal.WorkerActor(d.Target)
		if d.State == lifecycle.StateDelivering && !now.Before(d.LeaseEnd) {
			err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
				Payload: &journal.DeliveryLeaseExpired{Token: d.ClaimToken, LeaseEnd: d.LeaseEnd}})
			if err != nil {
				return nil, err
			}
		}
		claim = Claim{Token: uuid.New(), Attempt: d.Attempts + 1, LeaseEnd: now.Add(lease)}
		err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
			Payload: &journal.DeliveryClaimed{Token: claim.Token, Attempt: claim.Attempt, LeaseEnd: claim.LeaseEnd}})
		return c, refused(ErrNotClaimable, err)
	})
	if err != nil {
		return Claim{}, fmt.Errorf("claim delivery %s: %w", deliveryID, err)
	}
	claim.Message, claim.Delivery = m, *m.Delivery(deliveryID)
	return claim, nil
}

// Complete records the outcome of a claimed attempt. It is conditional on the
// claim: a token that is no longer the delivery's gets ErrClaimLost and
// changes nothing.
func (w *Writer) Complete(ctx context.Context, deliveryID, token uuid.UUID, outcome lifecycle.Outcome) (*projection.Message, error) {
	if err := outcome.Validate(); err != nil {
		return nil, invalid(err)
	}
	if outcome.Kind == lifecycle.OutcomeAwaitingAck && !outcome.Deadline.After(w.now()) {
		return nil, invalid(&lifecycle.FieldError{Field: "outcome.deadline", Problem: "must be in the future"})
	}
	m, err := w.onClaim(ctx, deliveryID, func(d *projection.Delivery) journal.Payload {
		return &journal.DeliveryAttempted{Token: token, Attempt: d.Attempts, Outcome: outcome}
	})
	if err != nil {
		return nil, fmt.Errorf("complete delivery %s: %w", deliveryID, err)
	}
	return m, nil
}

// Release gives a claim back, as a stopping worker does with an attempt it
// cancelled: queued when the attempt had not started its I/O (and the
// attempt is not counted), retrying and due now when it had, since the
// target may have the payload already. ErrClaimLost as for Complete.
func (w *Writer) Release(ctx context.Context, deliveryID, token uuid.UUID, started bool, reason string) (*projection.Message, error) {
	p := &journal.DeliveryReleased{Token: token, Started: started, Reason: reason}
	if err := p.Validate(); err != nil {
		return nil, invalid(err)
	}
	m, err := w.onClaim(ctx, deliveryID, func(*projection.Delivery) journal.Payload { return p })
	if err != nil {
		return nil, fmt.Errorf("release delivery %s: %w", deliveryID, err)
	}
	return m, nil
}

// onClaim records the payload made for the delivery, by its worker, when the
// fold finds the claim still current.
func (w *Writer) onClaim(ctx context.Context, deliveryID uuid.UUID, payload func(*projection.Delivery) journal.Payload) (*projection.Message, error) {
	return w.run(ctx, w.loadDelivery(ctx, deliveryID), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		d := c.after.Delivery(deliveryID)
		err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID,
			Actor: journal.WorkerActor(d.Target), Payload: payload(d)})
		return c, refused(ErrClaimLost, err)
	})
}

// Receipt settles a delivery awaiting its receipt: delivered when positive,
// failed when not. A receipt for a delivery in any other state changes
// nothing; it is journaled as refused and the command returns
// ErrReceiptRefused.
func (w *Writer) Receipt(ctx context.Context, deliveryID uuid.UUID, positive bool, detail, actor string) (*projection.Message, error) {
	if err := journal.CheckActor(actor); err != nil {
		return nil, invalid(err)
	}
	m, err := w.run(ctx, w.loadDelivery(ctx, deliveryID), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		e := journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
			Payload: &journal.ReceiptReceived{Positive: positive, Detail: detail}}
		err := c.record(e)
		var ill *projection.IllegalError
		if !errors.As(err, &ill) {
			return c, err
		}
		e.Payload = &journal.ReceiptRefused{Positive: positive, Detail: detail, Reason: ill.Reason}
		if err := c.record(e); err != nil {
			return nil, err
		}
		c.result = &StateError{Err: ErrReceiptRefused, State: ill.State, Allowed: ill.Allowed, Reason: ill.Reason}
		return c, nil
	})
	if err != nil {
		return m, fmt.Errorf("receipt for delivery %s: %w", deliveryID, err)
	}
	return m, nil
}

// Redeliver queues one delivery of the message again, with a fresh count of
// wake-ups, for an operator: from retrying, failed, stalled or delivered (to
// send it again). Any other state is ErrNotRedeliverable; a delivery of
// another message is ErrNotFound.
func (w *Writer) Redeliver(ctx context.Context, messageID, deliveryID uuid.UUID, operator string) (*projection.Message, error) {
	if operator == "" {
		return nil, invalid(&lifecycle.FieldError{Field: "operator", Problem: "is required"})
	}
	m, err := w.run(ctx, w.loadMessage(ctx, messageID), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		d := c.after.Delivery(deliveryID)
		if d == nil {
			return nil, ErrNotFound
		}
		err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: journal.OperatorActor(operator),
			Payload: &journal.DeliveryRedelivered{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1))}})
		c.wakeups = []Wakeup{{DeliveryID: deliveryID, Target: d.Target}}
		return c, refused(ErrNotRedeliverable, err)
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver delivery %s of message %s: %w", deliveryID, messageID, err)
	}
	return m, nil
}
