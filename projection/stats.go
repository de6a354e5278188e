package projection

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// Stats are the figures of the dashboard, as GET /stats and the console
// show them.
type Stats struct {
	// InFlightMessages are received, in progress, retrying or awaiting
	// their receipt, whenever they were created.
	InFlightMessages int64
	// FailedLast24h are the messages created in the last 24 hours that are
	// now in error or stalled.
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
}

// messageStatsSQL counts ranges of indexes: messages_status_created (by
// status, then created_at) and messages_created.
const messageStatsSQL = `SELECT
	(SELECT count(*) FROM messages WHERE status IN ('received', 'in_progress', 'retrying', 'awaiting_receipt')),
	(SELECT count(*) FROM messages WHERE status IN ('error', 'stalled') AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE status = 'refused' AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE created_at >= $2)`

// dueSQL is the range of deliveries_due the sweep's gauges read: the queued
// and retrying deliveries whose wake-up is due.
const dueSQL = `SELECT count(*), min(next_due) FROM deliveries
	WHERE state IN ('queued', 'retrying') AND next_due <= $1`

// BatchSender is what ReadStats needs of a pool or a connection.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ReadStats reads the figures with their windows ending at now, in one
// round trip. No figure counts a whole table: the message figures are
// ranges of an index, the deliveries by state the kept counts.
func ReadStats(ctx context.Context, db BatchSender, now time.Time) (Stats, error) {
	now = now.UTC()
	var (
		out    Stats
		oldest *time.Time
	)
	b := &pgx.Batch{}
	b.Queue(messageStatsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	b.Queue(dueSQL, now).QueryRow(func(row pgx.Row) error { return row.Scan(&out.DueDeliveries, &oldest) })
	byState := QueueCounts(b)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	out.DeliveriesByState = byState()
	if oldest != nil {
		out.OldestDue = max(0, now.Sub(*oldest))
	}
	return out, nil
}
