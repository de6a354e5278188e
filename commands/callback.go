package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// CallbackClaim is the callback worker's hold on one call of a message's
// outcome callback.
type CallbackClaim struct {
	Token    uuid.UUID
	Attempt  int
	LeaseEnd time.Time
	// Callback is the callback after the claim: its URL and what it says.
	Callback projection.Callback
	// Trace is the message's trace context, which the call continues.
	Trace lifecycle.Trace
}

// ClaimCallback takes a message's callback for one call when it is due
// (lifecycle.CallbackClaimRule), or its call's lease ran out (recorded
// first); ErrNotClaimable otherwise. A claim whose commit lost its answer
// is returned all the same when it committed.
func (w *Writer) ClaimCallback(ctx context.Context, messageID uuid.UUID, lease time.Duration) (CallbackClaim, error) {
	if lease <= 0 {
		return CallbackClaim{}, invalid(&lifecycle.FieldError{Field: "lease", Problem: "must be positive"})
	}
	var claim CallbackClaim
	_, err := w.run(ctx, message(messageID), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		c := newChange(m)
		var err error
		claim, err = c.claimCallback(lease, now)
		return c, err
	})
	if Transient(err) && claim.Token != uuid.Nil {
		// Its answer may be all that was lost.
		if held, herr := w.callbacksHeld(ctx, []CallbackClaim{claim}, err); herr == nil {
			return held[0], nil
		}
	}
	if err != nil {
		return CallbackClaim{}, fmt.Errorf("claim callback of message %s: %w", messageID, err)
	}
	return claim, nil
}

// claimCallback records the claim of the message's callback on the change,
// the expiry of the lease its call had first when that has run out.
func (c *change) claimCallback(lease time.Duration, now time.Time) (CallbackClaim, error) {
	cb := c.after.Callback
	if cb == nil || cb.State == "" {
		return CallbackClaim{}, &StateError{Err: ErrNotClaimable, Reason: "the message has no callback to make"}
	}
	if lifecycle.LeaseExpiryRule.Holds(cb.Facts(), now) {
		err := c.record(journal.Event{RecordedAt: now, Actor: journal.ActorCallbacks,
			Payload: &journal.CallbackLeaseExpired{Seq: cb.Seq, Token: cb.ClaimToken, LeaseEnd: cb.LeaseEnd}})
		if err != nil {
			return CallbackClaim{}, err
		}
		cb = c.after.Callback
	}
	claim := CallbackClaim{Token: uuid.New(), Attempt: cb.Attempts + 1, LeaseEnd: now.Add(lease)}
	err := c.record(journal.Event{RecordedAt: now, Actor: journal.ActorCallbacks,
		Payload: &journal.CallbackClaimed{Seq: cb.Seq, Token: claim.Token, Attempt: claim.Attempt, LeaseEnd: claim.LeaseEnd}})
	if err != nil {
		return CallbackClaim{}, refused(ErrNotClaimable, err)
	}
	claim.Callback, claim.Trace = *c.after.Callback, c.after.Trace
	return claim, nil
}

// ClaimDueCallbacks claims up to n callbacks that are due, oldest first,
// in one transaction, skipping the rows other transactions hold (FOR
// UPDATE SKIP LOCKED on the callback and its message), as ClaimDue does
// for a target's deliveries.
func (w *Writer) ClaimDueCallbacks(ctx context.Context, n int, lease time.Duration) ([]CallbackClaim, error) {
	if lease <= 0 || n <= 0 {
		return nil, invalid(&lifecycle.FieldError{Field: "lease", Problem: "lease and count must be positive"})
	}
	claims, err := w.claimDueCallbacks(ctx, n, lease)
	if err != nil {
		return nil, fmt.Errorf("claim due callbacks: %w", err)
	}
	return claims, nil
}

func (w *Writer) claimDueCallbacks(ctx context.Context, n int, lease time.Duration) (_ []CallbackClaim, err error) {
	defer w.recovered(&err, "a claim of due callbacks")
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer w.release(conn)
	now := w.now()
	var ids []uuid.UUID
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(projection.LookupPlanSQL)
	projection.QueueDueCallbacks(b, now, n, &ids)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil // release ends the transaction
	}
	messages, err := projection.LoadMany(ctx, conn, ids)
	if err != nil {
		return nil, err
	}
	now = w.now() // once the rows are locked, as in claimDue
	var (
		claims  []CallbackClaim
		changes []*change
	)
	for _, m := range messages {
		c := newChange(m)
		claim, err := c.claimCallback(lease, now)
		if err != nil {
			// The query and the fold disagree; the audit will say why.
			w.log.Warn("due callback not claimable", "message_id", m.ID, "err", err)
			continue
		}
		claims, changes = append(claims, claim), append(changes, c)
	}
	if len(changes) == 0 {
		return nil, nil
	}
	var events []journal.Event
	for _, c := range changes {
		events = append(events, c.events...)
	}
	// A callback moves no lane: its events change no delivery.
	if _, err := w.commit(ctx, conn, nil, changes, events, nil, nil, true, nil, time.Time{}); Transient(err) {
		// Its answer may be all that was lost.
		return w.callbacksHeld(ctx, claims, err)
	} else if err != nil {
		return nil, err
	}
	return claims, nil
}

// callbacksHeld returns those of claims, made by a transaction that
// failed with err for a reason that can pass, that it committed all the
// same (callbackHeld, committedAnyway).
func (w *Writer) callbacksHeld(ctx context.Context, claims []CallbackClaim, err error) ([]CallbackClaim, error) {
	return committedAnyway(ctx, claims, err, w.callbackHeld)
}

// callbackHeld returns c as its transaction would have returned it, while
// it still holds its callback and its lease runs; nil when it does not.
func (w *Writer) callbackHeld(ctx context.Context, c CallbackClaim) (*CallbackClaim, error) {
	m, err := projection.Load(ctx, w.db, c.Callback.MessageID)
	if err != nil {
		return nil, err
	}
	cb := m.Callback
	if cb == nil || cb.State != lifecycle.StateDelivering || cb.ClaimToken != c.Token || !w.now().Before(cb.LeaseEnd) {
		return nil, nil
	}
	return &CallbackClaim{Token: c.Token, Attempt: cb.Attempts, LeaseEnd: cb.LeaseEnd, Callback: *cb, Trace: m.Trace}, nil
}

// CompleteCallback records the outcome of a claimed call: delivered, retry
// (due again at its time) or failed. It is conditional on the claim: a
// token that is no longer the callback's gets ErrClaimLost.
func (w *Writer) CompleteCallback(ctx context.Context, messageID, token uuid.UUID, outcome lifecycle.Outcome) (*projection.Message, error) {
	if err := outcome.Validate(); err != nil {
		return nil, invalid(err)
	}
	m, err := w.onCallback(ctx, messageID, func(cb *projection.Callback) journal.Payload {
		return &journal.CallbackAttempted{Seq: cb.Seq, Token: token, Attempt: cb.Attempts, Outcome: outcome}
	})
	if err != nil {
		return nil, fmt.Errorf("complete callback of message %s: %w", messageID, err)
	}
	return m, nil
}

// ReleaseCallback gives a claimed call back, as a stopping worker does:
// queued when the call had not begun, retrying and due now when it had.
func (w *Writer) ReleaseCallback(ctx context.Context, messageID, token uuid.UUID, started bool, reason string) (*projection.Message, error) {
	if reason == "" {
		return nil, invalid(&lifecycle.FieldError{Field: "reason", Problem: "is required"})
	}
	m, err := w.onCallback(ctx, messageID, func(cb *projection.Callback) journal.Payload {
		return &journal.CallbackReleased{Seq: cb.Seq, Token: token, Started: started, Reason: reason}
	})
	if err != nil {
		return nil, fmt.Errorf("release callback of message %s: %w", messageID, err)
	}
	return m, nil
}

// onCallback records the payload made for the message's callback when the
// fold finds the claim still current.
func (w *Writer) onCallback(ctx context.Context, messageID uuid.UUID, payload func(*projection.Callback) journal.Payload) (*projection.Message, error) {
	return w.run(ctx, message(messageID), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		if m.Callback == nil || m.Callback.State == "" {
			return nil, &StateError{Err: ErrClaimLost, Reason: "the message has no callback to make"}
		}
		c := newChange(m)
		err := c.record(journal.Event{RecordedAt: now, Actor: journal.ActorCallbacks, Payload: payload(m.Callback)})
		return c, refused(ErrClaimLost, err)
	})
}
