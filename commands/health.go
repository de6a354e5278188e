package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// A target's health is decided once for the whole cluster, in PostgreSQL:
// its row of target_health (projection.TargetHealth) is the fold of its
// health stream, with beside it the breaker's window of outcomes.
//
// Claims consult it where they already check the target is enabled: the
// choice of due deliveries takes no more than the target's gate lets
// through (target_allowance, in the same statement), and every
// transaction that writes claims checks them, under the target's claim
// lock held shared, with targets_admit, which also takes a half-open
// breaker's one probe. A change of health takes the target's claim lock
// alone before it writes its event, so no claim is journaled after an
// opening while the breaker is open, whichever process claims.
//
// Outcomes count into the window once they are committed, in a
// transaction of their own sent after the COMMIT in the same round trip
// (projection.QueueCount, one statement for a batch's targets), so the
// row is never held through a batch's commit; a healthy target's
// successes are held a moment and counted together (heldCounts).
// What the counts call for (the
// breaker to open, a probe's outcome to close or open it again, the
// receiver's hold) is then decided again on the row locked, in a
// transaction of its own (changeHealth) run by the command that recorded
// the outcome, so a few more attempts may end meanwhile; two processes
// deciding at once change it once.

// countEvery bounds how long a Writer holds a target's successes back from
// its breaker's window (heldCounts).
const countEvery = 100 * time.Millisecond

// heldCounts keeps, by target, the successes this Writer has recorded and
// not yet counted into the target's breaker window. A batch whose outcomes
// of a target all succeeded, while the target's row as this Writer last
// counted into it had its breaker closed and no failing, has nothing for
// the breaker to decide: its successes are held, and counted with the
// target's next outcomes that fail, or that come countEvery or more after
// the first held. A drain of healthy targets then counts a few times a
// second, not once per batch. A failure's count holds every success
// recorded before it, so the window's failure rate is the one an
// immediate count gives; other processes' counts meanwhile miss at most
// countEvery of this Writer's successes, as the window is a measure, not a
// record (a crash loses them, as it may lose a batch's count).
//
// A probe's outcome is never held: a claim whose check found its target
// half-open marks the target not clear (unclear), so the probe's success is
// counted at once and healthSteps closes the breaker.
type heldCounts struct {
	mu sync.Mutex
	by map[string]heldCount
}

type heldCount struct {
	clear    bool
	requests int
	since    time.Time
	window   time.Duration
}

// take returns the tallies to count now: every tally that has failures,
// or whose target is not clear, or whose target's successes have been
// held countEvery, with the target's held successes added; it holds the
// others.
func (h *heldCounts) take(tallies []projection.OutcomeTally, now time.Time) []projection.OutcomeTally {
	if len(tallies) == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]heldCount{}
	}
	out := tallies[:0:0]
	for _, t := range tallies {
		c := h.by[t.Target]
		if t.Failures == 0 && c.clear && (c.requests == 0 || now.Sub(c.since) < countEvery) {
			if c.requests == 0 {
				c.since = now
			}
			c.requests += t.Requests
			c.window = t.Window
			h.by[t.Target] = c
			continue
		}
		if c.requests > 0 {
			t.Requests += c.requests
			t.Succeeded = true
			c.requests = 0
			h.by[t.Target] = c
		}
		out = append(out, t)
	}
	return out
}

// due takes the successes held countEvery or more at now, as tallies in
// the order of their targets.
func (h *heldCounts) due(now time.Time) []projection.OutcomeTally {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []projection.OutcomeTally
	for target, c := range h.by {
		if c.requests > 0 && now.Sub(c.since) >= countEvery {
			out = append(out, projection.OutcomeTally{Target: target, Window: c.window, Requests: c.requests, Succeeded: true})
			c.requests = 0
			h.by[target] = c
		}
	}
	slices.SortFunc(out, func(a, b projection.OutcomeTally) int { return cmpString(a.Target, b.Target) })
	return out
}

// CountHeld counts into the targets' breaker windows the successes this
// Writer has held countEvery or more (heldCounts), which its next outcomes
// of those targets would have counted: the sweep calls it every pass, so
// the successes of a target whose outcomes here have stopped are counted
// all the same.
func (w *Writer) CountHeld(ctx context.Context) error {
	now := w.now()
	tallies := w.uncounted.due(now)
	if len(tallies) == 0 {
		return nil
	}
	rows, err := projection.Count(ctx, w.db, tallies, now)
	if err != nil {
		return fmt.Errorf("count held successes: %w", err)
	}
	for _, h := range rows {
		w.learnHealth(h)
		w.uncounted.learn(h, false)
	}
	return nil
}

// learn records whether target's row, as a count left it, lets its
// successes be held: breaker closed, no failing, and no step called for.
func (h *heldCounts) learn(row projection.TargetHealth, stepped bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]heldCount{}
	}
	c := h.by[row.Target]
	c.clear = row.Breaker == lifecycle.HealthClosed && row.FailingSince.IsZero() && !stepped
	h.by[row.Target] = c
}

// unclear makes the targets' next outcomes count at once.
func (h *heldCounts) unclear(targets []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range targets {
		if c, ok := h.by[t]; ok {
			c.clear = false
			h.by[t] = c
		}
	}
}

// forget drops what is held of target, whose health starts afresh.
func (h *heldCounts) forget(target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.by, target)
}

// gates keeps, by target, the gate this Writer last read or wrote, and
// the end of an open breaker's cooldown: a batch leaves out the claims of
// a target whose gate lets none through, rather than have targets_admit
// refuse the whole batch. Beside it, what the target's limits came to
// (limits.go): when its bucket holds a token again, and until when a
// refusal by its limits holds its claims.
type gates struct {
	mu sync.Mutex
	by map[string]gateSeen
}

type gateSeen struct {
	gate  lifecycle.Gate
	until time.Time
	token time.Time
	full  time.Time
}

func (g *gates) update(target string, f func(*gateSeen)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = map[string]gateSeen{}
	}
	seen := g.by[target]
	f(&seen)
	g.by[target] = seen
}

func (g *gates) forget(target string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.by, target)
}

func (g *gates) get(target string) gateSeen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.by[target]
}

// shut reports whether the gate of target as last seen, or its limits,
// let no claim through at now.
func (g *gates) shut(target string, now time.Time) bool {
	seen := g.get(target)
	return seen.gate.Allowance(now, 1) == 0 || now.Before(seen.token) || now.Before(seen.full)
}

// heldFor is how long a target targets_admit refused is taken to be held
// by a Writer that has not read its gate since: its next choice of due
// deliveries reads it.
const heldFor = time.Second

// HeldUntil is when the health of target, and its rate, as this Writer
// last read them, let a claim through again: zero when they do now, or
// the Writer has not read them. A worker whose catch-up came back short
// catches up again then: at the end of a cooldown, of a receiver's hold,
// of a probe's lease, or when the target's bucket holds a token again.
func (w *Writer) HeldUntil(target string) time.Time {
	seen, now := w.gates.get(target), w.now()
	var until time.Time
	held := []time.Time{seen.token, seen.full}
	if seen.gate.Allowance(now, 1) == 0 {
		held = append(held, seen.gate.ThrottledUntil, seen.gate.ProbeUntil, seen.until)
	}
	for _, t := range held {
		if t.After(now) && t.After(until) {
			until = t
		}
	}
	if until.IsZero() && seen.gate.Breaker == lifecycle.HealthOpen {
		// The cooldown is over, but the step to half-open, which a
		// catch-up's claim takes, is not written yet (it failed, or it is
		// another process's and not read here): come back soon, not never.
		until = now.Add(heldFor)
	}
	return until
}

// targetHeld returns the target targets_admit refused a claim of because
// its health holds its deliveries.
func targetHeld(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == schema.CodeTargetHeld {
		return pgErr.Detail, true
	}
	return "", false
}

// holdTarget records a refusal of targetHeld: the target is taken to be
// held for heldFor, unless its gate as last read holds it already.
func (w *Writer) holdTarget(target string) {
	now := w.now()
	if w.gates.shut(target, now) {
		return
	}
	w.gates.update(target, func(seen *gateSeen) { seen.gate.ThrottledUntil = now.Add(heldFor) })
}

// healthStep is a change of a target's health that the counts of a
// transaction's outcomes, or a claim, call for; changeHealth decides it
// again on the row locked.
type healthStep struct {
	target string
	// trip: the window's counts may open the breaker; probe: the outcome
	// of a half-open breaker's probe, ok or not, of delivery; hold: the
	// receiver's request to be left alone; halfOpen: the cooldown is over.
	trip, probe, ok, halfOpen bool
	delivery                  uuid.UUID
	hold                      *lifecycle.Hold
	// disable: every attempt failed for the health's disable_after, the
	// last of delivery (of message); disableFailing runs it.
	disable bool
	message uuid.UUID
}

// decide is the event the step comes to on the health h of a target with
// breaker b (nil: off) at now, or nil when h no longer calls for one.
func (s healthStep) decide(h projection.TargetHealth, b *lifecycle.Breaker, now time.Time) journal.Payload {
	switch {
	case s.hold != nil:
		if s.hold.Until.After(h.ThrottledUntil) && s.hold.Until.After(now) {
			return &journal.TargetThrottled{Target: s.target, Until: s.hold.Until, StatusCode: s.hold.Status, DeliveryID: s.delivery}
		}
	case b == nil:
	case s.trip:
		if h.Breaker == lifecycle.HealthClosed && b.Trips(h.WindowRequests, h.WindowFailures) {
			return &journal.BreakerOpened{Target: s.target, Requests: h.WindowRequests, Failures: h.WindowFailures,
				Window: b.Window, Cooldown: b.Cooldown, Until: now.Add(b.Cooldown.D())}
		}
	case s.probe:
		if h.Breaker != lifecycle.HealthHalfOpen {
			return nil
		}
		if s.ok {
			return &journal.BreakerClosed{Target: s.target, DeliveryID: s.delivery}
		}
		cooldown := b.NextCooldown(h.Cooldown)
		return &journal.BreakerOpened{Target: s.target, Window: b.Window, Cooldown: lifecycle.Duration(cooldown),
			Until: now.Add(cooldown), Probe: true}
	case s.halfOpen:
		if h.Breaker == lifecycle.HealthOpen && !now.Before(h.Until) {
			return &journal.BreakerHalfOpened{Target: s.target}
		}
	}
	return nil
}

// tallies are the counts the outcomes among events make, by target, with
// each target's breaker window (its default when the configuration has
// none of it), in the order of their targets.
func tallies(events []journal.Event, cfg *configState) []projection.OutcomeTally {
	var out []projection.OutcomeTally
	for _, e := range events {
		p, ok := e.Payload.(*journal.DeliveryAttempted)
		if !ok {
			continue
		}
		i := slices.IndexFunc(out, func(t projection.OutcomeTally) bool { return t.Target == e.Target })
		if i < 0 {
			window := lifecycle.DefaultBreaker().Window.D()
			if t, ok := cfg.targets[e.Target]; ok && t.Health != nil && t.Health.Breaker != nil {
				window = t.Health.Breaker.Window.D()
			}
			out = append(out, projection.OutcomeTally{Target: e.Target, Window: window})
			i = len(out) - 1
		}
		out[i].Requests++
		if p.Outcome.Fails() {
			out[i].Failures++
		} else {
			out[i].Succeeded = true
		}
	}
	slices.SortFunc(out, func(a, b projection.OutcomeTally) int { return cmpString(a.Target, b.Target) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// healthSteps are the steps the rows as the tallies left them at now, and
// the outcomes among events, call for; leases holds the lease end each
// attempt ended by an outcome had (attemptLeases).
func healthSteps(rows []projection.TargetHealth, events []journal.Event, leases map[uuid.UUID]time.Time, cfg *configState,
	now time.Time) []healthStep {
	var steps []healthStep
	for _, e := range events {
		if p, ok := e.Payload.(*journal.DeliveryAttempted); ok && p.Outcome.Hold != nil {
			steps = append(steps, healthStep{target: e.Target, hold: p.Outcome.Hold, delivery: e.DeliveryID})
		}
	}
	for _, h := range rows {
		t, ok := cfg.targets[h.Target]
		if !ok || t.Health == nil {
			continue
		}
		if after := t.Health.DisableAfter; after != nil && t.Enabled && !h.FailingSince.IsZero() && !h.FailingSince.Add(after.D()).After(now) {
			s := healthStep{target: h.Target, disable: true}
			for _, e := range events {
				if _, ok := e.Payload.(*journal.DeliveryAttempted); ok && e.Target == h.Target {
					s.delivery, s.message = e.DeliveryID, uuid.MustParse(e.Stream)
				}
			}
			steps = append(steps, s)
		}
		if t.Health.Breaker == nil {
			continue
		}
		switch h.Breaker {
		case lifecycle.HealthClosed:
			if t.Health.Breaker.Trips(h.WindowRequests, h.WindowFailures) {
				steps = append(steps, healthStep{target: h.Target, trip: true})
			}
		case lifecycle.HealthHalfOpen:
			// Only the probe's outcome decides: the attempt targets_admit
			// let through half-open, whose lease end it recorded as
			// probe_until. An attempt claimed before the breaker opened
			// and ended since decides nothing.
			for _, e := range events {
				p, ok := e.Payload.(*journal.DeliveryAttempted)
				if ok && e.Target == h.Target && !h.ProbeUntil.IsZero() && leases[e.DeliveryID].Truncate(time.Microsecond).Equal(h.ProbeUntil) {
					steps = append(steps, healthStep{target: h.Target, probe: true, ok: !p.Outcome.Fails(), delivery: e.DeliveryID})
				}
			}
		}
	}
	return steps
}

// attemptLeases are the lease ends, as claimed, of the attempts whose
// outcomes changes record, by delivery.
func attemptLeases(changes []*change) map[uuid.UUID]time.Time {
	leases := map[uuid.UUID]time.Time{}
	for _, c := range changes {
		for _, e := range c.events {
			if _, ok := e.Payload.(*journal.DeliveryAttempted); ok && c.before != nil {
				if d := c.before.Delivery(e.DeliveryID); d != nil {
					leases[e.DeliveryID] = d.LeaseEnd
				}
			}
		}
	}
	return leases
}

// runHealthSteps runs the steps, each in a transaction of its own,
// logging what fails: the next outcomes call for them again.
func (w *Writer) runHealthSteps(steps []healthStep) {
	for _, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		if s.disable {
			err = w.disableFailing(ctx, s)
		} else {
			_, err = w.changeHealth(ctx, s.target, journal.WorkerActor(s.target), s.decide)
		}
		if err != nil {
			w.log.Warn("change of target health", "target", s.target, "err", err)
		}
		cancel()
	}
}

// changeHealth journals on target's health stream, by actor, the event
// decide makes of its health as locked, at the Writer's clock, and writes
// the health it comes to; nothing when decide returns nil. It takes the
// target's claim lock alone first, so every claim of the target commits
// before or after it, having checked the health it wrote. It returns the
// health as it leaves it; ErrNotFound for a target not configured.
func (w *Writer) changeHealth(ctx context.Context, target, actor string,
	decide func(projection.TargetHealth, *lifecycle.Breaker, time.Time) journal.Payload) (_ projection.TargetHealth, err error) {
	defer w.recovered(&err, "a change of target health")
	cfg, err := w.config(ctx)
	if err != nil {
		return projection.TargetHealth{}, err
	}
	spec, ok := cfg.targets[target]
	if !ok {
		return projection.TargetHealth{}, fmt.Errorf("target %s: %w", target, ErrNotFound)
	}
	var breaker *lifecycle.Breaker
	if spec.Health != nil {
		breaker = spec.Health.Breaker
	}
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return projection.TargetHealth{}, err
	}
	defer w.release(conn)
	var (
		h       projection.TargetHealth
		version int
	)
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT pg_advisory_xact_lock($1::int, hashtext($2))`, int32(schema.ClassTarget), target)
	projection.QueueLockHealth(b, target, &h)
	journal.QueueStreamVersion(b, journal.TargetStream(target), &version)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return projection.TargetHealth{}, fmt.Errorf("read the health of %s: %w", target, err)
	}
	now := w.now()
	p := decide(h, breaker, now)
	if p == nil {
		w.learnHealth(h)
		return h, nil // release ends the transaction
	}
	// The row may be behind the stream (a reset of the projections): the
	// stream decides the version.
	h.Version = version
	e := journal.Event{RecordedAt: now, Stream: journal.TargetStream(target), Version: version + 1, Actor: actor, Payload: p}
	if err := projection.ApplyHealth(&h, e); err != nil {
		return projection.TargetHealth{}, err
	}
	b = &pgx.Batch{}
	if err := journal.Queue(b, e); err != nil {
		return projection.TargetHealth{}, err
	}
	projection.QueueWriteHealth(b, h)
	b.Queue(`COMMIT`)
	if err := w.send(ctx, conn, b); err != nil {
		return projection.TargetHealth{}, fmt.Errorf("change the health of %s: %w", target, err)
	}
	w.learnHealth(h)
	return h, nil
}

// learnHealth keeps the gate of h, and its cooldown's end, as last read.
func (w *Writer) learnHealth(h projection.TargetHealth) {
	w.gates.update(h.Target, func(seen *gateSeen) { seen.gate, seen.until = h.Gate(), h.Until })
}

// CloseBreaker closes target's breaker by hand, journaled with actor, and
// returns the health it leaves; a closed breaker stays as it is.
// ErrNotFound for a target not configured.
func (w *Writer) CloseBreaker(ctx context.Context, target, actor string) (projection.TargetHealth, error) {
	if err := journal.CheckActor(actor); err != nil {
		return projection.TargetHealth{}, invalid(err)
	}
	h, err := w.changeHealth(ctx, target, actor, func(h projection.TargetHealth, _ *lifecycle.Breaker, _ time.Time) journal.Payload {
		if h.Breaker == lifecycle.HealthClosed {
			return nil
		}
		return &journal.BreakerClosed{Target: target}
	})
	if err != nil {
		return projection.TargetHealth{}, fmt.Errorf("close the breaker of %s: %w", target, err)
	}
	return h, nil
}

// breakerOf is target's breaker in cfg, nil when it has none.
func breakerOf(cfg *configState, target string) *lifecycle.Breaker {
	if t, ok := cfg.targets[target]; ok && t.Health != nil {
		return t.Health.Breaker
	}
	return nil
}

// disableFailing disables the step's target, whose attempts have all
// failed for its health's disable_after, as a 410 disables one (gone.go):
// under the target's claim lock held alone, with its row locked, once
// however many processes decide it (target.disabled, reason failing),
// unless it is disabled already or has succeeded since.
func (w *Writer) disableFailing(ctx context.Context, s healthStep) (err error) {
	defer w.recovered(&err, "a target disabled for failing")
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer w.release(conn)
	g := &goneRead{target: s.target}
	var h projection.TargetHealth
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT pg_advisory_xact_lock($1::int, hashtext($2))`, int32(schema.ClassTarget), s.target)
	g.queue(b)
	projection.QueueReadHealth(b, s.target, &h)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read target %s: %w", s.target, err)
	}
	if g.spec == nil || h.FailingSince.IsZero() {
		return nil // release ends the transaction
	}
	var t lifecycle.Target
	if err := json.Unmarshal(g.spec, &t); err != nil {
		return fmt.Errorf("read target %s: %w", s.target, err)
	}
	now := w.now()
	if !t.Enabled || t.Health == nil || t.Health.DisableAfter == nil || h.FailingSince.Add(t.Health.DisableAfter.D()).After(now) {
		return nil
	}
	t.Enabled = false
	spec, err := json.Marshal(t)
	if err != nil {
		return err
	}
	e := journal.Event{RecordedAt: now, Stream: journal.ConfigStream, Version: g.version + 1, Actor: journal.WorkerActor(t.Name),
		Payload: &journal.TargetDisabled{Target: t.Name, Reason: journal.DisabledFailing, MessageID: s.message,
			DeliveryID: s.delivery, FailingSince: h.FailingSince}}
	b = &pgx.Batch{}
	if err := journal.Queue(b, e); err != nil {
		return err
	}
	b.Queue(`UPDATE targets SET spec = $2, updated_at = $3 WHERE name = $1`, t.Name, spec, now)
	projection.QueueEndFailing(b, t.Name)
	b.Queue(`COMMIT`)
	if err := w.send(ctx, conn, b); err != nil {
		return fmt.Errorf("disable target %s: %w", t.Name, err)
	}
	w.tellDisabled()
	return nil
}
