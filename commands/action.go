package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// Action is who acts on a message, for an operator's command, and on what
// condition.
type Action struct {
	// Operator is the name journaled as the actor (operator:<name>);
	// required.
	Operator string
	// IfVersion, when not 0, makes the command act only on the message at
	// that version (the stream's, as the message resource shows it):
	// otherwise it is a *StaleError and nothing is written. An operator who
	// looked at the message acts on what was looked at.
	IfVersion int
	// Reason is journaled with a skip, a resend or a replay.
	Reason string
	// Operation is the bulk operation acting, journaled with the action;
	// none for an operator's own.
	Operation uuid.UUID
}

// StaleError is an action refused because the message moved since the
// version the operator acted on.
type StaleError struct {
	Want, Current int
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%v: the message is at version %d, not %d", ErrStale, e.Current, e.Want)
}

func (e *StaleError) Unwrap() error { return ErrStale }

func (a Action) check() error {
	var errs []error
	if a.Operator == "" {
		errs = append(errs, &lifecycle.FieldError{Field: "operator", Problem: "is required"})
	}
	if a.IfVersion < 0 {
		errs = append(errs, &lifecycle.FieldError{Field: "if_version", Problem: fmt.Sprintf("must be 1 or more, got %d", a.IfVersion)})
	}
	return invalid(errors.Join(errs...))
}

// fresh refuses a message that is not at the version the action names.
func (a Action) fresh(m *projection.Message) error {
	if a.IfVersion != 0 && m.Version != a.IfVersion {
		return &StaleError{Want: a.IfVersion, Current: m.Version}
	}
	return nil
}

func (a Action) actor() string { return journal.OperatorActor(a.Operator) }

// Redeliver queues one delivery of the message again, with a fresh count of
// wake-ups: from retrying, failed, stalled, delivered or skipped (to send
// it again). Any other state is ErrNotRedeliverable; a delivery of another
// message is ErrNotFound. A delivery that holds its lane (a failed or
// stalled head) is retried in place, before the ones waiting behind it;
// one that had settled for its lane joins the back of it, blocked when the
// lane is held.
func (w *Writer) Redeliver(ctx context.Context, messageID, deliveryID uuid.UUID, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	m, err := w.run(ctx, delivery(deliveryID), func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		if m.ID != messageID {
			return nil, ErrNotFound
		}
		if err := a.fresh(m); err != nil {
			return nil, err
		}
		c := newChange(m)
		return c, refusedToSend(ErrNotRedeliverable, redeliverOn(c, lanes, deliveryID, now, a))
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver delivery %s of message %s: %w", deliveryID, messageID, err)
	}
	w.traceAction(ctx, "redeliver", start, m, a, deliveryID)
	return m, nil
}

// redeliverOn records on c the redelivery of one of its message's
// deliveries, and its wake-up unless it joins the back of a held lane.
func redeliverOn(c *change, lanes *projection.LaneBook, deliveryID uuid.UUID, now time.Time, a Action) error {
	d := c.after.Delivery(deliveryID)
	p := &journal.DeliveryRedelivered{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1)), Operation: a.Operation}
	if d.LaneSeq > 0 && lifecycle.RedeliverRule.Admits(d.State) {
		head, err := lanes.Head(projection.LaneID{Target: d.Target, Key: d.LaneKey}, d.ID)
		if err != nil {
			return err
		}
		if !head {
			if p.Lane, err = lanes.Place(d.Target, d.LaneKey); err != nil {
				return err
			}
		}
	}
	if err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: a.actor(), Payload: p}); err != nil {
		return err
	}
	if !p.Blocked {
		c.wakeups = append(c.wakeups, Wakeup{DeliveryID: deliveryID, Target: d.Target})
	}
	return nil
}

// Skip settles one delivery of the message without sending it, with the
// action's reason: from queued, blocked, retrying, stalled, failed or
// awaiting_ack. Any other state is ErrNotSkippable; a delivery of another
// message is ErrNotFound. Skipping the head of a lane lets the next
// delivery of the lane go; skipping one that waits takes it out of the
// lane.
func (w *Writer) Skip(ctx context.Context, messageID, deliveryID uuid.UUID, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	m, err := w.run(ctx, delivery(deliveryID), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		if m.ID != messageID {
			return nil, ErrNotFound
		}
		if err := a.fresh(m); err != nil {
			return nil, err
		}
		c := newChange(m)
		return c, refused(ErrNotSkippable, skipOn(c, deliveryID, now, a))
	})
	if err != nil {
		return nil, fmt.Errorf("skip delivery %s of message %s: %w", deliveryID, messageID, err)
	}
	w.traceAction(ctx, "skip", start, m, a, deliveryID)
	return m, nil
}

// skipOn records on c the skip of one of its message's deliveries.
func skipOn(c *change, deliveryID uuid.UUID, now time.Time, a Action) error {
	return c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: a.actor(),
		Payload: &journal.DeliverySkipped{Reason: a.Reason, Operation: a.Operation}})
}

// Redispatch matches the current routes again and adds a delivery, to the
// current generation, for each matched target that has none in it,
// scheduled with the message's scheduled deliveries when it has some, so a
// message is scheduled as a whole. Only a
// dispatched message can be redispatched (ErrNotRedispatchable).
func (w *Writer) Redispatch(ctx context.Context, id uuid.UUID, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, fmt.Errorf("redispatch message %s: %w", id, err)
	}
	payloads, err := w.routingPayloads(ctx, cfg, id)
	if err != nil {
		return nil, fmt.Errorf("redispatch message %s: %w", id, err)
	}
	m, err := w.run(ctx, message(id), func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		if err := a.fresh(m); err != nil {
			return nil, err
		}
		c := newChange(m)
		return c, refusedToSend(ErrNotRedispatchable, w.dispatchOn(c, cfg, payloads[m.ID], lanes, now, a.actor(), true, a.Operation, m.ScheduledUntil()))
	})
	if err != nil {
		return nil, fmt.Errorf("redispatch message %s: %w", id, err)
	}
	w.traceAction(ctx, "redispatch", start, m, a, uuid.Nil)
	return m, nil
}

// DeliverNow makes a scheduled message's deliveries due now, ahead of
// their time: each scheduled one is queued and woken (delivery.due, early),
// journaled as the operator's. A message that is not scheduled is
// ErrNotScheduled, a *StateError naming its status.
func (w *Writer) DeliverNow(ctx context.Context, id uuid.UUID, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	m, err := w.run(ctx, message(id), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		if err := a.fresh(m); err != nil {
			return nil, err
		}
		if m.Status != lifecycle.StatusScheduled {
			return nil, &StateError{Err: ErrNotScheduled, State: string(m.Status),
				Allowed: []string{string(lifecycle.StatusScheduled)}, Reason: "only a scheduled message is delivered now"}
		}
		c := newChange(m)
		for _, d := range m.Deliveries {
			if !m.Current(&d) || d.State != lifecycle.StateScheduled {
				continue
			}
			p := &journal.DeliveryDue{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1)), Early: true}
			if err := c.record(journal.Event{RecordedAt: now, DeliveryID: d.ID, Actor: a.actor(), Payload: p}); err != nil {
				return nil, err
			}
			c.wakeups = append(c.wakeups, Wakeup{DeliveryID: d.ID, Target: d.Target})
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("deliver message %s now: %w", id, err)
	}
	w.traceAction(ctx, "deliver_now", start, m, a, uuid.Nil)
	return m, nil
}

// Resend sends a dispatched message again as a new generation: a fresh
// delivery to each target of the current generation, or to those of them
// named in targets. The current generation's deliveries that failed or
// stalled are superseded; delivered and skipped ones stay as they are. A
// message with a delivery still in hand (queued, blocked, delivering,
// retrying, awaiting a receipt), never dispatched, refused, or whose
// generation has no deliveries (a replay that matched no route), or whose
// payload retention expunged, is ErrNotResendable, with the reason; a target not of the current
// generation is ErrInvalid.
func (w *Writer) Resend(ctx context.Context, id uuid.UUID, targets []string, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	m, err := w.resend(ctx, id, a, func(m *projection.Message, _ *configState, _ []byte) (routing.Decision, error) {
		targets, err := resendTargets(m, targets)
		return routing.Decision{Targets: targets}, err
	}, false)
	if err != nil {
		return nil, fmt.Errorf("resend message %s: %w", id, err)
	}
	w.traceAction(ctx, "resend", start, m, a, uuid.Nil)
	return m, nil
}

// Replay sends a dispatched message again as a new generation, to the
// targets the routes match now, decided afresh as at its dispatch (none
// matching: the new generation is not routed). It supersedes and is
// refused as Resend is.
func (w *Writer) Replay(ctx context.Context, id uuid.UUID, a Action) (*projection.Message, error) {
	start := time.Now()
	if err := a.check(); err != nil {
		return nil, err
	}
	m, err := w.resend(ctx, id, a, routed, true)
	if err != nil {
		return nil, fmt.Errorf("replay message %s: %w", id, err)
	}
	w.traceAction(ctx, "replay", start, m, a, uuid.Nil)
	return m, nil
}

// resendTargets are the targets a resend of m sends to: those of its
// current generation, or those of them named in targets (any other is
// ErrInvalid). A generation with none is ErrNotResendable: a replay
// matches the routes afresh.
func resendTargets(m *projection.Message, targets []string) ([]string, error) {
	current := m.CurrentTargets()
	if len(current) == 0 {
		return nil, &StateError{Err: ErrNotResendable, State: string(m.Status),
			Reason: fmt.Sprintf("its generation %d has no targets to send to again: replay it to match the routes afresh", m.Generation)}
	}
	if len(targets) == 0 {
		return current, nil
	}
	var errs []error
	for i, t := range targets {
		if !slices.Contains(current, t) {
			errs = append(errs, &lifecycle.FieldError{Field: fmt.Sprintf("targets[%d]", i),
				Problem: fmt.Sprintf("%q is not a target of the message's generation %d: allowed are %v", t, m.Generation, current)})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, invalid(err)
	}
	return slices.Compact(slices.Sorted(slices.Values(targets))), nil
}

// chooser picks the targets of a new generation of a message, whose body
// is payload when a replay's filters read it (routingPayloads).
type chooser func(m *projection.Message, cfg *configState, payload []byte) (routing.Decision, error)

// resend records a new generation of the message to the targets chosen.
func (w *Writer) resend(ctx context.Context, id uuid.UUID, a Action, choose chooser, replay bool) (*projection.Message, error) {
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, err
	}
	payloads, err := w.routingPayloads(ctx, cfg, id)
	if err != nil {
		return nil, err
	}
	return w.run(ctx, message(id), resendDecision(cfg, payloads, a, choose, replay))
}

// resendDecision records a new generation of the message to the targets
// choose picks, or refuses the message with ErrNotResendable.
func resendDecision(cfg *configState, payloads map[uuid.UUID][]byte, a Action, choose chooser, replay bool) decision {
	return func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		if err := a.fresh(m); err != nil {
			return nil, err
		}
		if err := Resendable(m); err != nil {
			return nil, err
		}
		d, err := choose(m, cfg, payloads[m.ID])
		if err != nil {
			return nil, err
		}
		c := newChange(m)
		var superseded []uuid.UUID
		for i := range m.Deliveries {
			if d := &m.Deliveries[i]; m.Current(d) && lifecycle.SupersedeRule.Admits(d.State) {
				superseded = append(superseded, d.ID)
			}
		}
		// The new generation joins the back of its lanes, behind the old
		// heads it supersedes, which then let their lanes go.
		nd, shapes, err := newDeliveries(m, d.Targets, lanes, now, time.Time{}, shaper(cfg, m, payloads[m.ID]))
		if err != nil {
			return nil, err
		}
		nd.Routing = d.Routing
		p := &journal.MessageResent{Generation: m.Generation + 1, Replay: replay, Superseded: superseded,
			NewDeliveries: nd, Reason: a.Reason, Operation: a.Operation}
		if err := c.record(journal.Event{RecordedAt: now, Actor: a.actor(), Payload: p}); err != nil {
			return nil, err
		}
		c.touched = append(c.touched, superseded...)
		c.added(nd, shapes)
		return c, nil
	}
}

// Resendable says why the message cannot be sent again now, a
// *StateError of ErrNotResendable with the reason, or nil: the rule Resend
// and Replay act by, for a surface to offer them only when they would be
// taken. A message whose payload retention expunged has nothing left to
// send: a state of the message, so ErrNotResendable like the others, not
// the ErrPayloadExpunged of redeliver and redispatch (docs/retention.md).
func Resendable(m *projection.Message) error {
	switch {
	case m.PayloadExpunged:
		return &StateError{Err: ErrNotResendable, State: string(m.Status),
			Reason: fmt.Sprintf("its payload was expunged by retention (%d bytes, sha256 %s): there is nothing left to send", m.PayloadSize, m.PayloadSHA256)}
	case m.Stage != lifecycle.StageDispatched:
		return &StateError{Err: ErrNotResendable, State: string(m.Stage), Allowed: []string{string(lifecycle.StageDispatched)},
			Reason: "only a dispatched message is sent again: this one was " + map[lifecycle.MessageStage]string{
				lifecycle.StageAccepted: "never dispatched", lifecycle.StageRefused: "refused"}[m.Stage]}
	}
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; m.Current(d) && lifecycle.InHandRule.Admits(d.State) {
			return &StateError{Err: ErrNotResendable, State: string(d.State), Allowed: lifecycle.Strings(settledStates()),
				Reason: fmt.Sprintf("its delivery to %s is %s: it is sent again once none of its generation %d is in hand",
					d.Target, d.State, m.Generation)}
		}
	}
	return nil
}

// settledStates are the states a delivery of the current generation may
// be in for its message to be sent again.
func settledStates() []lifecycle.DeliveryState {
	var out []lifecycle.DeliveryState
	for _, s := range lifecycle.DeliveryStates {
		if !lifecycle.InHandRule.Admits(s) && s != lifecycle.StateSuperseded {
			out = append(out, s)
		}
	}
	return out
}
