package projection

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// TargetHealth is a target's row of target_health: the fold of its health
// stream (journal.TargetStream), and beside it what is not journaled,
// which the outcomes and the claims write: the end of a half-open
// breaker's probe, the breaker's window of outcomes, and since when every
// attempt failed. A target without a row is closed, with nothing counted.
type TargetHealth struct {
	Target string
	// Version is the last health event's version in the target's stream.
	Version int
	// Breaker is closed, open or half_open, since Since; Until is an open
	// breaker's end of cooldown, Cooldown the cooldown of its last opening.
	Breaker  lifecycle.HealthState
	Since    time.Time
	Until    time.Time
	Cooldown time.Duration
	// ThrottledUntil is the end of the receiver's last hold.
	ThrottledUntil time.Time
	// Not journaled.
	ProbeUntil     time.Time
	WindowStart    time.Time
	WindowRequests int
	WindowFailures int
	FailingSince   time.Time
}

// Gate is what the health says of the target's claims.
func (h TargetHealth) Gate() lifecycle.Gate {
	return lifecycle.Gate{Breaker: h.Breaker, ThrottledUntil: h.ThrottledUntil, ProbeUntil: h.ProbeUntil}
}

// ApplyHealth folds a health event of h's target into h. Opening and
// closing the breaker start its window again.
func ApplyHealth(h *TargetHealth, e journal.Event) error {
	if target, ok := journal.TargetOf(e.Stream); !ok || target != h.Target {
		return fmt.Errorf("event of stream %q folded into the health of %s", e.Stream, h.Target)
	}
	if e.Version != h.Version+1 {
		return fmt.Errorf("health of %s: event version %d after version %d", h.Target, e.Version, h.Version)
	}
	switch p := e.Payload.(type) {
	case *journal.BreakerOpened:
		h.Breaker, h.Since, h.Until, h.Cooldown = lifecycle.HealthOpen, e.RecordedAt, p.Until, p.Cooldown.D()
		h.ProbeUntil, h.WindowStart, h.WindowRequests, h.WindowFailures = time.Time{}, time.Time{}, 0, 0
	case *journal.BreakerHalfOpened:
		h.Breaker, h.Since, h.Until, h.ProbeUntil = lifecycle.HealthHalfOpen, e.RecordedAt, time.Time{}, time.Time{}
	case *journal.BreakerClosed:
		h.Breaker, h.Since, h.Until, h.Cooldown = lifecycle.HealthClosed, e.RecordedAt, time.Time{}, 0
		h.ProbeUntil, h.WindowStart, h.WindowRequests, h.WindowFailures = time.Time{}, time.Time{}, 0, 0
	case *journal.TargetThrottled:
		h.ThrottledUntil = p.Until
	default:
		return fmt.Errorf("health of %s: %s is not a health event", h.Target, e.Kind())
	}
	h.Version = e.Version
	return nil
}

const healthColumns = `target, version, breaker, since, until, cooldown_ms, throttled_until, probe_until,
	window_start, window_requests, window_failures, failing_since`

// scanHealth reads a row of healthColumns.
func scanHealth(row pgx.Row) (TargetHealth, error) {
	var (
		h                                                   TargetHealth
		breaker                                             string
		cooldown                                            int64
		since, until, throttled, probe, start, failingSince pgtype.Timestamptz
	)
	err := row.Scan(&h.Target, &h.Version, &breaker, &since, &until, &cooldown, &throttled, &probe,
		&start, &h.WindowRequests, &h.WindowFailures, &failingSince)
	h.Breaker, h.Cooldown = lifecycle.HealthState(breaker), time.Duration(cooldown)*time.Millisecond
	h.Since, h.Until, h.ThrottledUntil, h.ProbeUntil = since.Time, until.Time, throttled.Time, probe.Time
	h.WindowStart, h.FailingSince = start.Time, failingSince.Time
	return h, err
}

// nullTime is t for a timestamptz column, NULL when zero.
func nullTime(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

// QueueLockHealth queues the read of target's health, its row made when
// it has none and locked (FOR UPDATE) until the transaction ends; dst gets
// it once the batch is read.
func QueueLockHealth(b *pgx.Batch, target string, dst *TargetHealth) {
	b.Queue(`INSERT INTO target_health (target) VALUES ($1) ON CONFLICT DO NOTHING`, target)
	b.Queue(`SELECT `+healthColumns+` FROM target_health WHERE target = $1 FOR UPDATE`, target).
		QueryRow(func(row pgx.Row) (err error) {
			*dst, err = scanHealth(row)
			return err
		})
}

// QueueWriteHealth queues the write of h, whose row the transaction holds
// locked (QueueLockHealth).
func QueueWriteHealth(b *pgx.Batch, h TargetHealth) {
	b.Queue(`UPDATE target_health SET version = $2, breaker = $3, since = $4, until = $5, cooldown_ms = $6,
		throttled_until = $7, probe_until = $8, window_start = $9, window_requests = $10, window_failures = $11,
		failing_since = $12 WHERE target = $1`,
		h.Target, h.Version, string(h.Breaker), nullTime(h.Since), nullTime(h.Until), h.Cooldown.Milliseconds(),
		nullTime(h.ThrottledUntil), nullTime(h.ProbeUntil), nullTime(h.WindowStart), h.WindowRequests, h.WindowFailures,
		nullTime(h.FailingSince))
}

// ResetHealth is what the target.deleted of h's target leaves of h: a
// closed breaker, nothing counted, no hold, at the version its stream is
// at, so a target made again under the name starts afresh.
func ResetHealth(h *TargetHealth) {
	*h = TargetHealth{Target: h.Target, Version: h.Version, Breaker: lifecycle.HealthClosed}
}

// QueueResetHealth queues ResetHealth of target's row, if it has one, in
// the transaction that journals its target.deleted.
func QueueResetHealth(b *pgx.Batch, target string) {
	b.Queue(`UPDATE target_health SET breaker = 'closed', since = NULL, until = NULL, cooldown_ms = 0,
		throttled_until = NULL, probe_until = NULL, window_start = NULL, window_requests = 0, window_failures = 0,
		failing_since = NULL WHERE target = $1`, target)
}

// QueueEndFailing queues the end of target's failing: a target disabled
// for it counts afresh once enabled again.
func QueueEndFailing(b *pgx.Batch, target string) {
	b.Queue(`UPDATE target_health SET failing_since = NULL WHERE target = $1`, target)
}

// QueueReadHealth queues the read of target's health; dst gets it once
// the batch is read (closed, with nothing counted, for a target without a
// row).
func QueueReadHealth(b *pgx.Batch, target string, dst *TargetHealth) {
	*dst = TargetHealth{Target: target, Breaker: lifecycle.HealthClosed}
	b.Queue(`SELECT `+healthColumns+` FROM target_health WHERE target = $1`, target).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			h, err := scanHealth(rows)
			if err != nil {
				return err
			}
			*dst = h
		}
		return rows.Err()
	})
}

// OutcomeTally is what one transaction's outcomes of a target say to its breaker:
// how many attempts ended and how many of them failed, whether any
// succeeded, and the breaker's window.
type OutcomeTally struct {
	Target    string
	Window    time.Duration
	Requests  int
	Failures  int
	Succeeded bool
}

// countSettingsSQL begins the count's transactions: synchronous_commit
// off, and generic plans, which the connection keeps. Left to choose,
// PostgreSQL planned the UPDATE afresh at every call, which took longer
// than running it.
const countSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`

// QueueCount queues on b, after the COMMIT of the outcomes' transaction,
// the count of the tallies at now into the rows their targets have, in
// the order of their targets: a breaker that is not closed, and a window
// over, start the window at now; a success ends the failing, a failure
// starts it if none had. A half-open breaker's probe stays taken until
// the event its outcome calls for closes or opens the breaker: no second
// probe goes in between. The returned function gives the rows as written
// once b is read; a tally whose target has no row yet is left for
// CountMissing.
//
// After the COMMIT, the statements are an implicit transaction of their
// own in the same round trip, with synchronous_commit off: the row is one
// per target, so counting in the outcomes' transaction would hold it
// locked through their commit and queue every other batch of the target
// behind it. The counts are a measure, not a record (a rebuild starts
// them afresh), so a crash, or a count that fails once the outcomes have
// committed, may lose the last few.
func QueueCount(b *pgx.Batch, tallies []OutcomeTally, now time.Time) func() []TargetHealth {
	return queueCount(b, tallies, now, false)
}

// CountMissing makes, in a transaction of its own, the rows of the
// tallies' targets that counted (QueueCount's rows) lacks, and counts
// those tallies into them; it returns counted with the rows it wrote.
func CountMissing(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, tallies []OutcomeTally, counted []TargetHealth, now time.Time) ([]TargetHealth, error) {
	var missing []OutcomeTally
	for _, t := range tallies {
		if !slices.ContainsFunc(counted, func(h TargetHealth) bool { return h.Target == t.Target }) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return counted, nil
	}
	b := &pgx.Batch{}
	made := queueCount(b, missing, now, true)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return counted, fmt.Errorf("count outcomes into new target health rows: %w", err)
	}
	return append(counted, made()...), nil
}

// Count counts the tallies at now by themselves, in a round trip of their
// own (QueueCount's statements, then CountMissing's when a target has no
// row yet): what a Writer held back from its outcomes' transactions
// (commands.Writer.CountHeld).
func Count(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, tallies []OutcomeTally, now time.Time) ([]TargetHealth, error) {
	b := &pgx.Batch{}
	counted := QueueCount(b, tallies, now)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("count outcomes into target health: %w", err)
	}
	return CountMissing(ctx, db, tallies, counted(), now)
}

// queueCount queues the count's statements, preceded when insert is set
// by the insert of the targets' rows where missing.
func queueCount(b *pgx.Batch, tallies []OutcomeTally, now time.Time, insert bool) func() []TargetHealth {
	n := len(tallies)
	targets, windows, requests, failures, succeeded := make([]string, n), make([]int64, n), make([]int32, n), make([]int32, n), make([]bool, n)
	for i, t := range tallies {
		targets[i], windows[i], requests[i], failures[i], succeeded[i] = t.Target, t.Window.Milliseconds(), int32(t.Requests), int32(t.Failures), t.Succeeded
	}
	var out []TargetHealth
	b.Queue(countSettingsSQL)
	if insert {
		b.Queue(`INSERT INTO target_health (target) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING`, targets)
	}
	b.Queue(`UPDATE target_health h SET
			window_start = CASE WHEN x.fresh THEN $6 ELSE h.window_start END,
			window_requests = CASE WHEN x.fresh THEN 0 ELSE h.window_requests END + x.requests,
			window_failures = CASE WHEN x.fresh THEN 0 ELSE h.window_failures END + x.failures,
			failing_since = CASE WHEN x.succeeded THEN NULL ELSE coalesce(h.failing_since, $6) END
		FROM (SELECT t.*, g.breaker <> 'closed' OR g.window_start IS NULL OR g.window_start + t.window_ms * interval '1 ms' <= $6 AS fresh
			FROM unnest($1::text[], $2::bigint[], $3::int[], $4::int[], $5::bool[]) AS t(target, window_ms, requests, failures, succeeded)
			JOIN target_health g ON g.target = t.target ORDER BY t.target FOR UPDATE OF g) x
		WHERE h.target = x.target
		RETURNING h.target, h.version, h.breaker, h.since, h.until, h.cooldown_ms, h.throttled_until, h.probe_until,
			h.window_start, h.window_requests, h.window_failures, h.failing_since`,
		targets, windows, requests, failures, succeeded, now).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			h, err := scanHealth(rows)
			if err != nil {
				return err
			}
			out = append(out, h)
		}
		return rows.Err()
	})
	return func() []TargetHealth { return out }
}

// LoadHealth returns the health rows of targets, by target; a target
// without one is missing from the map.
func LoadHealth(ctx context.Context, q journal.Querier, targets []string) (map[string]TargetHealth, error) {
	rows, err := q.Query(ctx, `SELECT `+healthColumns+` FROM target_health WHERE target = ANY($1)`, targets)
	if err != nil {
		return nil, fmt.Errorf("read target health: %w", err)
	}
	out := map[string]TargetHealth{}
	for rows.Next() {
		h, err := scanHealth(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("read target health: %w", err)
		}
		out[h.Target] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read target health: %w", err)
	}
	return out, nil
}

// heldCountSQL counts a target's deliveries its health holds: those a worker
// could otherwise claim (lifecycle.CatchUpRule's states), on
// deliveries_claimable.
var heldCountSQL = `SELECT count(*) FROM deliveries WHERE target = $1 AND ` + lifecycle.CatchUpRule.StatesSQL("")

// WithHealth returns the targets with their health's figures filled in
// (lifecycle.Health's State and the rest) as they are at now, each on a
// copy of its Health; a held count only for a target that holds its
// deliveries.
func WithHealth(ctx context.Context, q journal.Querier, targets []lifecycle.Target, now time.Time) ([]lifecycle.Target, error) {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	rows, err := LoadHealth(ctx, q, names)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Target, len(targets))
	for i, t := range targets {
		var h lifecycle.Health
		if t.Health != nil {
			h = *t.Health
		}
		row, ok := rows[t.Name]
		if !ok {
			row = TargetHealth{Target: t.Name, Breaker: lifecycle.HealthClosed}
		}
		h.State, h.Since, h.Until, h.FailingSince = row.Breaker, row.Since, row.Until, row.FailingSince
		rate := 0.0
		if row.WindowRequests > 0 && row.Breaker == lifecycle.HealthClosed {
			rate = float64(row.WindowFailures) / float64(row.WindowRequests)
		}
		h.FailureRate = &rate
		switch {
		case !t.Enabled:
			h.State, h.Until = lifecycle.HealthDisabled, time.Time{}
		case row.Breaker == lifecycle.HealthClosed && now.Before(row.ThrottledUntil):
			h.State, h.Until = lifecycle.HealthThrottled, row.ThrottledUntil
		}
		held := 0
		if !t.Enabled || row.Gate().Allowance(now, 1) == 0 {
			r, err := q.Query(ctx, heldCountSQL, t.Name)
			if err == nil {
				held, err = pgx.CollectExactlyOneRow(r, pgx.RowTo[int])
			}
			if err != nil {
				return nil, fmt.Errorf("count the held deliveries of %s: %w", t.Name, err)
			}
		}
		h.Held = &held
		t.Health = &h
		out[i] = t
	}
	return out, nil
}
