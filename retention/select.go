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
	// removalSQL walks messages_status_created from the cursor ($3, $4:
	// the created_at and id of the last message a pass considered), so
	// that messages left for now (pinned, or not folding) do not keep the
	// pass from those after them.
	removalSQL = bySettledStatus(lifecycle.SettledStatuses(), `(created_at, id) > ($3::timestamptz, $4::uuid) AND `)
)

func bySettledStatus(statuses []lifecycle.MessageStatus, more string) map[lifecycle.MessageStatus]string {
	out := map[lifecycle.MessageStatus]string{}
	for _, s := range statuses {
		out[s] = `SELECT id, created_at FROM messages WHERE ` + lifecycle.StatusesSQL("status", []lifecycle.MessageStatus{s}) +
			` AND ` + more + `created_at <= $1 AND updated_at <= $1 ORDER BY created_at, id LIMIT $2`
	}
	return out
}

// cursor is a place in the order of created_at and id.
type cursor struct {
	createdAt time.Time
	id        uuid.UUID
}

// due runs sql, a selection of the messages due (its arguments: the
// cutoff, the limit and, for removalSQL, the cursor), and returns their ids
// and the place of the last.
func due(ctx context.Context, q journal.Querier, sql string, args ...any) ([]uuid.UUID, cursor, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, cursor{}, err
	}
	var (
		ids  []uuid.UUID
		last cursor
	)
	_, err = pgx.ForEachRow(rows, []any{&last.id, &last.createdAt}, func() error {
		ids = append(ids, last.id)
		return nil
	})
	if err != nil {
		return nil, cursor{}, fmt.Errorf("select the messages due: %w", err)
	}
	return ids, last, nil
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
