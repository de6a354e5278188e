package commands

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// Claim is a worker's hold on one attempt at a delivery.
type Claim struct {
	Token    uuid.UUID
	Attempt  int
	LeaseEnd time.Time
	// Message is the state after the claim; Delivery is the claimed one.
	Message  *projection.Message
	Delivery projection.Delivery
	// Payload is the message's body, read in the claim's own transaction
	// so that the attempt needs no round trip of its own for it; nil when
	// the message has no payload row.
	Payload []byte
	// Shape is what the target's transform made of the delivery when it
	// was made, read with the payload; nil when it made nothing.
	Shape *routing.Shaped
}

// Claim takes a delivery for one attempt, by compare-and-swap on its state
// and due time: a queued or stalled delivery, a retrying one that is due or
// was woken, or a delivering one whose lease has run out (the expiry is
// journaled first). The claim counts the attempt, resets the wake-ups and
// holds the delivery until now + lease. ErrNotClaimable otherwise, and
// while the delivery's target is disabled. A claim whose commit lost its
// answer is returned all the same when it committed.
func (w *Writer) Claim(ctx context.Context, deliveryID uuid.UUID, lease time.Duration) (Claim, error) {
	if lease <= 0 {
		return Claim{}, invalid(&lifecycle.FieldError{Field: "lease", Problem: "must be positive"})
	}
	var (
		claim Claim
		c     *change
	)
	m, err := w.runOp(&op{ctx: ctx, on: delivery(deliveryID), claims: true,
		decide: func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
			var err error
			claim, c, err = claimOn(m, deliveryID, uuid.New(), lease, now)
			return c, err
		}})
	if Transient(err) && claim.Token != uuid.Nil {
		// Its answer may be all that was lost.
		if held, herr := w.claimsHeld(ctx, []Claim{claim}, err); herr == nil {
			return held[0], nil
		}
	}
	if err != nil {
		return Claim{}, fmt.Errorf("claim delivery %s: %w", deliveryID, err)
	}
	claim.Message, claim.Delivery, claim.Payload = m, *m.Delivery(deliveryID), c.body
	claim.Shape = shapeOf(c.shapes, deliveryID)
	return claim, nil
}

// claimOn claims the delivery of m with token on a change of its own,
// which reads the message's body for the attempt.
func claimOn(m *projection.Message, deliveryID, token uuid.UUID, lease time.Duration, now time.Time) (Claim, *change, error) {
	c := newChange(m)
	c.readBody = true
	claim, err := c.claim(deliveryID, token, lease, now)
	if err != nil {
		return Claim{}, nil, err
	}
	claim.Message, claim.Delivery = c.after, *c.after.Delivery(deliveryID)
	return claim, c, nil
}

// claim records the claim of one delivery with token on the change, the
// expiry of the lease it had first when that has run out.
func (c *change) claim(deliveryID, token uuid.UUID, lease time.Duration, now time.Time) (Claim, error) {
	d := c.after.Delivery(deliveryID)
	actor := journal.WorkerActor(d.Target)
	if d.State == lifecycle.StateDelivering && !now.Before(d.LeaseEnd) {
		err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
			Payload: &journal.DeliveryLeaseExpired{Token: d.ClaimToken, LeaseEnd: d.LeaseEnd}})
		if err != nil {
			return Claim{}, err
		}
	}
	claim := Claim{Token: token, Attempt: d.Attempts + 1, LeaseEnd: now.Add(lease)}
	err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
		Payload: &journal.DeliveryClaimed{Token: claim.Token, Attempt: claim.Attempt, LeaseEnd: claim.LeaseEnd}})
	return claim, refused(ErrNotClaimable, err)
}

// claimPlanSQL, run in the claim's transaction before projection's
// choice of the claimable deliveries (QueueChooseClaimable), makes
// it walk deliveries_claimable in its order and stop at the limit,
// whatever the statistics say. A bitmap scan of the target's entries and
// a sort, which a plan made on stale statistics chooses, takes time in
// proportion to the backlog, and never marks the entries of deliveries
// claimed already as dead, as an index scan does, so each claim of a
// drain read more of them than the last.
const claimPlanSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`

// queueChoice queues on b the choice of up to want[target] deliveries of
// each target that a worker may take at now, freeing[target] of its
// attempts in flight being ended by the same transaction
// (projection.QueueChooseClaimable from the target's cursor, under
// claimPlanSQL, then claimPlanReset), locking them and reading their
// messages; add gets each chosen one, in its target's due order, once the
// batch is read.
func (w *Writer) queueChoice(b *pgx.Batch, cfg *configState, now time.Time, want, freeing map[string]int,
	add func(target string, c projection.Chosen)) {
	b.Queue(claimPlanSQL)
	for _, target := range slices.Sorted(maps.Keys(want)) {
		from, cursor := w.cursors.start(target, now)
		bound := pgtype.Timestamptz{Time: from, Valid: true}
		if !cursor {
			bound.InfinityModifier = pgtype.NegativeInfinity
		}
		// A target the configuration does not know yet is chosen as one
		// with limits.
		t, known := cfg.targets[target]
		limited := !known || t.Limited()
		projection.QueueChooseClaimable(b, target, limited, now, want[target], freeing[target], bound, func(chosen []projection.Chosen) {
			keys := make([]time.Time, len(chosen))
			for i, c := range chosen {
				keys[i] = c.Key
				add(target, c)
			}
			w.cursors.chose(target, cursor, want[target], keys, now)
		})
	}
	for _, sql := range claimPlanReset {
		b.Queue(sql)
	}
}

// claimRescan is how long a target's choices may start at its cursor
// before one walks deliveries_claimable from its start again.
const claimRescan = time.Second

// claimCursors keeps, by target, the due key at which the last full choice
// of its deliveries began. A claimed or settled delivery's entry stays in
// deliveries_claimable, dead, until a vacuum removes it: a choice from the
// index's start walks all those of the deliveries already drained, up to
// a fifth of the table between two autovacuum passes, so a drain's choices
// cost more the larger the tables. A choice starts at its target's cursor
// instead. What a cursor passes over (a delivery skipped while another
// batch held its message, a stalled one, a lease run out long ago, a retry
// due before the key of a delivery queued later) the next choice from the
// start takes: after any choice that came up short, and at least every
// claimRescan.
type claimCursors struct {
	mu sync.Mutex
	by map[string]claimCursor
}

type claimCursor struct {
	from    time.Time // the first key of the last full choice
	scanned time.Time // when a choice last started at the index's start
}

// start returns the key at which target's next choice starts, and false
// when it starts at the index's start.
func (c *claimCursors) start(target string, now time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.by[target]
	if !ok || now.Sub(cur.scanned) >= claimRescan {
		return time.Time{}, false
	}
	return cur.from, true
}

// chose records a choice of target that asked for want deliveries and got
// those of keys, in due order, starting at its cursor or not.
func (c *claimCursors) chose(target string, cursor bool, want int, keys []time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(keys) < want {
		delete(c.by, target)
		return
	}
	if c.by == nil {
		c.by = map[string]claimCursor{}
	}
	cur := c.by[target]
	if !cursor {
		cur.scanned = now
	}
	cur.from = keys[0]
	c.by[target] = cur
}

// claimPlanReset gives the rest of the claim's transaction back the
// settings it began with, the Writer's (projection.LookupPlanSQL): under
// claimPlanSQL's, the read of the messages and the writes took seconds on
// tables never analyzed.
var claimPlanReset = []string{`SET LOCAL enable_bitmapscan TO DEFAULT`, `SET LOCAL enable_sort TO DEFAULT`}

// ClaimDue claims up to n deliveries of the target that a worker may take
// now, oldest due first, in one transaction; none while the target is
// disabled. It skips the rows other
// workers' claims hold locked (FOR UPDATE SKIP LOCKED on the delivery and
// its message), so several workers of one target share a backlog without
// piling onto the same rows, and it locks the messages it claims on, so no
// other command moves them under it.
func (w *Writer) ClaimDue(ctx context.Context, target string, n int, lease time.Duration) ([]Claim, error) {
	if lease <= 0 || n <= 0 {
		return nil, invalid(&lifecycle.FieldError{Field: "lease", Problem: "lease and count must be positive"})
	}
	claims, halfOpen, err := w.claimDue(ctx, target, n, lease)
	for try := 1; err != nil && (lostRace(err) || journal.IsVersionConflict(err)) && try < maxTries && ctx.Err() == nil; try++ {
		// A deadlock (with an online rebuild's switch, which locks every
		// projection table) or a serialization failure rolled it all back;
		// or a version taken meanwhile: the choice checks the message
		// row's version, not its other deliveries', and one of those moved
		// after the choice's snapshot (architecture.md, What a write
		// writes). The choice reads again.
		claims, halfOpen, err = w.claimDue(ctx, target, n, lease)
	}
	if halfOpen {
		// The breaker's cooldown is over: it is half-open, and this claim
		// may take the probe.
		w.runHealthSteps([]healthStep{{target: target, halfOpen: true}})
		claims, _, err = w.claimDue(ctx, target, n, lease)
	}
	if err != nil {
		return nil, fmt.Errorf("claim due deliveries of %s: %w", target, err)
	}
	return claims, nil
}

// claimDue runs in one transaction on a connection of its own, in two
// round trips: BEGIN with the choice of the deliveries, which locks them and
// their messages and reads the messages; the writes with COMMIT. A message
// the choice read at another version than it locked is read again in a
// round trip between the two.
func (w *Writer) claimDue(ctx context.Context, target string, n int, lease time.Duration) (_ []Claim, halfOpen bool, err error) {
	defer w.recovered(&err, "a claim of due deliveries")
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, false, err
	}
	if t, ok := cfg.targets[target]; ok && !t.Enabled {
		return nil, false, nil
	}
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer w.release(conn)
	now := w.now()
	// A message's first chosen delivery, its oldest due, is the one claimed.
	var chosen []projection.Chosen
	var unread []uuid.UUID
	seen := map[uuid.UUID]bool{}
	var health projection.TargetHealth
	var tokens *float64
	spec := cfg.targets[target]
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(projection.LookupPlanSQL)
	projection.QueueReadHealth(b, target, &health)
	if spec.Rate != nil {
		queueReadTokens(b, target, now, &tokens)
	}
	w.queueChoice(b, cfg, now, map[string]int{target: n}, nil, func(_ string, c projection.Chosen) {
		if seen[c.MessageID] {
			return
		}
		seen[c.MessageID] = true
		chosen = append(chosen, c)
		if c.Message == nil {
			unread = append(unread, c.MessageID)
		}
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, err
	}
	w.learnHealth(health)
	w.learnTokens(spec, tokens, len(chosen), now)
	if len(chosen) == 0 {
		// release ends the transaction
		return nil, (healthStep{target: target, halfOpen: true}).decide(health, breakerOf(cfg, target), now) != nil, nil
	}
	if len(unread) > 0 {
		messages, err := projection.LoadMany(ctx, conn, unread)
		if err != nil {
			return nil, false, err
		}
		byID := make(map[uuid.UUID]*projection.Message, len(messages))
		for _, m := range messages {
			byID[m.ID] = m
		}
		for i := range chosen {
			if chosen[i].Message == nil {
				chosen[i].Message = byID[chosen[i].MessageID]
			}
		}
	}
	// The claims take the clock once the rows are locked, as a batch's
	// decisions do: a reading from before the choice can be older than an
	// event another writer recorded on a message meanwhile. What was due
	// at the first reading is due at this one.
	now = w.now()
	claims := make([]Claim, 0, len(chosen))
	changes := make([]*change, 0, len(chosen))
	for _, ch := range chosen {
		claim, c, err := claimOn(ch.Message, ch.DeliveryID, uuid.New(), lease, now)
		if err != nil {
			// The query and the fold disagree; leave this one to a claim
			// by its wake-up, which reports why.
			w.log.Warn("due delivery not claimable", "delivery_id", ch.DeliveryID, "err", err)
			continue
		}
		claims = append(claims, claim)
		changes = append(changes, c)
	}
	if len(claims) == 0 {
		return nil, false, nil
	}
	var events []journal.Event
	for _, c := range changes {
		events = append(events, c.events...)
	}
	// A claim moves no lane: only a lane's head is ever claimable.
	read, err := w.commit(ctx, conn, cfg, changes, events, nil, nil, true, nil, now)
	if targetDisabled(err) {
		// Disabled since the configuration was read: nothing to claim,
		// and the next claim reads it anew.
		w.Invalidate()
		return nil, false, nil
	}
	if _, ok := targetHeld(err); ok {
		// Its health changed since the choice read it: the next choice
		// reads it anew.
		return nil, false, nil
	}
	if _, ok := targetLimited(err); ok {
		// Another process took its last slot or token since the choice.
		w.limitTarget(target)
		return nil, false, nil
	}
	if Transient(err) {
		// Its answer may be all that was lost: the claims that committed
		// go to the worker, where they would otherwise wait out their lease.
		claims, err := w.claimsHeld(ctx, claims, err)
		return claims, false, err
	}
	if err != nil {
		return nil, false, err
	}
	for i := range claims {
		claims[i].Payload = read.payloads[claims[i].Message.ID]
		claims[i].Shape = shapeOf(read.shapes, claims[i].Delivery.ID)
	}
	return claims, false, nil
}

// Complete records the outcome of a claimed attempt. It is conditional on the
// claim: a token that is no longer the delivery's gets ErrClaimLost and
// changes nothing. An outcome lifecycle.Gone disables the delivery's
// target too, in the same transaction, unless it is disabled already
// (target.disabled, gone.go).
func (w *Writer) Complete(ctx context.Context, deliveryID, token uuid.UUID, outcome lifecycle.Outcome) (*projection.Message, error) {
	m, _, err := w.complete(ctx, deliveryID, token, outcome, 0, false)
	return m, err
}

// CompleteAndClaimNext records an attempt's outcome as Complete does and
// claims, with lease in the same transaction, a delivery for the worker to
// attempt next in the same slot: on a fifo target the next delivery of the
// delivery's lane, when the outcome lets it go; with due, on a target
// without lanes, the target's oldest due delivery, as ClaimDue would claim
// it, when the target is enabled and this Writer has written the delivery
// (so it knows the target before the read). One transaction where a claim
// of its own would take another, and no slot left idle in between; a
// worker asks for a due one while it has a backlog, since otherwise the
// choice would mostly find nothing, or take what a wake-up is bringing it.
// next is nil when there is none to claim. A try that finds the claim gone
// after an earlier try committed the outcome but lost its answer returns
// the claim that try made, while it holds its delivery, with a nil m: the
// outcome is recorded, and the worker goes on with the claim rather than
// leave it to its lease.
func (w *Writer) CompleteAndClaimNext(ctx context.Context, deliveryID, token uuid.UUID, outcome lifecycle.Outcome,
	lease time.Duration, due bool) (m *projection.Message, next *Claim, err error) {
	if lease <= 0 {
		return nil, nil, invalid(&lifecycle.FieldError{Field: "lease", Problem: "must be positive"})
	}
	return w.complete(ctx, deliveryID, token, outcome, lease, due)
}

// complete records the outcome, claiming the delivery it frees, or with
// due a due one, with lease when lease is positive.
func (w *Writer) complete(ctx context.Context, deliveryID, token uuid.UUID, outcome lifecycle.Outcome,
	lease time.Duration, due bool) (*projection.Message, *Claim, error) {
	if err := outcome.Validate(); err != nil {
		return nil, nil, invalid(err)
	}
	if outcome.Kind == lifecycle.OutcomeAwaitingAck && !outcome.Deadline.After(w.now()) {
		return nil, nil, invalid(&lifecycle.FieldError{Field: "outcome.deadline", Problem: "must be in the future"})
	}
	o := &op{ctx: ctx, on: delivery(deliveryID), claimNext: lease, claimDue: due && lease > 0, nextToken: nextToken(token),
		decide: attempted(deliveryID, func(d *projection.Delivery) journal.Payload {
			return &journal.DeliveryAttempted{Token: token, Attempt: d.Attempts, Outcome: outcome}
		})}
	if outcome.Gone {
		// The target is read, locked, in the batch: its name is needed
		// before, and a delivery's target never changes.
		target := w.owner(deliveryID).target
		if target == "" {
			var err error
			if target, err = projection.DeliveryTarget(ctx, w.db, deliveryID); err != nil {
				return nil, nil, fmt.Errorf("complete delivery %s: %w", deliveryID, err)
			}
		}
		o.gone = &goneRead{target: target}
		o.read = o.gone.queue
	}
	m, err := w.runOp(o)
	if outcome.Gone && errors.Is(err, ErrClaimLost) {
		// A try whose answer was lost after its commit may have
		// disabled the target.
		w.tellDisabled()
	}
	if lease > 0 && errors.Is(err, ErrClaimLost) {
		next, nerr := w.claimedNext(ctx, token)
		if nerr != nil {
			// A worker tries again after an error that is Transient.
			err = fmt.Errorf("find the claim of an earlier try: %w", nerr)
		} else if next != nil {
			return nil, next, nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("complete delivery %s: %w", deliveryID, err)
	}
	return m, o.next, nil
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
	return w.run(ctx, delivery(deliveryID), attempted(deliveryID, payload))
}

// attempted decides the event payload makes of the delivery's claim, by
// its worker; ErrClaimLost when the claim is no longer the delivery's.
func attempted(deliveryID uuid.UUID, payload func(*projection.Delivery) journal.Payload) decision {
	return func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		c := newChange(m)
		d := c.after.Delivery(deliveryID)
		err := c.record(journal.Event{RecordedAt: now, DeliveryID: deliveryID,
			Actor: journal.WorkerActor(d.Target), Payload: payload(d)})
		return c, refused(ErrClaimLost, err)
	}
}

// Receipt settles a delivery awaiting its receipt: delivered when positive,
// failed when not. A receipt for a delivery in any other state changes
// nothing; it is journaled as refused and the command returns
// ErrReceiptRefused. A detail over lifecycle.MaxReceiptTextLength is
// ErrInvalid, of field text, and journals nothing.
func (w *Writer) Receipt(ctx context.Context, deliveryID uuid.UUID, positive bool, detail, actor string) (*projection.Message, error) {
	start := time.Now()
	if err := errors.Join(journal.CheckActor(actor), lifecycle.CheckReceiptText("text", detail)); err != nil {
		return nil, invalid(err)
	}
	m, err := w.run(ctx, delivery(deliveryID), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		c := newChange(m)
		e := journal.Event{RecordedAt: now, DeliveryID: deliveryID, Actor: actor,
			Payload: &journal.ReceiptReceived{Positive: positive, Receipt: journal.Receipt{Detail: detail}}}
		err := c.record(e)
		var ill *projection.IllegalError
		if !errors.As(err, &ill) {
			return c, err
		}
		e.Payload = &journal.ReceiptRefused{Positive: positive, Receipt: journal.Receipt{Detail: detail}, Reason: ill.Reason}
		if err := c.record(e); err != nil {
			return nil, err
		}
		c.result = &StateError{Err: ErrReceiptRefused, State: ill.State, Allowed: ill.Allowed, Reason: ill.Reason}
		return c, nil
	})
	w.traceReceipt(ctx, start, m, deliveryID, actor, positive, true, err)
	if err != nil {
		return m, fmt.Errorf("receipt for delivery %s: %w", deliveryID, err)
	}
	return m, nil
}
