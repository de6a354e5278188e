package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// statsSQL counts on indexes only. The message figures are ranges of
// messages_status_created (by status, then created_at) and of
// messages_created; the due deliveries a range of deliveries_due, as the
// sweep reads them.
const statsSQL = `SELECT
	(SELECT count(*) FROM messages WHERE status IN ('received', 'in_progress', 'retrying', 'awaiting_receipt')),
	(SELECT count(*) FROM messages WHERE status IN ('error', 'stalled') AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE status = 'refused' AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE created_at >= $2),
	(SELECT count(*) FROM deliveries WHERE state IN ('queued', 'retrying') AND next_due <= $3),
	(SELECT min(next_due) FROM deliveries WHERE state IN ('queued', 'retrying') AND next_due <= $3)`

// deliveriesByStateSQL is the one figure that reads every delivery: a
// GROUP BY over the deliveries_target_state index, which the sweep's gauge
// reads too.
const deliveriesByStateSQL = `SELECT state, count(*) FROM deliveries GROUP BY state`

// stats answers the figures of the dashboard.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	now := s.cfg.Now().UTC()
	out := Stats{DeliveriesByState: make(map[lifecycle.DeliveryState]int64, len(lifecycle.DeliveryStates))}
	for _, state := range lifecycle.DeliveryStates {
		out.DeliveriesByState[state] = 0
	}
	var oldest *time.Time
	b := &pgx.Batch{}
	b.Queue(statsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour), now).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d,
			&out.DueDeliveries, &oldest)
	})
	b.Queue(deliveriesByStateSQL).Query(func(rows pgx.Rows) error {
		var (
			state lifecycle.DeliveryState
			n     int64
		)
		_, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
			out.DeliveriesByState[state] = n
			return nil
		})
		return err
	})
	if err := s.cfg.DB.SendBatch(r.Context(), b).Close(); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if oldest != nil {
		out.OldestDueSeconds = max(0, now.Sub(*oldest).Seconds())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
