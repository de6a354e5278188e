package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
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

// insertSQL appends rows given column by column. The positions follow the
// order of the arrays: the identity is drawn as the sorted rows are inserted.
// $11 is the projections version of the build that appends: when the
// database records another, journal_projections_moved refuses the
// statement (schema.CodeProjectionsMoved). The CASE calls it only then.
const insertSQL = `INSERT INTO journal
	(recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
	SELECT recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload::json
	FROM unnest($1::timestamptz[], $2::text[], $3::int[], $4::uuid[], $5::text[], $6::text[], $7::text[],
		$8::text[], $9::text[], $10::text[]) WITH ORDINALITY
		AS e(recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload, n)
	WHERE CASE WHEN (SELECT version FROM schema_version WHERE part = '` + schema.PartProjections + `') = $11::int THEN true
		ELSE journal_projections_moved($11::int) END
	ORDER BY n`

// Queue validates the events and queues their insert on b, the batch of the
// command's transaction, as one statement that appends them in order,
// refused when the database's projections are not this build's
// (schema.ProjectionVersion). Nothing is queued when one is invalid.
func Queue(b *pgx.Batch, events ...Event) error {
	return queueAs(b, schema.ProjectionVersion, events...)
}

// queueAs is Queue for a build of projections version projections.
func queueAs(b *pgx.Batch, projections int, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	var c eventColumns
	for _, e := range events {
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
		c.add(e, data)
	}
	b.Queue(insertSQL, c.recordedAt, c.stream, c.version, c.deliveryID, c.target, c.kind, c.actor,
		c.oldState, c.newState, c.payload, projections)
	return nil
}

// eventColumns holds events column by column, for unnest.
type eventColumns struct {
	recordedAt                   []time.Time
	stream, kind, actor, payload []string
	version                      []int32
	deliveryID                   []pgtype.UUID
	target, oldState, newState   []pgtype.Text
}

func (c *eventColumns) add(e Event, payload []byte) {
	c.recordedAt = append(c.recordedAt, e.RecordedAt)
	c.stream = append(c.stream, e.Stream)
	c.version = append(c.version, int32(e.Version))
	c.deliveryID = append(c.deliveryID, pgtype.UUID{Bytes: e.DeliveryID, Valid: e.DeliveryID != uuid.Nil})
	c.target = append(c.target, text(e.Target))
	c.kind = append(c.kind, string(e.Kind()))
	c.actor = append(c.actor, e.Actor)
	c.oldState = append(c.oldState, text(string(e.OldState)))
	c.newState = append(c.newState, text(string(e.NewState)))
	c.payload = append(c.payload, string(payload))
}

// text is s as a column value, NULL when empty.
func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// columns are the columns an Event is read from, in scan's order.
const columns = `position, recorded_at, stream, version, delivery_id, coalesce(target, ''),
	kind, actor, coalesce(old_state, ''), coalesce(new_state, ''), payload`

const selectSQL = `SELECT ` + columns + ` FROM journal `

// Stream returns the events of one stream in order: a message's history.
func Stream(ctx context.Context, q Querier, stream string) ([]Event, error) {
	return StreamAfter(ctx, q, stream, 0)
}

// StreamAfter returns the events of one stream after its version after, in
// order, on the (stream, version) key: what a reader that has the history
// up to after lacks. A message's events commit in version order (each
// command holds the message's row lock), so a reader that asks again from
// the last version it got misses none.
func StreamAfter(ctx context.Context, q Querier, stream string, after int) ([]Event, error) {
	var events []Event
	err := scan(ctx, q, selectSQL+`WHERE stream = $1 AND version > $2 ORDER BY version`, []any{stream, after},
		func(e Event) error {
			events = append(events, e)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read stream %s after version %d: %w", stream, after, err)
	}
	return events, nil
}

// Streams returns the events of several streams, each in version order, in
// one read: the histories of the messages a reader needs together.
func Streams(ctx context.Context, q Querier, streams []string) (map[string][]Event, error) {
	out := make(map[string][]Event, len(streams))
	if len(streams) == 0 {
		return out, nil
	}
	// One walk of the (stream, version) key per stream, whatever the
	// planner guesses of an array's length.
	err := scan(ctx, q, `SELECT j.* FROM unnest($1::text[]) AS s(stream),
		LATERAL (SELECT `+columns+` FROM journal WHERE stream = s.stream ORDER BY version) j`, []any{streams},
		func(e Event) error {
			out[e.Stream] = append(out[e.Stream], e)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read %d streams: %w", len(streams), err)
	}
	return out, nil
}

// Scan calls fn with every event from position from on, in position order,
// streaming the rows; it stops at fn's first error and returns it.
func Scan(ctx context.Context, q Querier, from int64, fn func(Event) error) error {
	if err := scan(ctx, q, selectSQL+`WHERE position >= $1 ORDER BY position`, []any{from}, fn); err != nil {
		return fmt.Errorf("scan journal from %d: %w", from, err)
	}
	return nil
}

// Latest returns a stream's last limit events of kind, newest first.
func Latest(ctx context.Context, q Querier, stream string, kind Kind, limit int) ([]Event, error) {
	var events []Event
	err := scan(ctx, q, selectSQL+`WHERE stream = $1 AND kind = $2 ORDER BY version DESC LIMIT $3`,
		[]any{stream, kind, limit}, func(e Event) error {
			events = append(events, e)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read the latest %s of stream %s: %w", kind, stream, err)
	}
	return events, nil
}

// FailedBefore returns which of streams hold an event that put a delivery
// in a failing state (schema.FailuresSQL, the journal_failures index)
// below the version given for each. LATERAL … LIMIT 1 makes it one probe
// of the index per stream, however many failures it holds. The alerter
// asks it for nearly every transaction it reads, and left to choose,
// PostgreSQL planned it afresh at every call (proving the index's
// predicate each time), which took longer than running it: its plan is
// generic, set by a statement before it in the same implicit transaction.
func FailedBefore(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, streams []string, versions []int) (map[string]bool, error) {
	out := map[string]bool{}
	if len(streams) == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)
	b.Queue(`SELECT s.stream FROM unnest($1::text[], $2::int[]) AS s(stream, version),
		LATERAL (SELECT FROM journal j WHERE j.stream = s.stream AND j.version < s.version AND `+schema.FailuresSQL+`
			LIMIT 1) f`, streams, versions).Query(func(rows pgx.Rows) error {
		failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, s := range failed {
			out[s] = true
		}
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("find failures in %d streams: %w", len(streams), err)
	}
	return out, nil
}

// streamVersionSQL reads a stream's last version, 0 for a stream with no
// event yet.
const streamVersionSQL = `SELECT coalesce(max(version), 0) FROM journal WHERE stream = $1`

// QueueStreamVersion queues the read of a stream's last version into dst
// (0 for a stream with no event yet): the version its next event follows,
// for a writer of a named stream in the batch that locks what it writes.
func QueueStreamVersion(b *pgx.Batch, stream string, dst *int) {
	b.Queue(streamVersionSQL, stream).QueryRow(func(row pgx.Row) error { return row.Scan(dst) })
}

// StreamVersion returns a stream's last version, 0 for a stream with no
// event yet.
func StreamVersion(ctx context.Context, q Querier, stream string) (int, error) {
	rows, err := q.Query(ctx, streamVersionSQL, stream)
	var version int
	if err == nil {
		version, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	}
	if err != nil {
		return 0, fmt.Errorf("read the version of stream %s: %w", stream, err)
	}
	return version, nil
}

// lastPositionSQL reads the position of the last event, 0 for an empty
// journal.
const lastPositionSQL = `SELECT coalesce(max(position), 0) FROM journal`

// QueueLastPosition queues the read of the last event's position into dst
// (0 for an empty journal), for a reader that reads it with others.
func QueueLastPosition(b *pgx.Batch, dst *int64) {
	b.Queue(lastPositionSQL).QueryRow(func(row pgx.Row) error { return row.Scan(dst) })
}

// Count returns the number of events in the journal, as q sees it: an
// online rebuild's measure of its fold.
func Count(ctx context.Context, q Querier) (int, error) {
	var n int
	rows, err := q.Query(ctx, `SELECT count(*) FROM journal`)
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	}
	if err != nil {
		return 0, fmt.Errorf("count the journal's events: %w", err)
	}
	return n, nil
}

// LastPosition returns the position of the last event, 0 for an empty journal.
func LastPosition(ctx context.Context, q Querier) (int64, error) {
	var last int64
	rows, err := q.Query(ctx, lastPositionSQL)
	if err == nil {
		last, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return 0, fmt.Errorf("read the last journal position: %w", err)
	}
	return last, nil
}

// ScanRanges calls fn with every event at positions from through to, in
// position order, as Scan does, but reads runs of chunk positions on all the
// queriers at once: querier i takes runs i, i+len(qs), i+2·len(qs)..., and
// decodes each on a goroutine of its own, a run or two ahead of fn. fn runs on
// the caller's goroutine, one event at a time, so it folds streams in
// version order like a single Scan. The queriers must be distinct
// connections that share one snapshot (transactions that imported a snapshot
// exported by one of them), or the events read are not one state of the
// journal. It stops at the first error in position order, fn's or a read's,
// and returns it.
func ScanRanges(ctx context.Context, qs []Querier, from, to, chunk int64, fn func(Event) error) error {
	if len(qs) == 0 || chunk < 1 {
		return errors.New("scan journal: no queriers, or a chunk under 1")
	}
	if to < from {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	type run struct {
		events []Event
		err    error
	}
	runs := (to-from)/chunk + 1
	n := int64(len(qs))
	out := make([]chan run, n)
	free := make([]chan []Event, n)
	for i, q := range qs {
		out[i], free[i] = make(chan run, 1), make(chan []Event, 2)
		wg.Go(func() {
			for k := int64(i); k < runs; k += n {
				lo := from + k*chunk
				hi := min(lo+chunk-1, to)
				var r run
				select {
				case r.events = <-free[i]:
				default:
				}
				err := scan(ctx, q, selectSQL+`WHERE position BETWEEN $1 AND $2 ORDER BY position`, []any{lo, hi},
					func(e Event) error {
						r.events = append(r.events, e)
						return nil
					})
				if err != nil {
					r.err = fmt.Errorf("scan journal positions %d to %d: %w", lo, hi, err)
				}
				select {
				case out[i] <- r:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	for k := range runs {
		var r run
		select {
		case r = <-out[k%n]:
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, e := range r.events {
			if err := fn(e); err != nil {
				return err
			}
		}
		if r.err != nil {
			return r.err
		}
		clear(r.events)
		select {
		case free[k%n] <- r.events[:0]:
		default:
		}
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
	var r rowReader
	raw := len(lead) == 0 && rawColumns(rows.FieldDescriptions())
	for rows.Next() {
		var (
			e       Event
			kind    Kind
			payload []byte
		)
		if raw {
			e, kind, payload, err = r.decode(rows.RawValues())
		} else {
			e, kind, payload, err = r.scan(rows, lead)
		}
		if err != nil {
			return err
		}
		if e.Payload, err = Decode(kind, payload); err != nil {
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

// The columns of selectSQL, by their type: rawColumns wants the fixed-size
// ones in binary; text and json may come either way, as both are the text.
var selectColumns = []uint32{pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.TextOID, pgtype.Int4OID, pgtype.UUIDOID,
	pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.JSONOID}

// rawColumns reports whether rowReader.decode can read the rows of
// selectSQL as they come: with the simple protocol, for one, every column
// is text and the rows go through pgx's Scan.
func rawColumns(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(selectColumns) {
		return false
	}
	for i, fd := range fds {
		switch oid := selectColumns[i]; {
		case oid == pgtype.JSONOID && fd.DataTypeOID == pgtype.JSONBOID:
			// A payload column created as jsonb (schema.journalDDL): its
			// text is the JSON, its binary form a version byte and the text.
			if fd.Format != pgtype.TextFormatCode {
				return false
			}
		case fd.DataTypeOID != oid:
			return false
		case oid != pgtype.TextOID && oid != pgtype.JSONOID && fd.Format != pgtype.BinaryFormatCode:
			return false
		}
	}
	return true
}

// rowReader reads the rows of selectSQL, sharing the strings that repeat
// from row to row.
type rowReader struct {
	deliveryID pgtype.UUID
	kind       string
	old, new   string
	payload    []byte
	shared     map[string]string
}

// scan reads a row with pgx's Scan, the columns before selectSQL's into
// lead.
func (r *rowReader) scan(rows pgx.Rows, lead []any) (e Event, kind Kind, payload []byte, err error) {
	dest := append(lead[:len(lead):len(lead)], &e.Position, &e.RecordedAt, &e.Stream, &e.Version, &r.deliveryID,
		&e.Target, &r.kind, &e.Actor, &r.old, &r.new, &r.payload)
	if err := rows.Scan(dest...); err != nil {
		return Event{}, "", nil, err
	}
	e.RecordedAt = e.RecordedAt.UTC()
	e.DeliveryID = uuid.UUID(r.deliveryID.Bytes)
	e.OldState, e.NewState = lifecycle.DeliveryState(r.old), lifecycle.DeliveryState(r.new)
	return e, Kind(r.kind), r.payload, nil
}

// kinds and states give the names that rows repeat without allocating them.
var (
	kinds  = map[string]Kind{}
	states = map[string]lifecycle.DeliveryState{"": ""}
)

func init() {
	for k := range catalogue {
		kinds[string(k)] = k
	}
	for _, s := range lifecycle.DeliveryStates {
		states[string(s)] = s
	}
}

// decode reads the raw values of a row, as rawColumns checked them. The
// payload it returns is the row's: it is valid until the next row.
func (r *rowReader) decode(v [][]byte) (e Event, kind Kind, payload []byte, err error) {
	for i, b := range v {
		if b == nil && i != 4 {
			return Event{}, "", nil, fmt.Errorf("column %d is null", i+1)
		}
	}
	if len(v[0]) != 8 || len(v[1]) != 8 || len(v[3]) != 4 || v[4] != nil && len(v[4]) != 16 {
		return Event{}, "", nil, errors.New("a fixed-size column has the wrong size")
	}
	e.Position = int64(binary.BigEndian.Uint64(v[0]))
	us := int64(binary.BigEndian.Uint64(v[1]))
	if us == math.MaxInt64 || us == math.MinInt64 {
		return Event{}, "", nil, fmt.Errorf("position %d: recorded_at is infinite", e.Position)
	}
	// As pgx reads a timestamptz.
	const y2k = 946_684_800_000_000
	e.RecordedAt = time.Unix(y2k/1_000_000+us/1_000_000, y2k%1_000_000*1000+us%1_000_000*1000).UTC()
	e.Stream = string(v[2])
	e.Version = int(int32(binary.BigEndian.Uint32(v[3])))
	if v[4] != nil {
		e.DeliveryID = uuid.UUID(v[4])
	}
	e.Target = r.share(v[5])
	if kind = kinds[string(v[6])]; kind == "" {
		kind = Kind(v[6])
	}
	e.Actor = r.share(v[7])
	var ok bool
	if e.OldState, ok = states[string(v[8])]; !ok {
		e.OldState = lifecycle.DeliveryState(v[8])
	}
	if e.NewState, ok = states[string(v[9])]; !ok {
		e.NewState = lifecycle.DeliveryState(v[9])
	}
	return e, kind, v[10], nil
}

// share returns b as a string, the same one for the same bytes, for the
// first few hundred distinct values.
func (r *rowReader) share(b []byte) string {
	if s, ok := r.shared[string(b)]; ok {
		return s
	}
	s := string(b)
	if r.shared == nil {
		r.shared = map[string]string{}
	}
	if len(r.shared) < 256 {
		r.shared[s] = s
	}
	return s
}

// HandOver is a delivery's hand-over to a receiver that confirms later: the
// version of the message's stream whose delivery.attempted made it, the
// attempt, and the receiver's id for the message, if it gave one.
type HandOver struct {
	Version, Attempt int
	ExternalID       string
}

// lastHandOverSQL reads the last hand-over of a delivery ($2) in its
// message's stream ($1), on the stream's key, newest first.
var lastHandOverSQL = `SELECT version, (payload->>'attempt')::int, coalesce(payload->'outcome'->>'external_id', '')
	FROM journal WHERE stream = $1 AND delivery_id = $2 AND kind = '` + string(KindDeliveryAttempted) + `'
	AND new_state = '` + string(lifecycle.StateAwaitingAck) + `' ORDER BY version DESC LIMIT 1`

// QueueLastHandOver queues on b the read of the delivery's last hand-over
// in the stream of its message into h, left zero when it has none.
func QueueLastHandOver(b *pgx.Batch, message, delivery uuid.UUID, h *HandOver) {
	b.Queue(lastHandOverSQL, MessageStream(message), delivery).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&h.Version, &h.Attempt, &h.ExternalID}, func() error { return nil })
		return err
	})
}
