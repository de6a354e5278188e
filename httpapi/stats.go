package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// messageStatsSQL counts ranges of indexes: messages_status_created (by
// status, then created_at) and messages_created. The messages in flight
// are the unsettled ones; the failed ones are those that faulted.
var messageStatsSQL = `SELECT
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(unsettled)) + `),
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(lifecycle.MessageStatus.Faulted)) + ` AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE ` + lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{lifecycle.StatusRefused}) + ` AND created_at >= $1),
	(SELECT count(*) FROM messages WHERE created_at >= $2)`

func unsettled(s lifecycle.MessageStatus) bool { return !s.Settled() }

// stats answers the figures of the dashboard.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	now := s.cfg.Now().UTC()
	var out Stats
	b := &pgx.Batch{}
	b.Queue(messageStatsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	due := projection.QueueDue(b, now)
	byState := projection.QueueCounts(b)
	if err := s.cfg.DB.SendBatch(r.Context(), b).Close(); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	out.DeliveriesByState = byState()
	var oldest time.Time
	out.DueDeliveries, oldest = due()
	if !oldest.IsZero() {
		out.OldestDueSeconds = max(0, now.Sub(oldest).Seconds())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
