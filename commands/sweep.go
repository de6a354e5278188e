package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The sweep's transitions. Each takes one delivery, does its step when the
// fold finds it still due, and returns the kind of the event it recorded, or
// "" when there was nothing to do (another process did it first, a worker
// claimed the delivery, or it is not due). So several processes may sweep
// one database at once and every row changes once.

// ExpireLease turns a delivering delivery whose lease has run out into a
// retrying one, due now, and wakes it in the same write
// (delivery.woken, published after commit): no worker's timer will, and
// lifecycle.SweepWakeRule would leave a retry due now alone for
// lifecycle.WakeGrace. It returns journal.KindDeliveryLeaseExpired.
func (w *Writer) ExpireLease(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	return w.sweepStep(ctx, "expire lease of", deliveryID, nil, func(d *projection.Delivery, _ *configState, _ *projection.LaneBook, now time.Time) (journal.Payload, error) {
		return &journal.DeliveryLeaseExpired{Token: d.ClaimToken, LeaseEnd: d.LeaseEnd}, nil
	})
}

// Wake counts an unclaimed wake-up of a delivery the sweep is to wake
// (lifecycle.SweepWakeRule) and sets the next one by
// lifecycle.DispatchBackoff; the wake-up is published after commit. A
// delivery woken max_dispatches times already stalls instead.
func (w *Writer) Wake(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	return w.sweepStep(ctx, "wake", deliveryID, nil, func(d *projection.Delivery, cfg *configState, _ *projection.LaneBook, now time.Time) (journal.Payload, error) {
		if !lifecycle.SweepWakeRule.Holds(d.Facts(), now) {
			return nil, nil
		}
		if n := d.DispatchCount; n >= cfg.settings.Delivery.MaxDispatches {
			return &journal.DeliveryStalled{WakeUps: n,
				Reason: fmt.Sprintf("not claimed by %s after %d wake-ups", d.Target, n)}, nil
		}
		n := d.DispatchCount + 1
		return &journal.DeliveryWoken{DispatchCount: n, NextDue: now.Add(lifecycle.DispatchBackoff(n))}, nil
	})
}

// ComeDue queues a scheduled delivery whose time has come
// (lifecycle.DueRule) and wakes it: delivery.due, the wake-up published
// after commit.
func (w *Writer) ComeDue(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	return w.sweepStep(ctx, "queue scheduled", deliveryID, nil, func(d *projection.Delivery, _ *configState, _ *projection.LaneBook, now time.Time) (journal.Payload, error) {
		if !lifecycle.DueRule.Holds(d.Facts(), now) {
			return nil, nil
		}
		return &journal.DeliveryDue{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1))}, nil
	})
}

// TimeoutReceipt fails a delivery whose receipt deadline has passed, with a
// reason that names how long it waited from the hand-over.
func (w *Writer) TimeoutReceipt(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	return w.sweepStep(ctx, "time out receipt of", deliveryID, nil, func(d *projection.Delivery, _ *configState, _ *projection.LaneBook, now time.Time) (journal.Payload, error) {
		return &journal.ReceiptTimedOut{Deadline: d.NextDue,
			Reason: fmt.Sprintf("no receipt within %s", d.NextDue.Sub(d.UpdatedAt))}, nil
	})
}

// ReleaseBlocked lets a blocked delivery go whose target keeps no order any
// more (its ordering turned from fifo to none, or the target is gone): it is
// queued and woken, whatever waits ahead of it.
//
// It decides on the target as its row is when the release is written,
// read under a share lock that a change of the target waits for (a
// change writes the row before it journals), and as this process's
// configuration has it: a configuration read before the target kept
// order again would otherwise release out of turn after the change.
func (w *Writer) ReleaseBlocked(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	var spec []byte
	read := func(b *pgx.Batch) {
		spec = nil
		b.Queue(`SELECT spec FROM targets WHERE name = (SELECT target FROM deliveries WHERE id = $1) FOR SHARE`, deliveryID).
			Query(func(rows pgx.Rows) error {
				_, err := pgx.ForEachRow(rows, []any{&spec}, func() error { return nil })
				return err
			})
	}
	return w.sweepStep(ctx, "release", deliveryID, read, func(d *projection.Delivery, cfg *configState, _ *projection.LaneBook, now time.Time) (journal.Payload, error) {
		var t lifecycle.Target
		if spec != nil {
			if err := json.Unmarshal(spec, &t); err != nil {
				return nil, fmt.Errorf("read target %s: %w", d.Target, err)
			}
		}
		if cfg.targets[d.Target].Ordering.FIFO() || t.Ordering.FIFO() {
			return nil, nil
		}
		return &journal.DeliveryUnblocked{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1))}, nil
	})
}

// PassLaneOn passes on the lane of a head that settled for it without
// letting the first delivery waiting behind it go, as a journal an earlier
// build wrote can hold (projection.LaneBook.Stuck): that delivery is
// queued and woken, as the head's settling would have done. A command on a
// delivery locks the message first waiting in its lane with its own, so
// the one transaction sees both the head and the delivery it lets go. On
// any other delivery it writes nothing.
func (w *Writer) PassLaneOn(ctx context.Context, deliveryID uuid.UUID) (journal.Kind, error) {
	var kind journal.Kind
	_, err := w.run(ctx, delivery(deliveryID), func(m *projection.Message, lanes *projection.LaneBook, _ time.Time) (*change, error) {
		kind = ""
		d := m.Delivery(deliveryID)
		if d.LaneSeq == 0 {
			return nil, nil
		}
		id := projection.LaneID{Target: d.Target, Key: d.LaneKey}
		// Lane has the batch read the lane, which Owed takes for empty
		// when it is not read.
		if _, err := lanes.Lane(id); err != nil {
			return nil, err
		}
		if _, _, ok, err := lanes.Owed(id); err != nil || !ok {
			return nil, err
		}
		// The change records nothing of its own: the batch passes every
		// lane it read that is owed its pass-on (keepLanes), this one too.
		kind = journal.KindDeliveryUnblocked
		return newChange(m), nil
	})
	if err != nil {
		return "", fmt.Errorf("pass the lane on from delivery %s: %w", deliveryID, err)
	}
	return kind, nil
}

// ReportLaneHeld records, once per head, that the head of a lane has kept
// deliveries waiting behind it for longer than its target's
// head_alert_after: the event raises the alert lane_blocked.
func (w *Writer) ReportLaneHeld(ctx context.Context, headID uuid.UUID) (journal.Kind, error) {
	return w.sweepStep(ctx, "report the lane held by", headID, nil, func(d *projection.Delivery, cfg *configState, lanes *projection.LaneBook, now time.Time) (journal.Payload, error) {
		after := cfg.targets[d.Target].Ordering.HeadAlertAfter.D()
		if d.LaneSeq == 0 || after <= 0 {
			return nil, nil
		}
		l, err := lanes.Lane(projection.LaneID{Target: d.Target, Key: d.LaneKey})
		if err != nil {
			return nil, err
		}
		if l.Head != d.ID || l.Held || l.Waiting == 0 || now.Sub(l.WaitingSince) < after {
			return nil, nil
		}
		return &journal.DeliveryLaneHeld{Waiting: l.Waiting, Since: l.WaitingSince}, nil
	})
}

func (w *Writer) sweepStep(ctx context.Context, verb string, deliveryID uuid.UUID, read func(*pgx.Batch),
	payload func(d *projection.Delivery, cfg *configState, lanes *projection.LaneBook, now time.Time) (journal.Payload, error)) (journal.Kind, error) {
	cfg, err := w.config(ctx)
	if err != nil {
		return "", fmt.Errorf("%s delivery %s: %w", verb, deliveryID, err)
	}
	var kind journal.Kind
	_, err = w.runReading(ctx, delivery(deliveryID), read, func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		kind = ""
		c := newChange(m)
		d := c.after.Delivery(deliveryID)
		p, err := payload(d, cfg, lanes, now)
		if p == nil || err != nil {
			return nil, err
		}
		err = c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: journal.ActorSweep, Payload: p})
		var ill *projection.IllegalError
		if errors.As(err, &ill) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if p.Kind() == journal.KindDeliveryLeaseExpired {
			n := c.after.Delivery(deliveryID).DispatchCount + 1
			woken := &journal.DeliveryWoken{DispatchCount: n, NextDue: now.Add(lifecycle.DispatchBackoff(n))}
			if err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: journal.ActorSweep, Payload: woken}); err != nil {
				return nil, err
			}
		}
		if k := p.Kind(); k == journal.KindDeliveryWoken || k == journal.KindDeliveryUnblocked || k == journal.KindDeliveryLeaseExpired ||
			k == journal.KindDeliveryDue {
			c.wakeups = []Wakeup{{DeliveryID: deliveryID, Target: d.Target}}
		}
		kind = p.Kind()
		return c, nil
	})
	if err != nil {
		return "", fmt.Errorf("%s delivery %s: %w", verb, deliveryID, err)
	}
	return kind, nil
}
