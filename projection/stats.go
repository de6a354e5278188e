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
}

// messageStatsSQL counts ranges of indexes: messages_status_created (by
// status, then created_at) and messages_created. The statuses are the
// lifecycle's sets: the unsettled ones, the faulted ones.
var messageStatsSQL = `SELECT
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(unsettled)) + `),
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(lifecycle.MessageStatus.Faulted)) + ` AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{lifecycle.StatusRefused}) + ` AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE created_at >= $2)`

func unsettled(s lifecycle.MessageStatus) bool { return !s.Settled() }

// BatchSender is what ReadStats needs of a pool or a connection.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ReadStats reads the figures with their windows ending at now, in one
// round trip. No figure counts a whole table: the message figures are
// ranges of an index, the deliveries by state the kept counts.
func ReadStats(ctx context.Context, db BatchSender, now time.Time) (Stats, error) {
	now = now.UTC()
	var out Stats
	b := &pgx.Batch{}
	b.Queue(messageStatsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	due := QueueDue(b, now)
	byState := QueueCounts(b)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	out.DeliveriesByState = byState()
	var oldest time.Time
	out.DueDeliveries, oldest = due()
	if !oldest.IsZero() {
		out.OldestDue = max(0, now.Sub(oldest))
	}
	return out, nil
}
