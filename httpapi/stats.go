package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/projection"
)

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

// stats answers the figures of the dashboard.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	now := s.cfg.Now().UTC()
	var (
		out    Stats
		oldest *time.Time
	)
	b := &pgx.Batch{}
	b.Queue(messageStatsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	b.Queue(dueSQL, now).QueryRow(func(row pgx.Row) error { return row.Scan(&out.DueDeliveries, &oldest) })
	byState := projection.QueueCounts(b)
	if err := s.cfg.DB.SendBatch(r.Context(), b).Close(); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	out.DeliveriesByState = byState()
	if oldest != nil {
		out.OldestDueSeconds = max(0, now.Sub(*oldest).Seconds())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
