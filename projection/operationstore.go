package projection

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

const operationColumns = `o.id, o.version, o.action, o.filter, o.reason, o.created_by, o.state, o.matched, o.listed,
	o.done, o.refused, o.error, o.created_at, o.updated_at, o.finished_at`

// operationRow scans an operation.
type operationRow struct {
	o        Operation
	finished pgtype.Timestamptz
}

func (r *operationRow) dest() []any {
	o := &r.o
	return []any{&o.ID, &o.Version, &o.Action, &o.Filter, &o.Reason, &o.CreatedBy, &o.State, &o.Matched, &o.Listed,
		&o.Done, &o.Refused, &o.Error, &o.CreatedAt, &o.UpdatedAt, &r.finished}
}

func (r *operationRow) operation() *Operation {
	o := r.o
	o.CreatedAt, o.UpdatedAt, o.FinishedAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC(), timeOf(r.finished)
	o.Filter.CreatedAfter, o.Filter.CreatedBefore = o.Filter.CreatedAfter.UTC(), o.Filter.CreatedBefore.UTC()
	return &o
}

func scanOperations(rows pgx.Rows) ([]*Operation, error) {
	var (
		r   operationRow
		out []*Operation
	)
	_, err := pgx.ForEachRow(rows, r.dest(), func() error {
		out = append(out, r.operation())
		r = operationRow{}
		return nil
	})
	return out, err
}

// LoadOperation reads an operation; ErrNotFound when there is none.
func LoadOperation(ctx context.Context, q journal.Querier, id uuid.UUID) (*Operation, error) {
	rows, err := q.Query(ctx, `SELECT `+operationColumns+` FROM operations o WHERE o.id = $1`, id)
	var ops []*Operation
	if err == nil {
		ops, err = scanOperations(rows)
	}
	if err == nil && len(ops) == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load operation %s: %w", id, err)
	}
	return ops[0], nil
}

// QueueLoadOperationLocked queues on b, a batch run inside a transaction,
// the read of an operation with its row locked (FOR UPDATE), so that the
// transactions that write one operation's stream take turns; the returned
// function gives it once the batch is read, nil when there is none.
func QueueLoadOperationLocked(b *pgx.Batch, id uuid.UUID) func() *Operation {
	var out *Operation
	b.Queue(`SELECT `+operationColumns+` FROM operations o WHERE o.id = $1 FOR UPDATE`, id).
		Query(func(rows pgx.Rows) error {
			ops, err := scanOperations(rows)
			if len(ops) > 0 {
				out = ops[0]
			}
			return err
		})
	return func() *Operation { return out }
}

// QueueOperation queues on b the write of an operation: an insert of a new
// one (before nil), else an update where it still has the version read,
// which fails the transaction as a serialization failure otherwise.
func QueueOperation(b *pgx.Batch, before, after *Operation) {
	if before == nil {
		b.Queue(`INSERT INTO operations (id, version, action, filter, reason, created_by, state, matched, listed,
			done, refused, error, created_at, updated_at, finished_at)
			VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
			after.ID, after.Version, after.Action, after.Filter, after.Reason, after.CreatedBy, after.State, after.Matched,
			after.Listed, after.Done, after.Refused, after.Error, after.CreatedAt, after.UpdatedAt, pgTime(after.FinishedAt))
		return
	}
	b.Queue(`WITH updated AS (
			UPDATE operations SET version = $3, state = $4, listed = $5, done = $6, refused = $7, error = $8,
				updated_at = $9, finished_at = $10
			WHERE id = $1 AND version = $2 RETURNING id)
		`+expectUpdatedSQL("1"),
		after.ID, before.Version, after.Version, after.State, after.Listed, after.Done, after.Refused, after.Error,
		after.UpdatedAt, pgTime(after.FinishedAt))
}

// OperationCursor is where a page of operations ended: the (created_at,
// id) of its last operation.
type OperationCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// String is the cursor as the list hands it out, opaque to clients.
func (c OperationCursor) String() string { return encodeCursor("o1", c.CreatedAt, c.ID) }

// ParseOperationCursor reads a cursor String gave; anything else is a
// *lifecycle.FieldError on the field cursor.
func ParseOperationCursor(s string) (OperationCursor, error) {
	at, id, err := parseCursor("o1", s)
	return OperationCursor{CreatedAt: at, ID: id}, err
}

// ListOperations reads a page of operations, newest first by (created_at,
// id), on operations_created, and the cursor of the next page (nil on the
// last).
func ListOperations(ctx context.Context, q journal.Querier, limit int, after *OperationCursor) ([]*Operation, *OperationCursor, error) {
	limit = max(limit, 1)
	sql := `SELECT ` + operationColumns + ` FROM operations o`
	args := []any{limit + 1}
	if after != nil {
		sql += ` WHERE (o.created_at, o.id) < ($2, $3)`
		args = append(args, after.CreatedAt, after.ID)
	}
	rows, err := q.Query(ctx, sql+` ORDER BY o.created_at DESC, o.id DESC LIMIT $1`, args...)
	var ops []*Operation
	if err == nil {
		ops, err = scanOperations(rows)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list operations: %w", err)
	}
	if len(ops) <= limit {
		return ops, nil, nil
	}
	last := ops[limit-1]
	return ops[:limit], &OperationCursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// NextRunning returns the running operation that has waited longest since
// it last moved (by updated_at, on operations_running), so that several
// running operations take their batches in turn; nil when none runs.
func NextRunning(ctx context.Context, q journal.Querier) (*Operation, error) {
	rows, err := q.Query(ctx, `SELECT `+operationColumns+` FROM operations o WHERE o.state = $1
		ORDER BY o.updated_at, o.id LIMIT 1`, lifecycle.OperationRunning)
	var ops []*Operation
	if err == nil {
		ops, err = scanOperations(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("find a running operation: %w", err)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return ops[0], nil
}

// CountRunning counts the running operations, on operations_running.
func CountRunning(ctx context.Context, q journal.Querier) (int, error) {
	rows, err := q.Query(ctx, `SELECT count(*) FROM operations WHERE state = $1`, lifecycle.OperationRunning)
	n := 0
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	}
	if err != nil {
		return 0, fmt.Errorf("count running operations: %w", err)
	}
	return n, nil
}

// matchSQL is the query of the messages f chooses, oldest first by
// (created_at, id): the order an operation takes them in, so that a resend
// of messages with an ordering key keeps their order in the lanes. With a
// target it keeps the messages with a delivery to it, of any generation,
// as the messages list does; each message comes once. A non-zero after
// keeps only the messages after it in that order; limit bounds them.
func matchSQL(f lifecycle.OperationFilter, after MatchAt, limit int) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.Status) > 0 {
		where = append(where, "m.status = ANY("+arg(lifecycle.Strings(f.Status))+"::text[])")
	}
	if f.Source != "" {
		where = append(where, "m.source = "+arg(f.Source))
	}
	if f.Target != "" {
		where = append(where, "EXISTS (SELECT FROM deliveries d WHERE d.message_id = m.id AND d.target = "+arg(f.Target)+")")
	}
	if !f.CreatedAfter.IsZero() {
		where = append(where, "m.created_at > "+arg(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "m.created_at < "+arg(f.CreatedBefore))
	}
	if after != (MatchAt{}) {
		where = append(where, "(m.created_at, m.id) > ("+arg(after.CreatedAt)+"::timestamptz, "+arg(after.ID)+"::uuid)")
	}
	sql := "SELECT m.id, m.created_at FROM messages m"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	return sql + " ORDER BY m.created_at, m.id LIMIT " + arg(limit), args
}

// MatchAt is a place in the messages a filter chooses, in the order an
// operation takes them: the message's creation time and id.
type MatchAt struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// MatchMessages returns the ids of the messages f chooses, oldest first, at
// most limit of them, in one statement and so one snapshot.
func MatchMessages(ctx context.Context, q journal.Querier, f lifecycle.OperationFilter, limit int) ([]uuid.UUID, error) {
	ids, _, err := MatchPage(ctx, q, f, MatchAt{}, limit)
	return ids, err
}

// InLaneOrder puts ids, messages in the order an operation takes them
// (oldest first), so that the messages of each ordering key come in their
// lanes' order. A lane's order is the one in which its messages took the
// lane's lock, which creation times from processes whose clocks differ can
// contradict, and a resend or a replay puts messages in their lanes again
// in the order it takes them. Each key's messages take, in lane order, the
// places in the list that key's messages had; a message in no lane stays
// where it is. Where two lanes disagree (a delivery that joined the back
// of one), the list's order decides.
func InLaneOrder(ctx context.Context, q journal.Querier, ids []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, `SELECT d.message_id, d.target, d.lane_key, d.lane_seq FROM deliveries d
		JOIN messages m ON m.id = d.message_id AND m.generation = d.generation
		WHERE d.message_id = ANY($1) AND d.lane_seq > 0`, ids)
	if err != nil {
		return nil, fmt.Errorf("read the messages' lanes: %w", err)
	}
	lanes := map[LaneID][]lanePlace{}
	var (
		id   LaneID
		p    lanePlace
		lane pgtype.Text
	)
	if _, err := pgx.ForEachRow(rows, []any{&p.message, &id.Target, &lane, &p.seq}, func() error {
		id.Key = lane.String
		lanes[id] = append(lanes[id], p)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the messages' lanes: %w", err)
	}
	return inLaneOrder(ids, lanes), nil
}

// lanePlace is a message's place in a lane.
type lanePlace struct {
	message uuid.UUID
	seq     int64
}

// inLaneOrder is InLaneOrder's ordering of ids by the places of their
// messages in lanes.
func inLaneOrder(ids []uuid.UUID, lanes map[LaneID][]lanePlace) []uuid.UUID {
	// The lanes' order as edges from each message to the next of its lane.
	keyOf := map[uuid.UUID]string{}
	next := map[uuid.UUID][]uuid.UUID{}
	waits := map[uuid.UUID]int{}
	for id, l := range lanes {
		slices.SortFunc(l, func(a, b lanePlace) int { return cmp.Compare(a.seq, b.seq) })
		for i, p := range l {
			keyOf[p.message] = id.Key
			if i > 0 {
				next[l[i-1].message] = append(next[l[i-1].message], p.message)
				waits[p.message]++
			}
		}
	}
	places := map[string][]int{}
	for i, id := range ids {
		if key, ok := keyOf[id]; ok {
			places[key] = append(places[key], i)
		}
	}
	at := make(map[uuid.UUID]int, len(keyOf))
	for i, id := range ids {
		at[id] = i
	}
	out := slices.Clone(ids)
	for _, ps := range places {
		// Among the key's messages whose lane predecessors are taken, the
		// earliest in the list goes next; when none is free (lanes that
		// disagree), the earliest left goes.
		ready := &positions{}
		for _, i := range ps {
			if waits[ids[i]] == 0 {
				heap.Push(ready, i)
			}
		}
		done := make(map[int]bool, len(ps))
		first := 0
		for _, slot := range ps {
			for ready.Len() > 0 && done[(*ready)[0]] {
				heap.Pop(ready)
			}
			if ready.Len() == 0 {
				for done[ps[first]] {
					first++
				}
				heap.Push(ready, ps[first])
			}
			i := heap.Pop(ready).(int)
			done[i] = true
			out[slot] = ids[i]
			for _, n := range next[ids[i]] {
				if waits[n]--; waits[n] == 0 && !done[at[n]] {
					heap.Push(ready, at[n])
				}
			}
		}
	}
	return out
}

// positions is a min-heap of places in a list.
type positions []int

func (h positions) Len() int           { return len(h) }
func (h positions) Less(i, j int) bool { return h[i] < h[j] }
func (h positions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *positions) Push(x any)        { *h = append(*h, x.(int)) }
func (h *positions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// MatchPage returns the ids of at most limit of the messages f chooses
// after the place after (from the first when it is zero), oldest first,
// and the place of the last of them, to page on from.
func MatchPage(ctx context.Context, q journal.Querier, f lifecycle.OperationFilter, after MatchAt, limit int) ([]uuid.UUID, MatchAt, error) {
	sql, args := matchSQL(f, after, limit)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, MatchAt{}, fmt.Errorf("match messages: %w", err)
	}
	var (
		at  MatchAt
		ids []uuid.UUID
	)
	if _, err := pgx.ForEachRow(rows, []any{&at.ID, &at.CreatedAt}, func() error {
		ids = append(ids, at.ID)
		return nil
	}); err != nil {
		return nil, MatchAt{}, fmt.Errorf("match messages: %w", err)
	}
	return ids, at, nil
}

// LoadMatched reads from an operation's stream the ids of the messages at
// indexes from to from+n-1 of its list (fewer at the list's end).
func LoadMatched(ctx context.Context, q journal.Querier, o *Operation, from, n int) ([]uuid.UUID, error) {
	n = min(n, o.Listed-from)
	if n <= 0 {
		return nil, nil
	}
	lo, hi := MatchedVersion(from), MatchedVersion(from+n-1)
	ids, err := journal.ReadMatched(ctx, q, o.ID, lo, hi)
	if err != nil {
		return nil, err
	}
	skip := from - (lo-2)*OperationChunk
	if len(ids) < skip+n {
		return nil, fmt.Errorf("read the messages of operation %s: its stream lists %d from index %d, want %d",
			o.ID, len(ids)-skip, from, n)
	}
	return slices.Clip(ids[skip : skip+n]), nil
}

// recentBatches is how many of an operation's latest batches its rate is
// measured over.
const recentBatches = 20

// RecentRate is how many messages per second an operation has taken
// lately: over its latest batches, or since its start when it has taken
// one; 0 when that cannot be told yet.
func RecentRate(ctx context.Context, q journal.Querier, o *Operation) (float64, error) {
	events, err := journal.Latest(ctx, q, journal.OperationStream(o.ID), journal.KindOperationProgressed, recentBatches)
	if err != nil {
		return 0, fmt.Errorf("rate of operation %s: %w", o.ID, err)
	}
	times, taken := make([]time.Time, len(events)), make([]int, len(events))
	for i, e := range events {
		times[i], taken[i] = e.RecordedAt, e.Payload.(*journal.OperationProgressed).Taken()
	}
	switch len(times) {
	case 0:
		return 0, nil
	case 1:
		// One batch: measured from the start.
		times, taken = append(times, o.CreatedAt), append(taken, 0)
	}
	// Newest first: the oldest batch's own messages were taken before
	// the span starts.
	span := times[0].Sub(times[len(times)-1]).Seconds()
	sum := 0
	for _, k := range taken[:len(taken)-1] {
		sum += k
	}
	if span <= 0 {
		return 0, nil
	}
	return float64(sum) / span, nil
}

// RefusalAt is a refusal and its place in the operation's stream: the
// version of its batch's event and its index there, from 1.
type RefusalAt struct {
	journal.OperationRefusal
	Version, N int
}

// String is the refusal's place as a list's cursor hands it out.
func (a RefusalAt) String() string { return fmt.Sprintf("%d.%d", a.Version, a.N) }

// ParseRefusalAt reads a place String gave; anything else is a
// *lifecycle.FieldError on the field cursor. The version fits in 32 bits,
// as the journal's version column does: a larger one would fail the query.
func ParseRefusalAt(s string) (RefusalAt, error) {
	a, b, ok := strings.Cut(s, ".")
	version, err1 := strconv.ParseInt(a, 10, 32)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || version < 1 || n < 1 {
		return RefusalAt{}, &lifecycle.FieldError{Field: "cursor", Problem: "is not a cursor of this list: pass next_cursor as it was given"}
	}
	return RefusalAt{Version: int(version), N: n}, nil
}

// Refusals reads up to limit refusals of an operation from its stream, in
// the order the operation met them, after the place after (the zero
// RefusalAt for the first).
func Refusals(ctx context.Context, q journal.Querier, id uuid.UUID, after RefusalAt, limit int) ([]RefusalAt, error) {
	var out []RefusalAt
	err := journal.ReadRefusals(ctx, q, id, after.Version, after.N, limit, func(version, n int, r journal.OperationRefusal) {
		out = append(out, RefusalAt{OperationRefusal: r, Version: version, N: n})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
