package projection

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
	// removalSQL walks messages_status_created from the place ($3, $4:
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

// DueAt is a message's place in the order of created_at and id, the
// order retention takes messages in; the zero DueAt is before every one.
type DueAt struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// PayloadsDue returns up to limit messages of status (one of
// lifecycle.ExpungeStatuses) that hold their payload and whose last
// transition is not after cutoff, oldest first: those whose payload
// retention may expunge.
func PayloadsDue(ctx context.Context, q journal.Querier, status lifecycle.MessageStatus, cutoff time.Time, limit int) ([]uuid.UUID, error) {
	ids, _, err := due(ctx, q, expungeSQL, status, cutoff, limit)
	return ids, err
}

// RemovalsDue returns up to limit messages of status (one of
// lifecycle.SettledStatuses) whose last transition is not after cutoff,
// oldest first from after on, and the place of the last: those retention
// may remove.
func RemovalsDue(ctx context.Context, q journal.Querier, status lifecycle.MessageStatus, cutoff time.Time, limit int,
	after DueAt) ([]uuid.UUID, DueAt, error) {
	return due(ctx, q, removalSQL, status, cutoff, limit, after.CreatedAt, after.ID)
}

// due runs the selection of the messages of status due, and returns their
// ids and the place of the last.
func due(ctx context.Context, q journal.Querier, sqls map[lifecycle.MessageStatus]string, status lifecycle.MessageStatus,
	cutoff time.Time, limit int, more ...any) ([]uuid.UUID, DueAt, error) {
	sql, ok := sqls[status]
	if !ok {
		return nil, DueAt{}, fmt.Errorf("select the messages due: retention takes no message of status %s", status)
	}
	rows, err := q.Query(ctx, sql, append([]any{cutoff, limit}, more...)...)
	if err != nil {
		return nil, DueAt{}, fmt.Errorf("select the messages due: %w", err)
	}
	var (
		ids  []uuid.UUID
		last DueAt
	)
	_, err = pgx.ForEachRow(rows, []any{&last.ID, &last.CreatedAt}, func() error {
		ids = append(ids, last.ID)
		return nil
	})
	if err != nil {
		return nil, DueAt{}, fmt.Errorf("select the messages due: %w", err)
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

// OldestSettled returns the creation of the oldest message of each settled
// status that holds one.
func OldestSettled(ctx context.Context, q journal.Querier) (map[lifecycle.MessageStatus]time.Time, error) {
	rows, err := q.Query(ctx, oldestSQL)
	oldest := map[lifecycle.MessageStatus]time.Time{}
	if err == nil {
		var (
			status lifecycle.MessageStatus
			at     *time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&status, &at}, func() error {
			if at != nil {
				oldest[status] = *at
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("read the oldest settled messages: %w", err)
	}
	return oldest, nil
}
