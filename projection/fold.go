package projection

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// IllegalError says why an event cannot happen in the state it found.
type IllegalError struct {
	Kind journal.Kind
	// State is the message stage or the delivery state found.
	State string
	// Allowed lists the stages or states the event may happen in, when the
	// state was what made it illegal.
	Allowed []string
	Reason  string
	// Err is the sentinel of a refusal callers tell apart, such as
	// ErrPayloadExpunged; nil for the others.
	Err error
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("%s is illegal in %s: %s", e.Kind, e.State, e.Reason)
}

func (e *IllegalError) Unwrap() error { return e.Err }

// Apply folds e into m, which is the state of e's stream before it (the zero
// Message for a new stream). It checks that the event is legal there and, for
// a delivery event, that its recorded old and new states are the ones the
// fold finds and makes. On an error m is unchanged.
func Apply(m *Message, e journal.Event) error {
	return apply(m, &e, false)
}

// Record makes e the next event of m's stream: it sets the version and, for
// a delivery event, the target and the old and new states, then folds it into
// m like Apply. The stream is m's, or e's own for the first event. Its
// times and strings are first put in the form the database stores
// (journal.Normalize), so the fold decides on what will be read back.
// Commands build their events with it, so what they append is exactly
// what the fold decided.
func Record(m *Message, e journal.Event) (journal.Event, error) {
	journal.Normalize(&e)
	if m.Version > 0 {
		e.Stream = journal.MessageStream(m.ID)
	}
	e.Version = m.Version + 1
	if err := apply(m, &e, true); err != nil {
		return journal.Event{}, err
	}
	return e, nil
}

func apply(m *Message, e *journal.Event, stamp bool) error {
	k := e.Kind()
	if k.Stream() != "" {
		return &IllegalError{Kind: k, State: string(m.Stage), Reason: "not a message event"}
	}
	if e.Version != m.Version+1 {
		return &IllegalError{Kind: k, State: string(m.Stage),
			Reason: fmt.Sprintf("version %d does not follow %d", e.Version, m.Version)}
	}
	if err := checkPayloadHeld(m, k); err != nil {
		return err
	}
	if k.Delivery() {
		return applyDelivery(m, e, stamp)
	}
	next := *m
	if err := messageStep(&next, e); err != nil {
		return err
	}
	next.Version = e.Version
	if k != journal.KindMessagePayloadExpunged {
		next.UpdatedAt = e.RecordedAt
	}
	next.settle()
	next.armCallback(m.Status, e.RecordedAt)
	next.stampRow(m.row())
	*m = next
	return nil
}

// messageStep folds a message event into next, a copy of the state.
func messageStep(next *Message, e *journal.Event) error {
	at := e.RecordedAt
	switch p := e.Payload.(type) {
	case *journal.MessageAccepted:
		if next.Version != 0 {
			return illegalStage(e, next, "the message was accepted already")
		}
		id, err := uuid.Parse(e.Stream)
		if err != nil {
			return &IllegalError{Kind: e.Kind(), Reason: fmt.Sprintf("stream %q is not a message id", e.Stream)}
		}
		*next = Message{
			ID: id, Source: p.Source, From: p.From, To: p.To, ContentType: p.ContentType,
			IdempotencyKey: p.IdempotencyKey, OrderingKey: p.OrderingKey, DuplicateKey: p.DuplicateKey,
			PossibleDuplicateOf: p.PossibleDuplicateOf, Type: p.Type, PayloadSize: p.PayloadSize, PayloadSHA256: p.PayloadSHA256,
			Stage: lifecycle.StageAccepted, Generation: 1, CreatedAt: at, Trace: p.Trace(), Headers: p.Headers,
		}
		if p.CallbackURL != "" {
			next.Callback = &Callback{MessageID: id, URL: p.CallbackURL, UpdatedAt: at}
		}
	case *journal.MessageDispatched:
		if next.Stage != lifecycle.StageAccepted {
			return illegalStage(e, next, "only an accepted message is dispatched", lifecycle.StageAccepted)
		}
		if err := addDeliveries(next, e, p.NewDeliveries); err != nil {
			return err
		}
		next.Stage = lifecycle.StageDispatched
	case *journal.MessageRedispatched:
		if next.Stage != lifecycle.StageDispatched {
			return illegalStage(e, next, "only a dispatched message is redispatched", lifecycle.StageDispatched)
		}
		if err := addDeliveries(next, e, p.NewDeliveries); err != nil {
			return err
		}
	case *journal.MessageResent:
		if next.Stage != lifecycle.StageDispatched {
			return illegalStage(e, next, "only a dispatched message is sent again", lifecycle.StageDispatched)
		}
		if p.Generation != next.Generation+1 {
			return illegalStage(e, next, fmt.Sprintf("generation %d does not follow %d", p.Generation, next.Generation))
		}
		// The current generation must be settled, and what it supersedes
		// is exactly what failed or stalled of it.
		var superseded []uuid.UUID
		deliveries := slices.Clone(next.Deliveries)
		for i := range deliveries {
			d := &deliveries[i]
			switch {
			case !next.Current(d):
			case lifecycle.InHandRule.Admits(d.State):
				return illegalStage(e, next, fmt.Sprintf("delivery %s to %s is %s: a message is sent again once none of its generation is in hand", d.ID, d.Target, d.State))
			case lifecycle.SupersedeRule.Admits(d.State):
				superseded = append(superseded, d.ID)
				d.State, d.NextDue, d.UpdatedAt, d.Version = lifecycle.StateSuperseded, time.Time{}, e.RecordedAt, e.Version
			}
		}
		if !slices.Equal(superseded, p.Superseded) && (len(superseded) > 0 || len(p.Superseded) > 0) {
			return illegalStage(e, next, fmt.Sprintf("it supersedes %v, but %v failed or stalled", p.Superseded, superseded))
		}
		next.Deliveries, next.Generation = deliveries, p.Generation
		if err := addDeliveries(next, e, p.NewDeliveries); err != nil {
			return err
		}
	case *journal.MessageRefused:
		if next.Stage != lifecycle.StageAccepted {
			return illegalStage(e, next, "only an accepted message is refused", lifecycle.StageAccepted)
		}
		next.Stage, next.Refusal, next.Error = lifecycle.StageRefused, p.Refusal, p.Reason
	case *journal.MessagePayloadExpunged:
		return expunge(next, e, p)
	case *journal.CallbackClaimed, *journal.CallbackAttempted, *journal.CallbackReleased, *journal.CallbackLeaseExpired:
		return callbackStep(next, e)
	default:
		return &IllegalError{Kind: e.Kind(), State: string(next.Stage), Reason: "not a message event"}
	}
	return nil
}

func illegalStage(e *journal.Event, m *Message, reason string, allowed ...lifecycle.MessageStage) error {
	stage := string(m.Stage)
	if m.Version == 0 {
		stage = "a new stream"
	}
	return &IllegalError{Kind: e.Kind(), State: stage, Allowed: lifecycle.Strings(allowed), Reason: reason}
}

// addDeliveries appends the new deliveries of a dispatch, queued and counted
// as woken once: the dispatch publishes their first wake-up; or scheduled
// until their time, not woken; or skipped or failed, when their target's
// transform cancelled them or failed.
func addDeliveries(next *Message, e *journal.Event, nds journal.NewDeliveries) error {
	deliveries := slices.Clip(next.Deliveries)
	for i, nd := range nds.Deliveries {
		switch {
		case nd.Seq != len(next.Deliveries)+i+1:
			return illegalStage(e, next, fmt.Sprintf("delivery %s has seq %d, the next is %d", nd.ID, nd.Seq, len(next.Deliveries)+i+1))
		case next.Delivery(nd.ID) != nil:
			return illegalStage(e, next, fmt.Sprintf("delivery %s exists already", nd.ID))
		case slices.ContainsFunc(next.Deliveries, func(d Delivery) bool { return d.Target == nd.Target && next.Current(&d) }):
			return illegalStage(e, next, fmt.Sprintf("target %s has a delivery of generation %d already", nd.Target, next.Generation))
		case nd.LaneSeq > 0 && next.OrderingKey == "":
			return illegalStage(e, next, fmt.Sprintf("delivery %s is placed in a lane, but the message has no ordering key", nd.ID))
		}
		d := Delivery{
			ID: nd.ID, MessageID: next.ID, MessageCreatedAt: next.CreatedAt, Seq: nd.Seq, Generation: next.Generation, Target: nd.Target,
			State: lifecycle.StateQueued, DispatchCount: 1, NextDue: nds.NextDue, CreatedAt: e.RecordedAt,
			UpdatedAt: e.RecordedAt, Version: e.Version,
		}
		switch {
		case nd.Shape.Settled():
			// The target's transform settled it as it was made: nothing
			// is sent, nor woken.
			d.State, d.DispatchCount, d.NextDue, d.FinishedAt = lifecycle.StateSkipped, 0, time.Time{}, e.RecordedAt
			d.LastError = "cancelled by target " + nd.Target + "'s transform: " + nd.Shape.Cancel
			if nd.Shape.Error != "" {
				d.State, d.LastError = lifecycle.StateFailed, "target "+nd.Target+"'s transform failed: "+nd.Shape.Error
			}
		case nds.Scheduled:
			d.State, d.DispatchCount = lifecycle.StateScheduled, 0
		}
		d.Shaped = nd.Shape != nil
		d.enterLane(nd.Lane, next.OrderingKey)
		deliveries = append(deliveries, d)
	}
	next.Deliveries = deliveries
	return nil
}

func applyDelivery(m *Message, e *journal.Event, stamp bool) error {
	k := e.Kind()
	cur := m.Delivery(e.DeliveryID)
	if cur == nil {
		return &IllegalError{Kind: k, State: string(m.Stage),
			Reason: fmt.Sprintf("the message has no delivery %s", e.DeliveryID)}
	}
	if !m.Current(cur) {
		// An earlier generation's deliveries are final once it is
		// superseded: the message moves on in its current generation.
		return &IllegalError{Kind: k, State: string(cur.State),
			Reason: fmt.Sprintf("the delivery is of generation %d, the message is at generation %d: only the current generation's deliveries move; resend the message instead",
				cur.Generation, m.Generation)}
	}
	if stamp {
		e.Target, e.OldState = cur.Target, cur.State
	} else if e.Target != cur.Target || e.OldState != cur.State {
		return &IllegalError{Kind: k, State: string(cur.State),
			Reason: fmt.Sprintf("recorded from %s of %s, but the delivery is %s of %s", e.OldState, e.Target, cur.State, cur.Target)}
	}
	next := *cur
	if err := deliveryStep(&next, e); err != nil {
		return err
	}
	if stamp {
		e.NewState = next.State
	} else if e.NewState != next.State {
		return &IllegalError{Kind: k, State: string(cur.State),
			Reason: fmt.Sprintf("recorded to %s, but the fold makes %s", e.NewState, next.State)}
	}
	was := m.row()
	*cur = next
	m.Version, m.UpdatedAt = e.Version, e.RecordedAt
	m.settle()
	m.armCallback(was.status, e.RecordedAt)
	m.stampRow(was)
	return nil
}

// stampRow makes the event just folded, at m.Version, the messages row's
// last change when it changed what the row shows (was is what it showed
// before) or moved no delivery, whose row would otherwise hold the
// stream's version.
func (m *Message) stampRow(was row) {
	moved := slices.ContainsFunc(m.Deliveries, func(d Delivery) bool { return d.Version == m.Version })
	if m.row() != was || !moved {
		m.RowVersion, m.RowUpdatedAt = m.Version, m.UpdatedAt
	}
}

// deliveryStep folds a delivery event into d, a copy of the delivery.
func deliveryStep(d *Delivery, e *journal.Event) error {
	at := e.RecordedAt
	illegal := func(reason string, allowed ...lifecycle.DeliveryState) error {
		return &IllegalError{Kind: e.Kind(), State: string(d.State), Allowed: lifecycle.Strings(allowed), Reason: reason}
	}
	// against checks the delivery against a rule of the lifecycle: first
	// its state, then the rule's conditions, which are about time; early
	// says "not yet" for a time, formatted only on a refusal.
	against := func(r lifecycle.Rule, wrongState, early string, when time.Time) error {
		switch {
		case !r.Admits(d.State):
			return illegal(wrongState, r.States()...)
		case !r.Holds(d.Facts(), at):
			return illegal(early + stamp(when))
		}
		return nil
	}
	switch p := e.Payload.(type) {
	case *journal.DeliveryWoken:
		if err := against(lifecycle.WakeRule, "only an unclaimed delivery is woken", "not due until ", d.NextDue); err != nil {
			return err
		}
		switch {
		case p.DispatchCount != d.DispatchCount+1:
			return illegal(fmt.Sprintf("wake-up %d does not follow %d", p.DispatchCount, d.DispatchCount))
		case !p.NextDue.After(at):
			return illegal("the next wake-up is not after this one")
		}
		d.DispatchCount, d.NextDue = p.DispatchCount, p.NextDue
	case *journal.DeliveryStalled:
		if err := against(lifecycle.WakeRule, "only an unclaimed delivery stalls", "not due until ", d.NextDue); err != nil {
			return err
		}
		switch {
		case p.WakeUps != d.DispatchCount:
			return illegal(fmt.Sprintf("stalled after %d wake-ups, but it had %d", p.WakeUps, d.DispatchCount))
		}
		d.State, d.NextDue, d.LastError = lifecycle.StateStalled, time.Time{}, p.Reason
	case *journal.DeliveryClaimed:
		if err := against(lifecycle.ClaimRule, "only a queued, retrying or stalled delivery is claimed",
			"retrying, not due until ", d.NextDue); err != nil {
			return err
		}
		switch {
		case p.Attempt != d.Attempts+1:
			return illegal(fmt.Sprintf("attempt %d does not follow %d", p.Attempt, d.Attempts))
		case !p.LeaseEnd.After(at):
			return illegal("the lease ends before it starts")
		}
		d.State, d.Attempts, d.DispatchCount = lifecycle.StateDelivering, p.Attempt, 0
		d.ClaimToken, d.LeaseEnd, d.NextDue = p.Token, p.LeaseEnd, time.Time{}
	case *journal.DeliveryAttempted:
		if err := checkClaim(d, p.Token, illegal); err != nil {
			return err
		}
		if p.Attempt != d.Attempts {
			return illegal(fmt.Sprintf("outcome of attempt %d, but the claim is attempt %d", p.Attempt, d.Attempts))
		}
		o := p.Outcome
		if o.Kind == lifecycle.OutcomeAwaitingAck && !o.Deadline.After(at) {
			return illegal("the receipt deadline is not after the hand-over")
		}
		d.State, d.ClaimToken, d.LeaseEnd = o.State(), uuid.Nil, time.Time{}
		switch o.Kind {
		case lifecycle.OutcomeDelivered:
			d.LastError, d.FinishedAt = "", at
		case lifecycle.OutcomeAwaitingAck:
			d.LastError, d.NextDue = "", o.Deadline
		case lifecycle.OutcomeRetry:
			d.LastError, d.NextDue = o.Text, o.RetryAt
		case lifecycle.OutcomeFailed:
			d.LastError, d.FinishedAt = o.Text, at
		}
	case *journal.DeliveryReleased:
		if err := checkClaim(d, p.Token, illegal); err != nil {
			return err
		}
		d.State, d.ClaimToken, d.LeaseEnd, d.NextDue = lifecycle.StateQueued, uuid.Nil, time.Time{}, at
		if p.Started {
			d.State = lifecycle.StateRetrying
		} else {
			// Nothing was sent: the claim gives its attempt back.
			d.Attempts--
		}
	case *journal.DeliveryLeaseExpired:
		switch err := checkClaim(d, p.Token, illegal); {
		case err != nil:
			return err
		case !p.LeaseEnd.Equal(d.LeaseEnd):
			return illegal("the lease recorded is not the claim's")
		}
		if err := against(lifecycle.LeaseExpiryRule, "the delivery is not claimed", "the lease runs until ", d.LeaseEnd); err != nil {
			return err
		}
		d.State, d.ClaimToken, d.LeaseEnd, d.NextDue = lifecycle.StateRetrying, uuid.Nil, time.Time{}, at
		d.LastError = "attempt interrupted: lease expired"
	case *journal.ReceiptReceived:
		if d.State != lifecycle.StateAwaitingAck {
			return illegal("no receipt is awaited", lifecycle.StateAwaitingAck)
		}
		d.NextDue, d.FinishedAt = time.Time{}, at
		if p.Positive {
			d.State = lifecycle.StateDelivered
		} else {
			d.State, d.LastError = lifecycle.StateFailed, negativeReceipt(p.Receipt)
		}
	case *journal.ReceiptRefused:
		// A receipt superseded by a later hand-over is refused while that
		// one awaits its own; which hand-over is later, the audit checks
		// (correlate).
		switch superseded := p.SupersededBy > 0; {
		case d.State == lifecycle.StateAwaitingAck && !superseded:
			return illegal("a receipt is awaited: it settles the delivery")
		case d.State != lifecycle.StateAwaitingAck && superseded:
			return illegal("a receipt superseded by a later hand-over is refused only while that one awaits its receipt",
				lifecycle.StateAwaitingAck)
		}
		// A refused receipt is kept in the journal and changes nothing.
		return nil
	case *journal.ReceiptIntermediate:
		// An intermediate receipt is kept in the journal and changes
		// nothing, whatever the state.
		return nil
	case *journal.ReceiptTimedOut:
		if err := against(lifecycle.ReceiptTimeoutRule, "no receipt is awaited", "the receipt is not due until ", d.NextDue); err != nil {
			return err
		}
		if !p.Deadline.Equal(d.NextDue) {
			return illegal("the deadline recorded is not the delivery's")
		}
		d.State, d.NextDue, d.LastError, d.FinishedAt = lifecycle.StateFailed, time.Time{}, p.Reason, at
	case *journal.DeliveryRedelivered:
		if err := against(lifecycle.RedeliverRule, "only a retrying, failed, stalled or delivered delivery is redelivered", "", time.Time{}); err != nil {
			return err
		}
		if !p.NextDue.After(at) {
			return illegal("the next wake-up is not after the redelivery")
		}
		if p.LaneSeq > 0 && d.LaneSeq == 0 {
			return illegal("a delivery in no lane cannot join one")
		}
		d.State, d.DispatchCount, d.NextDue = lifecycle.StateQueued, p.DispatchCount, p.NextDue
		if p.LaneSeq > 0 {
			d.enterLane(p.Lane, d.LaneKey)
		}
		d.Redeliveries++
		d.RedeliveredAt, d.RedeliveredAttempts = at, d.Attempts
		d.FinishedAt = time.Time{}
	case *journal.DeliveryUnblocked:
		if err := against(lifecycle.UnblockRule, "only a blocked delivery is unblocked", "", time.Time{}); err != nil {
			return err
		}
		if !p.NextDue.After(at) {
			return illegal("the next wake-up is not after the unblocking")
		}
		d.State, d.DispatchCount, d.NextDue = lifecycle.StateQueued, p.DispatchCount, p.NextDue
	case *journal.DeliveryDue:
		if p.Early {
			if d.State != lifecycle.StateScheduled {
				return illegal("only a scheduled delivery is delivered now", lifecycle.StateScheduled)
			}
		} else if err := against(lifecycle.DueRule, "only a scheduled delivery comes due", "scheduled until ", d.NextDue); err != nil {
			return err
		}
		if !p.NextDue.After(at) {
			return illegal("the next wake-up is not after the delivery came due")
		}
		// The retry policy's budget counts from now, as after a
		// redelivery: a delivery's schedule takes nothing of its max_age.
		d.State, d.DispatchCount, d.NextDue = lifecycle.StateQueued, p.DispatchCount, p.NextDue
		d.RedeliveredAt, d.RedeliveredAttempts = at, d.Attempts
	case *journal.DeliverySkipped:
		if err := against(lifecycle.SkipRule, "only a delivery that waits or has failed may be skipped", "", time.Time{}); err != nil {
			return err
		}
		d.State, d.NextDue, d.DispatchCount, d.FinishedAt = lifecycle.StateSkipped, time.Time{}, 0, at
	case *journal.DeliveryLaneHeld:
		if d.LaneSeq == 0 {
			return illegal("the delivery is in no lane")
		}
		// Recorded for the alert; it changes nothing.
		return nil
	default:
		return illegal("not a delivery event")
	}
	d.UpdatedAt, d.Version = at, e.Version
	return nil
}

// enterLane places d in the lane of its target and key at l: blocked behind
// the lane's head, or queued as before.
func (d *Delivery) enterLane(l journal.Lane, key string) {
	if l.LaneSeq == 0 {
		return
	}
	d.LaneKey, d.LaneSeq, d.LaneContinue = key, l.LaneSeq, l.Continue
	if l.Blocked {
		// A blocked delivery is not woken: its unblocking queues it.
		d.State, d.DispatchCount, d.NextDue = lifecycle.StateBlocked, 0, time.Time{}
	}
}

func checkClaim(d *Delivery, token uuid.UUID, illegal func(string, ...lifecycle.DeliveryState) error) error {
	if d.State != lifecycle.StateDelivering {
		return illegal("the delivery is not claimed", lifecycle.StateDelivering)
	}
	if token != d.ClaimToken {
		return illegal("the claim token is not the current claim's")
	}
	return nil
}

// negativeReceipt is the last error of a delivery a negative receipt
// failed: the receiver's status and code when it gave them, and its detail.
func negativeReceipt(r journal.Receipt) string {
	s := "negative receipt"
	var parts []string
	if r.Status != "" {
		parts = append(parts, "status "+r.Status)
	}
	if r.Code != "" {
		parts = append(parts, "code "+r.Code)
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return withDetail(s, r.Detail)
}

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
