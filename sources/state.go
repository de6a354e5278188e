package sources

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
)

// This file holds every statement on the sources' running state, the
// tables source_state and inbox_markers (schema/sources.go): the commands
// queue theirs into the batch of their transaction, the runtime, the API
// and the audit run theirs on a Querier. No other package writes SQL on
// these tables.

// Querier is where the statements on a source's state run: a pool, a
// connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// QueueCreateState adds to b the state row of a new source: no holder, a
// watermark of 0, never polled.
func QueueCreateState(b *pgx.Batch, name string) {
	b.Queue(`INSERT INTO source_state (name) VALUES ($1)`, name)
}

// QueueDeleteState adds to b the removal of a source's state: its lease,
// its watermark and the markers it still owes, which are never written.
func QueueDeleteState(b *pgx.Batch, name string) {
	b.Queue(`DELETE FROM source_state WHERE name = $1`, name)
	b.Queue(`DELETE FROM inbox_markers WHERE source = $1`, name)
}

// raiseWatermarkSQL moves an inbox's watermark on to $2; it never lowers
// it, so a stale writer cannot undo another's progress.
const raiseWatermarkSQL = `UPDATE source_state SET watermark = greatest(watermark, $2) WHERE name = $1`

// QueuePassHole adds to b the raise of a source's watermark to w (a lower
// w changes nothing) for a hole passed in the transaction that journals
// it, by holder: a holder that no longer holds the source fails the
// transaction with schema.CodeSourceNotHeld.
func QueuePassHole(b *pgx.Batch, name, holder string, w int64) {
	b.Queue(`SELECT source_pass_hole($1, $2, $3)`, name, holder, w)
}

// RaiseWatermark raises a source's watermark to w (a lower w changes
// nothing).
func RaiseWatermark(ctx context.Context, q Querier, name string, w int64) error {
	if _, err := q.Exec(ctx, raiseWatermarkSQL, name, w); err != nil {
		return fmt.Errorf("raise watermark of source %s: %w", name, err)
	}
	return nil
}

// QueueMarkerOwed adds to b that the processed marker of the inbox row id
// of source is owed, since now and due at once: it is queued in the
// transaction that stores the row's message, msg.
func QueueMarkerOwed(b *pgx.Batch, source string, id int64, msg uuid.UUID, now time.Time) {
	b.Queue(`INSERT INTO inbox_markers (source, row_id, message_id, owed_since, next_try) VALUES ($1, $2, $3, $4, $4)`,
		source, id, msg, now)
}

// TakeLease takes the lease of a source for holder until until, when
// nobody holds it, it ran out by now, or holder holds it already (which
// renews it), and returns the source's watermark. held is false when
// another process holds the lease, or the source is gone (its row is made
// with the source and deleted with it).
func TakeLease(ctx context.Context, q Querier, name, holder string, until, now time.Time) (watermark int64, held bool, err error) {
	err = q.QueryRow(ctx, `UPDATE source_state SET holder = $2, lease_end = $3
		WHERE name = $1 AND (holder IS NULL OR holder = $2 OR lease_end <= $4)
		RETURNING watermark`, name, holder, until, now).Scan(&watermark)
	switch {
	case err == nil:
		return watermark, true, nil
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("take lease of source %s: %w", name, err)
}

// ReleaseLease gives back holder's lease of a source, so another process
// may take it at once; a lease holder no longer holds is left alone.
func ReleaseLease(ctx context.Context, q Querier, name, holder string) error {
	_, err := q.Exec(ctx, `UPDATE source_state SET holder = NULL, lease_end = NULL WHERE name = $1 AND holder = $2`,
		name, holder)
	if err != nil {
		return fmt.Errorf("release lease of source %s: %w", name, err)
	}
	return nil
}

// RecordPoll records a poll made at at in the source's state: the backlog
// it found and, when problem is not nil, the problem as the last error.
// It changes nothing unless holder holds the source.
func RecordPoll(ctx context.Context, q Querier, name, holder string, at time.Time, backlog int64, problem *string) error {
	_, err := q.Exec(ctx, `UPDATE source_state SET last_poll_at = $3, backlog = $4,
		last_error = coalesce($5, last_error), last_error_at = CASE WHEN $5::text IS NULL THEN last_error_at ELSE $3 END
		WHERE name = $1 AND holder = $2`, name, holder, at, backlog, problem)
	if err != nil {
		return fmt.Errorf("record poll of source %s: %w", name, err)
	}
	return nil
}

// MarkersDue returns, in id order and at most limit, the rows of source
// whose marker is due by now, or owed since forceBefore or earlier
// whatever its back-off.
func MarkersDue(ctx context.Context, q Querier, source string, now, forceBefore time.Time, limit int) ([]int64, error) {
	rows, err := q.Query(ctx, `SELECT row_id FROM inbox_markers
		WHERE source = $1 AND (next_try <= $2 OR owed_since <= $3) ORDER BY row_id LIMIT $4`,
		source, now, forceBefore, limit)
	if err != nil {
		return nil, fmt.Errorf("read markers owed of source %s: %w", source, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read markers owed of source %s: %w", source, err)
	}
	return ids, nil
}

// MarkersFailed records that writing the markers of the rows ids of source
// failed at now with problem: each is tried again after backoff, doubled
// for every earlier failure, up to maxBackoff.
func MarkersFailed(ctx context.Context, q Querier, source string, ids []int64, now time.Time, problem string,
	backoff, maxBackoff time.Duration) error {
	_, err := q.Exec(ctx, `UPDATE inbox_markers SET tries = tries + 1, last_error = $4,
		next_try = $3::timestamptz + least($5::interval * power(2, tries), $6::interval)
		WHERE source = $1 AND row_id = ANY($2)`, source, ids, now, problem, backoff, maxBackoff)
	if err != nil {
		return fmt.Errorf("record failed markers of source %s: %w", source, err)
	}
	return nil
}

// ForgetMarkers drops the markers of the rows ids of source, once written.
func ForgetMarkers(ctx context.Context, q Querier, source string, ids []int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM inbox_markers WHERE source = $1 AND row_id = ANY($2)`, source, ids); err != nil {
		return fmt.Errorf("forget markers written of source %s: %w", source, err)
	}
	return nil
}

// MarkersOwed counts the markers source owes.
func MarkersOwed(ctx context.Context, q Querier, source string) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM inbox_markers WHERE source = $1`, source).Scan(&n); err != nil {
		return 0, fmt.Errorf("count markers owed of source %s: %w", source, err)
	}
	return n, nil
}

// State is a source's running state as stored.
type State struct {
	// Holder is the process that holds the lease until LeaseEnd; nil when
	// none does.
	Holder   *string
	LeaseEnd *time.Time
	// LastPollAt is the last poll's time, nil before the first; LastError
	// the last problem and LastErrorAt its time, nil when there was none.
	LastPollAt  *time.Time
	LastError   *string
	LastErrorAt *time.Time
	// Backlog is what the last poll found still to take.
	Backlog int64
	// Watermark and MarkersOwed are an inbox's, 0 for other kinds.
	Watermark   int64
	MarkersOwed int64
}

// States reads the state of the source name, or of every source when name
// is empty, by name.
func States(ctx context.Context, q Querier, name string) (map[string]State, error) {
	one := &name // one source's state is one row to read
	if name == "" {
		one = nil
	}
	rows, err := q.Query(ctx, `SELECT st.name, st.holder, st.lease_end, st.last_poll_at, st.last_error, st.last_error_at,
		st.backlog, st.watermark, (SELECT count(*) FROM inbox_markers m WHERE m.source = st.name)
		FROM source_state st WHERE $1::text IS NULL OR st.name = $1`, one)
	if err != nil {
		return nil, fmt.Errorf("read the sources' state: %w", err)
	}
	out := map[string]State{}
	var (
		n  string
		st State
	)
	_, err = pgx.ForEachRow(rows, []any{&n, &st.Holder, &st.LeaseEnd, &st.LastPollAt, &st.LastError, &st.LastErrorAt,
		&st.Backlog, &st.Watermark, &st.MarkersOwed}, func() error {
		out[n] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the sources' state: %w", err)
	}
	return out, nil
}

// Watermarks reads the watermark of every source, by name. It takes a
// journal.Querier, so the audit reads it in the snapshot it reads the
// journal in.
func Watermarks(ctx context.Context, q journal.Querier) (map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT name, watermark FROM source_state`)
	if err != nil {
		return nil, fmt.Errorf("read the sources' watermarks: %w", err)
	}
	out := map[string]int64{}
	var (
		name string
		w    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &w}, func() error {
		out[name] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the sources' watermarks: %w", err)
	}
	return out, nil
}
