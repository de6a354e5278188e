package projection

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/lifecycle"
)

// Stats are the figures of the dashboard, as GET /stats and the console
// show them.
type Stats struct {
	// InFlightMessages are the messages not settled (received, in
	// progress, retrying, blocked or awaiting their receipt), whenever
	// they were created.
	InFlightMessages int64
	// FailedLast24h are the messages created in the last 24 hours that
	// have faulted: in error or stalled now.
	FailedLast24h int64
	// RefusedLast24h are the messages created in the last 24 hours that
	// were refused.
	RefusedLast24h int64
	// MessagesLast7d are the messages created in the last 7 days.
	MessagesLast7d int64
	// DeliveriesByState counts the deliveries in each state; every state
	// has an entry.
	DeliveriesByState map[lifecycle.DeliveryState]int64
	// DueDeliveries are queued or retrying deliveries whose wake-up is due.
	DueDeliveries int64
	// OldestDue is how long the most overdue of them has been due; 0 when
	// none is.
	OldestDue time.Duration
	// Targets are the figures of each target that has had a delivery, by
	// name.
	Targets []TargetStats
}

// TargetStats are the figures of one target.
type TargetStats struct {
	Target string
	// InFlight are its deliveries Waybill is still at work on
	// (lifecycle.DeliveryState.InFlight), of the current generations.
	InFlight int64
	// FailedLast24h are its deliveries, of messages created in the last
	// 24 hours, that are now failed or stalled.
	FailedLast24h int64
	// OldestDue is how long its most overdue delivery due for a wake-up
	// has been due; 0 when none is.
	OldestDue time.Duration
}

// targetStatsSQL reads each target's figures: in flight, a sum of its kept
// counts; failed in the last day ($1 on), a range of deliveries_faulted;
// and the state and next_due of the delivery lifecycle.WakeRule would wake
// first: the first of its queued or retrying deliveries in
// deliveries_claimable, which orders them by their next_due (the fold gives
// every queued or retrying delivery one). That is one index entry whatever
// the backlog. A condition on next_due would let the planner walk every
// due delivery of every target on deliveries_due instead, and sort them,
// which it did whenever its estimate of a target's share was low. The
// targets are those the kept counts name: every target that has had a
// delivery.
var targetStatsSQL = `SELECT t.target,
	(SELECT coalesce(sum(c.n), 0)::bigint FROM delivery_counts c WHERE c.target = t.target AND ` +
	lifecycle.StatusesSQL("c.state", lifecycle.StatesWhere(lifecycle.DeliveryState.InFlight)) + `),
	(SELECT count(*) FROM deliveries d WHERE d.target = t.target AND ` +
	lifecycle.StatusesSQL("d.state", lifecycle.StatesWhere(lifecycle.DeliveryState.Faulted)) + ` AND d.message_created_at >= $1),
	first.state, first.next_due
	FROM (SELECT DISTINCT target FROM delivery_counts) t ` + firstDueSQL + `
	ORDER BY t.target`

// firstDueSQL joins to each target t the state and next_due of the
// delivery lifecycle.WakeRule would wake first (oldestDue judges it).
var firstDueSQL = `LEFT JOIN LATERAL (SELECT d.state, d.next_due FROM deliveries d WHERE d.target = t.target AND ` +
	lifecycle.WakeRule.StatesSQL("d") + `
		ORDER BY coalesce(d.next_due, d.lease_end, d.updated_at) LIMIT 1) first ON true`

// oldestDue is how long the delivery of firstDueSQL, in state and due at
// next, has been due at now; 0 when it is not due, or there is none.
func oldestDue(now time.Time, state lifecycle.DeliveryState, next time.Time) time.Duration {
	if f := (lifecycle.Facts{State: state, NextDue: next}); lifecycle.WakeRule.Holds(f, now) {
		return overdue(now, f.NextDue)
	}
	return 0
}

// messageStatsSQL sums the kept counts of messages (Tally): by status for
// the messages in flight, by status and hour of creation for the windows
// (by hour alone, anyStatus, for the 7 days). A window ($1 or $3) that
// begins inside an hour counts that hour's messages from its start to the
// next whole hour ($2 or $4) from the messages themselves, a range of
// messages_status_created or messages_created: the kept counts hold whole
// hours. The statuses are the lifecycle's sets: the unsettled ones, the
// faulted ones.
var messageStatsSQL = `SELECT
	(SELECT coalesce(sum(n), 0)::bigint FROM message_counts WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(unsettled)) + `),
	(SELECT coalesce(sum(n), 0)::bigint FROM message_hour_counts WHERE hour >= $2 AND ` + faulted + `)
		+ (SELECT count(*) FROM messages WHERE ` + faulted + ` AND created_at >= $1 AND created_at < $2),
	(SELECT coalesce(sum(n), 0)::bigint FROM message_hour_counts WHERE hour >= $2 AND ` + refused + `)
		+ (SELECT count(*) FROM messages WHERE ` + refused + ` AND created_at >= $1 AND created_at < $2),
	(SELECT coalesce(sum(n), 0)::bigint FROM message_hour_counts WHERE ` + lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{anyStatus}) + ` AND hour >= $4)
		+ (SELECT count(*) FROM messages WHERE created_at >= $3 AND created_at < $4)`

var (
	faulted = lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(lifecycle.MessageStatus.Faulted))
	refused = lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{lifecycle.StatusRefused})
)

// hourFrom is the first whole hour at or after t: a window from t sums the
// kept counts from there.
func hourFrom(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

func unsettled(s lifecycle.MessageStatus) bool { return !s.Settled() }

// BatchSender is what ReadStats needs of a pool or a connection.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ReadStats reads the figures with their windows ending at now, in one
// round trip. No figure counts more than an hour of messages: the message
// figures and the deliveries by state sum the kept counts, and a window
// that begins inside an hour counts the rest of that hour from the
// messages.
func ReadStats(ctx context.Context, db BatchSender, now time.Time) (Stats, error) {
	// The database keeps microseconds: the windows begin where its
	// comparisons put them.
	now = now.UTC().Truncate(time.Microsecond)
	day, week := now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)
	var out Stats
	b := &pgx.Batch{}
	b.Queue(messageStatsSQL, day, hourFrom(day), week, hourFrom(week)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	due := QueueDue(b, now)
	byState := QueueCounts(b)
	b.Queue(targetStatsSQL, day).Query(func(rows pgx.Rows) error {
		var (
			t     TargetStats
			state pgtype.Text
			next  pgtype.Timestamptz
		)
		_, err := pgx.ForEachRow(rows, []any{&t.Target, &t.InFlight, &t.FailedLast24h, &state, &next}, func() error {
			t.OldestDue = oldestDue(now, lifecycle.DeliveryState(state.String), timeOf(next))
			out.Targets = append(out.Targets, t)
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	out.DeliveriesByState = byState()
	var oldest time.Time
	out.DueDeliveries, oldest = due()
	out.OldestDue = overdue(now, oldest)
	return out, nil
}

// overdue is how long before now due was, 0 for the zero time (none due).
func overdue(now, due time.Time) time.Duration {
	if due.IsZero() {
		return 0
	}
	return max(0, now.Sub(due))
}
