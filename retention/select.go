package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// The statements that select messages by retention's rule, one per status,
// built from the lists lifecycle derives: a status is a literal the
// planner sees, so each query is a range of one index, oldest first.
// $1 is the cutoff (now less the period: a message whose last transition
// is not after it is due) and $2 the limit. created_at is never after
// updated_at, so bounding it too narrows the range to what may be due.
var (
	// expungeSQL walks messages_payload_held.
	expungeSQL = bySettledStatus(lifecycle.ExpungeStatuses(), `NOT payload_expunged AND `)
	// removalSQL walks messages_status_created.
	removalSQL = bySettledStatus(lifecycle.SettledStatuses(), ``)
)

func bySettledStatus(statuses []lifecycle.MessageStatus, more string) map[lifecycle.MessageStatus]string {
	out := map[lifecycle.MessageStatus]string{}
	for _, s := range statuses {
		out[s] = `SELECT id FROM messages WHERE ` + lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{s}) +
			` AND ` + more + `created_at <= $1 AND updated_at <= $1 ORDER BY created_at, id LIMIT $2`
	}
	return out
}

// due returns up to limit ids that sql selects at cutoff.
func due(ctx context.Context, q journal.Querier, sql string, cutoff time.Time, limit int) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, sql, cutoff, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// oldestSQL finds the creation of the oldest message in each settled
// status, a first entry of messages_status_created each.
var oldestSQL = func() string {
	sql := ``
	for i, s := range lifecycle.SettledStatuses() {
		if i > 0 {
			sql += ` UNION ALL `
		}
		sql += fmt.Sprintf(`(SELECT '%s', min(created_at) FROM messages WHERE %s)`, s,
			lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{s}))
	}
	return sql
}()
