package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/lifecycle"
)

// Querier is what the reads need of a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// versionConstraint is the unique index on (stream, version).
const versionConstraint = "journal_stream_version_key"

// IsVersionConflict reports whether err is the unique violation of a stream
// version, raised when two writers append the same version.
func IsVersionConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == versionConstraint
}

const insertSQL = `INSERT INTO journal
	(recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// Queue validates e and queues its insert on b, the batch of the command's
// transaction. Nothing is queued when e is invalid.
func Queue(b *pgx.Batch, e Event) error {
	if e.Payload == nil {
		return fmt.Errorf("append to %s: event has no payload", e.Stream)
	}
	if err := e.CheckEnvelope(); err != nil {
		return fmt.Errorf("append %s to %s: %w", e.Kind(), e.Stream, err)
	}
	data, err := Encode(e.Payload)
	if err != nil {
		return fmt.Errorf("append to %s: %w", e.Stream, err)
	}
	b.Queue(insertSQL, e.RecordedAt, e.Stream, e.Version, nullUUID(e.DeliveryID), nullString(e.Target),
		string(e.Kind()), e.Actor, nullString(string(e.OldState)), nullString(string(e.NewState)), data)
	return nil
}

// columns are the columns an Event is read from, in scan's order.
const columns = `position, recorded_at, stream, version, delivery_id, coalesce(target, ''),
	kind, actor, coalesce(old_state, ''), coalesce(new_state, ''), payload`

const selectSQL = `SELECT ` + columns + ` FROM journal `

// Stream returns the events of one stream in order: a message's history.
func Stream(ctx context.Context, q Querier, stream string) ([]Event, error) {
	var events []Event
	err := scan(ctx, q, selectSQL+`WHERE stream = $1 ORDER BY version`, []any{stream}, func(e Event) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	return events, nil
}

// Scan calls fn with every event from position from on, in position order,
// streaming the rows; it stops at fn's first error and returns it.
func Scan(ctx context.Context, q Querier, from int64, fn func(Event) error) error {
	if err := scan(ctx, q, selectSQL+`WHERE position >= $1 ORDER BY position`, []any{from}, fn); err != nil {
		return fmt.Errorf("scan journal from %d: %w", from, err)
	}
	return nil
}

// scan reads events from rows of columns, calling fn with each in turn. A
// query may select more columns before them; lead receives those.
func scan(ctx context.Context, q Querier, sql string, args []any, fn func(Event) error, lead ...any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		e          Event
		deliveryID pgtype.UUID
		kind       string
		old, new   string
		payload    []byte
	)
	for rows.Next() {
		e = Event{}
		dest := append(lead[:len(lead):len(lead)], &e.Position, &e.RecordedAt, &e.Stream, &e.Version, &deliveryID,
			&e.Target, &kind, &e.Actor, &old, &new, &payload)
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		e.RecordedAt = e.RecordedAt.UTC()
		e.DeliveryID = uuid.UUID(deliveryID.Bytes)
		e.OldState, e.NewState = lifecycle.DeliveryState(old), lifecycle.DeliveryState(new)
		if e.Payload, err = Decode(Kind(kind), payload); err != nil {
			return fmt.Errorf("position %d: %w", e.Position, err)
		}
		if err := e.CheckEnvelope(); err != nil {
			return fmt.Errorf("position %d: %w", e.Position, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

func nullUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
