package projection

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// ErrNotFound is returned for a message or delivery the tables do not hold.
var ErrNotFound = errors.New("not found")

const messageColumns = `m.id, m.version, m.source, m.from_party, m.to_party, m.content_type,
	coalesce(m.idempotency_key, ''), coalesce(m.ordering_key, ''), coalesce(m.duplicate_key, ''),
	coalesce(m.possible_duplicate_of, '00000000-0000-0000-0000-000000000000'), coalesce(m.type, ''), m.generation, m.payload_size, m.payload_sha256, m.stage, coalesce(m.refusal, ''),
	m.status, m.error, m.created_at, m.updated_at, m.payload_expunged,
	coalesce(m.traceparent, ''), coalesce(m.tracestate, ''), coalesce(m.baggage, ''), m.headers`

const deliveryColumns = `d.id, d.message_id, d.message_created_at, d.seq, d.version, d.generation, d.target, d.lane_key, d.lane_seq,
	d.lane_continue, d.state, d.attempts,
	d.dispatch_count, d.redeliveries, d.redelivered_at, d.redelivered_attempts, d.next_due, d.claim_token,
	d.lease_end, d.last_error, d.created_at, d.updated_at, d.finished_at, d.shaped`

// Load reads a message and its deliveries; ErrNotFound when there is none.
func Load(ctx context.Context, q journal.Querier, id uuid.UUID) (*Message, error) {
	ms, err := loadAll(ctx, q, `SELECT `+joinedColumns+joinedTables+`WHERE m.id = $1 ORDER BY d.seq`, id)
	if err == nil && len(ms) == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load message %s: %w", id, err)
	}
	return ms[0], nil
}

// DeliveryTarget returns the target of the delivery with the id;
// ErrNotFound when there is none.
func DeliveryTarget(ctx context.Context, q journal.Querier, id uuid.UUID) (string, error) {
	rows, err := q.Query(ctx, `SELECT target FROM deliveries WHERE id = $1`, id)
	if err != nil {
		return "", fmt.Errorf("the target of delivery %s: %w", id, err)
	}
	target, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("the target of delivery %s: %w", id, err)
	}
	return target, nil
}

// LoadMany reads the messages with the ids, each with all its deliveries,
// in id order; ids with no message are left out.
func LoadMany(ctx context.Context, q journal.Querier, ids []uuid.UUID) ([]*Message, error) {
	ms, err := loadAll(ctx, q, loadManySQL, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d messages: %w", len(ids), err)
	}
	return ms, nil
}

// Lock queues on b, a batch run inside a transaction, the lock of the
// rows of the messages named by id or by one of their deliveries' ids (FOR
// UPDATE, in id order, so two transactions locking overlapping sets never
// wait for each other in a cycle). The returned function gives the locked
// messages' ids and versions, in id order, once the batch is read; ids with
// no message are left out.
//
// The caller reads what it needs of them afterwards (LoadMany), or takes a
// copy it holds at the version locked: a message's state at a version is
// the fold of its stream up to it, which only one transaction ever
// commits. The read must be a statement of its own, after the lock's: in
// READ COMMITTED it then takes a snapshot that holds all that a writer the
// lock waited for committed. A read locking the rows itself would not:
// after the wait PostgreSQL returns the locked message row as the other
// writer left it, but joined to the delivery rows of the snapshot taken
// before the wait.
//
// A message's version is the greatest of its row's and its deliveries'
// (Message.derive), and a delivery may have moved without its message row:
// the lock is therefore taken twice, by two statements in the same round
// trip. The first waits for the locks; the second, whose snapshot is taken
// once they are held, reads the versions, locking again the rows it finds
// (at no cost for those held already).
func Lock(b *pgx.Batch, messageIDs, deliveryIDs []uuid.UUID) func() []Locked {
	var locked []Locked
	b.Queue(lockSQL, messageIDs, deliveryIDs, true)
	b.Queue(lockSQL, messageIDs, deliveryIDs, true).Query(func(rows pgx.Rows) error {
		var err error
		locked, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Locked])
		return err
	})
	return func() []Locked { return locked }
}

// LockMessages is Lock for a batch whose commands name only deliveries in
// no lane (a delivery enters a lane at its dispatch or never), given as
// their messages' ids, sorted and without repeats: with no lane's next
// message to lock beside them, the statements look up each message by
// its key and nothing else. Lock's plans, whose lane lookups PostgreSQL sets up at
// every execution whether they find anything or not, cost three times as
// much to run (docs/performance.md, "The lock of messages in no lane").
func LockMessages(b *pgx.Batch, messageIDs []uuid.UUID) func() []Locked {
	var locked []Locked
	b.Queue(`SELECT FROM unnest($1::uuid[]) AS k(id), LATERAL (SELECT FROM messages m WHERE m.id = k.id FOR UPDATE) l`, messageIDs)
	b.Queue(lockMessagesSQL, messageIDs).Query(func(rows pgx.Rows) error {
		var err error
		locked, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Locked])
		return err
	})
	return func() []Locked { return locked }
}

// lockMessagesSQL locks the messages $1, in the array's order, and gives
// their ids and versions as lockSQL does.
const lockMessagesSQL = `SELECT k.id, l.version FROM unnest($1::uuid[]) AS k(id),
	LATERAL (SELECT ` + lockedVersionSQL + ` AS version FROM messages m WHERE m.id = k.id FOR UPDATE) l`

// Locked is a message row Lock locked, at the version it holds.
type Locked struct {
	ID      uuid.UUID
	Version int
}

// LookupPlanSQL makes the plans of the rest of its transaction generic
// and leaves them one way to find rows: by an index (no sequential scan,
// no hash or merge join). Every transaction of the Writer begins with
// it: its reads (Lock, LoadMany) and writes (Queue) find each row
// by a key, and generic plans spare planning them on every call; but a
// generic plan is made once per connection. Made on a table never
// analyzed, as on a new database, the messages' update hashed the whole
// table for each batch, and stayed so as the table grew (5 ms a batch at
// 20,000 messages) until an analyze replaced it.
const LookupPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true)`

// lockedIDs is the sorted ids of the messages named by id ($1) or by one of
// their deliveries' ids ($2), and of the messages of the deliveries first
// waiting in the lanes of those deliveries (and, when $3, of every delivery
// of a message named by id): a command that settles a lane's head lets the
// next one go in the same transaction, so it must hold that message too,
// locked in the same order as the rest. Every lookup is one
// equality on a key, in a subquery that OFFSET 0 keeps from being
// flattened into a join, so that the plan is an index lookup per id
// whatever the planner guesses of the arrays' and the tables' sizes; with
// "= ANY(array)" a plan made while the tables were small scans them whole.
var lockedIDs = `WITH ids AS MATERIALIZED (
		SELECT id FROM (
			SELECT id FROM unnest($1::uuid[]) AS k(id)
			UNION
			SELECT w.message_id FROM unnest($2::uuid[]) AS k(id),
				LATERAL (SELECT w.message_id FROM deliveries w WHERE w.id = k.id OFFSET 0) w
			UNION
			SELECT n.message_id FROM unnest($2::uuid[]) AS k(id),
				LATERAL (SELECT w.target, w.lane_key FROM deliveries w WHERE w.id = k.id AND w.lane_key IS NOT NULL OFFSET 0) w,
				LATERAL (` + firstWaiting + `) n
			UNION
			SELECT n.message_id FROM unnest($1::uuid[]) AS k(id),
				LATERAL (SELECT DISTINCT w.target, w.lane_key FROM deliveries w
					WHERE $3::bool AND w.message_id = k.id AND w.lane_key IS NOT NULL OFFSET 0) w,
				LATERAL (` + firstWaiting + `) n
		) u ORDER BY id)
	`

// firstWaiting is the message of the first delivery waiting in the lane of
// w (target, lane_key).
var firstWaiting = `SELECT n.message_id FROM deliveries n WHERE n.target = w.target AND n.lane_key = w.lane_key
					AND ` + laneWaitingSQL + ` ORDER BY n.lane_seq LIMIT 1`

// joinedColumns and joinedTables read a message with its deliveries, a
// row each, and its callback, if any, on every row.
const (
	joinedColumns = messageColumns + `, ` + deliveryColumns + `, ` + callbackColumns
	joinedTables  = `
		FROM messages m LEFT JOIN deliveries d ON d.message_id = m.id LEFT JOIN callbacks c ON c.message_id = m.id `
)

// lockSQL locks the messages of lockedIDs and gives their ids and
// versions, in id order: the greatest of the message row's and its
// deliveries'. The deliveries are read in the statement's snapshot, which
// after a wait for a lock is older than the row (see Lock).
var lockSQL = lockedIDs + `SELECT ids.id, l.version FROM ids,
	LATERAL (SELECT ` + lockedVersionSQL + ` AS version FROM messages m WHERE m.id = ids.id FOR UPDATE) l ORDER BY ids.id`

// lockedVersionSQL is the version of message m: the greatest of its row's
// and its deliveries'.
const lockedVersionSQL = `greatest(m.version, (SELECT max(d.version) FROM deliveries d WHERE d.message_id = m.id))`

// loadManySQL reads the messages with the ids $1 with their deliveries
// and callbacks, in id and then sequence order: a lookup of each id, as
// lockSQL's are.
var loadManySQL = `WITH ids AS MATERIALIZED (SELECT DISTINCT id FROM unnest($1::uuid[]) AS k(id) ORDER BY id)
	SELECT r.* FROM ids, LATERAL (SELECT ` + joinedColumns + joinedTables + `
		WHERE m.id = ids.id ORDER BY d.seq OFFSET 0) r`

// loadAll reads rows of joinedColumns, ordered by message, into one
// Message per message.
func loadAll(ctx context.Context, q journal.Querier, sql string, args ...any) ([]*Message, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanAll(rows)
}

// scanAll reads the rows of loadAll and closes them.
func scanAll(rows pgx.Rows) ([]*Message, error) {
	defer rows.Close()
	var ms []*Message
	for rows.Next() {
		var r joinedRow
		if err := rows.Scan(r.scanDest()...); err != nil {
			return nil, err
		}
		if len(ms) == 0 || ms[len(ms)-1].ID != r.m.ID {
			m, err := r.message()
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
		r.addTo(ms[len(ms)-1])
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, m := range ms {
		m.derive()
	}
	return ms, nil
}

// joinedRow is a row of joinedColumns: a message, and one of its
// deliveries and its callback, each of which a LEFT JOIN may leave NULL.
type joinedRow struct {
	m Message
	d deliveryRow
	c callbackRow
}

func (r *joinedRow) scanDest() []any {
	return append(append(r.m.scanDest(), r.d.scanDest()...), r.c.scanDest()...)
}

// message is the message of the first of its rows, with its callback.
func (r *joinedRow) message() (*Message, error) {
	m := r.m
	m.normalize()
	if r.c.messageID.Valid {
		cb, err := r.c.callback()
		if err != nil {
			return nil, err
		}
		m.Callback = cb
	}
	return &m, nil
}

// addTo adds the row's delivery, if any, to m, its message.
func (r *joinedRow) addTo(m *Message) {
	if r.d.id.Valid {
		m.Deliveries = append(m.Deliveries, r.d.delivery())
	}
}

// ChooseSQL wraps choice, a statement that chooses deliveries, locks them
// with their messages (FOR UPDATE OF m, d) and returns for each the
// delivery's id, its message's id, a due key and the message row's version,
// so that the same statement reads each chosen delivery's message with its
// deliveries and callback, as LoadMany would in a round trip of its own.
// ScanChosen reads its rows.
//
// The read sees the rows as the statement's snapshot holds them, and that
// snapshot is taken before the locks (see Lock): a message whose row
// another writer committed in between is locked at a later version than it
// is read, and ScanChosen leaves it for a read of its own; one whose other
// deliveries alone moved is decided on as read, and its events' versions,
// which the journal holds already, fail the transaction, which is retried.
//
// The read does not sort: a choice may run with sorts turned off, so that
// it walks its index (commands.claimPlanSQL), and a sort then costs the
// plan so much that on a connection with JIT on PostgreSQL compiled the
// statement, about 340 ms for each. ScanChosen orders the deliveries.
func ChooseSQL(choice string) string {
	return `WITH chosen AS MATERIALIZED (` + choice + `)
	SELECT ch.*, r.* FROM chosen ch, LATERAL (SELECT ` + joinedColumns + joinedTables + `
		WHERE m.id = ch.message_id OFFSET 0) r`
}

// Chosen is a delivery a ChooseSQL statement chose and locked.
type Chosen struct {
	DeliveryID, MessageID uuid.UUID
	// Key is the due key the choice returned.
	Key time.Time
	// Message is the delivery's message as the statement read it, or nil
	// when it read another version than the one locked: the caller reads
	// it again in a statement of its own (LoadMany).
	Message *Message
}

// ScanChosen reads the rows of a ChooseSQL statement, in the choice's
// order, and closes them.
func ScanChosen(rows pgx.Rows) ([]Chosen, error) {
	defer rows.Close()
	var (
		chosen []Chosen
		locked []int
	)
	for rows.Next() {
		var (
			c       Chosen
			version int
			r       joinedRow
		)
		if err := rows.Scan(append([]any{&c.DeliveryID, &c.MessageID, &c.Key, &version}, r.scanDest()...)...); err != nil {
			return nil, err
		}
		// The lateral join gives each chosen delivery's rows together.
		if len(chosen) == 0 || chosen[len(chosen)-1].DeliveryID != c.DeliveryID {
			var err error
			if c.Message, err = r.message(); err != nil {
				return nil, err
			}
			chosen, locked = append(chosen, c), append(locked, version)
		}
		r.addTo(chosen[len(chosen)-1].Message)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range chosen {
		if m := chosen[i].Message; m.RowVersion != locked[i] {
			chosen[i].Message = nil
		} else {
			slices.SortFunc(m.Deliveries, func(a, b Delivery) int { return cmp.Compare(a.Seq, b.Seq) })
			m.derive()
		}
	}
	return chosen, nil
}

// scanDest lists the fields in messageColumns order.
func (m *Message) scanDest() []any {
	return []any{&m.ID, &m.RowVersion, &m.Source, &m.From, &m.To, &m.ContentType, &m.IdempotencyKey, &m.OrderingKey,
		&m.DuplicateKey, &m.PossibleDuplicateOf, &m.Type, &m.Generation, &m.PayloadSize, &m.PayloadSHA256, &m.Stage, &m.Refusal, &m.Status, &m.Error,
		&m.CreatedAt, &m.RowUpdatedAt, &m.PayloadExpunged, &m.Trace.Parent, &m.Trace.State, &m.Trace.Baggage, &m.Headers}
}

// normalize puts read times in UTC, as the fold keeps them.
func (m *Message) normalize() {
	m.CreatedAt, m.RowUpdatedAt = m.CreatedAt.UTC(), m.RowUpdatedAt.UTC()
}

// deliveryRow scans a delivery that a LEFT JOIN may leave all NULL.
type deliveryRow struct {
	id, messageID, claimToken                    pgtype.UUID
	seq, version, attempts, dispatchCount        pgtype.Int4
	redeliver                                    pgtype.Int4
	generation                                   pgtype.Int4
	redeliveredAttempts                          pgtype.Int4
	target, state, lastError, laneKey            pgtype.Text
	laneSeq                                      pgtype.Int8
	laneContinue, shaped                         pgtype.Bool
	nextDue, leaseEnd, finishedAt, redeliveredAt pgtype.Timestamptz
	messageCreatedAt, createdAt, updatedAt       pgtype.Timestamptz
}

// scanDest lists the fields in deliveryColumns order.
func (r *deliveryRow) scanDest() []any {
	return []any{&r.id, &r.messageID, &r.messageCreatedAt, &r.seq, &r.version, &r.generation, &r.target, &r.laneKey, &r.laneSeq, &r.laneContinue, &r.state, &r.attempts,
		&r.dispatchCount, &r.redeliver, &r.redeliveredAt, &r.redeliveredAttempts, &r.nextDue, &r.claimToken,
		&r.leaseEnd, &r.lastError, &r.createdAt, &r.updatedAt, &r.finishedAt, &r.shaped}
}

func (r *deliveryRow) delivery() Delivery {
	return Delivery{
		ID: r.id.Bytes, MessageID: r.messageID.Bytes, MessageCreatedAt: timeOf(r.messageCreatedAt),
		Seq: int(r.seq.Int32), Version: int(r.version.Int32), Generation: int(r.generation.Int32), Target: r.target.String, LaneKey: r.laneKey.String, LaneSeq: r.laneSeq.Int64,
		LaneContinue: r.laneContinue.Bool,
		State:        lifecycle.DeliveryState(r.state.String),
		Attempts:     int(r.attempts.Int32), DispatchCount: int(r.dispatchCount.Int32), Redeliveries: int(r.redeliver.Int32),
		RedeliveredAt: timeOf(r.redeliveredAt), RedeliveredAttempts: int(r.redeliveredAttempts.Int32),
		NextDue: timeOf(r.nextDue), ClaimToken: r.claimToken.Bytes, LeaseEnd: timeOf(r.leaseEnd),
		LastError: r.lastError.String, CreatedAt: timeOf(r.createdAt), UpdatedAt: timeOf(r.updatedAt),
		FinishedAt: timeOf(r.finishedAt), Shaped: r.shaped.Bool,
	}
}

func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// Write is what a command's fold left of one message to store: the message
// as it was read (nil for a new message), as it is now, and the deliveries
// whose rows changed.
type Write struct {
	Before  *Message
	Message *Message
	Touched []uuid.UUID
	// Events are the events that made Message of Before; the
	// correlations follow from them.
	Events []journal.Event
}

// Queue queues on b the statements that store the writes, each message at
// most once: a new message inserted, an existing one whose row changed
// (RowVersion) updated where it still has the row version read, the
// touched deliveries of all
// upserted in one statement, the callbacks and correlations the writes
// changed, the lanes they moved (upserted, or deleted once empty), and
// last the changes to the kept counts (Tally). An update that finds the
// row at another version fails the transaction with a serialization
// failure, so a command that read a stale state reads again.
func Queue(b *pgx.Batch, lanes []Lane, writes ...Write) {
	var created, changed deliveryColumnsOf
	var inserted newMessageColumns
	var updated messageUpdates
	seen := map[uuid.UUID]bool{}
	var tally Tally
	for _, w := range writes {
		m := w.Message
		d := &changed
		if w.Before == nil {
			d = &created
			inserted.add(m)
		} else if m.RowVersion != w.Before.RowVersion {
			updated.add(w.Before.RowVersion, m)
		}
		for _, id := range w.Touched {
			dl := m.Delivery(id)
			if dl == nil || seen[id] {
				continue
			}
			seen[id] = true
			d.add(dl)
		}
		// The message as it was leaves the counts and the message as it is
		// enters them: its status, its current generation's deliveries.
		if w.Before != nil {
			tally.Add(w.Before, -1)
		}
		tally.Add(m, 1)
		for i := range w.Events {
			tally.addOutcome(&w.Events[i], m.CreatedAt, 1)
		}
	}
	if len(inserted.id) > 0 {
		b.Queue(insertMessagesSQL, inserted.args()...)
	}
	if len(updated.id) > 0 {
		b.Queue(updateMessagesSQL, updated.args()...)
	}
	if len(created.id) > 0 {
		b.Queue(insertDeliveriesSQL, created.args()...)
	}
	if len(changed.id) > 0 {
		b.Queue(insertDeliveriesSQL+upsertDeliveriesSQL, changed.args()...)
	}
	queueCallbacks(b, writes)
	queueCorrelations(b, writes)
	queueLanes(b, lanes)
	tally.Queue(b)
}

// countInto adds sign times the message's current deliveries, by state,
// to counts.
func (m *Message) countInto(counts map[targetState]int64, sign int64) {
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; m.Current(d) {
			counts[targetState{d.Target, d.State}] += sign
		}
	}
}

// currentDeliveries counts the deliveries of the current generation.
func (m *Message) currentDeliveries() int {
	n := 0
	for i := range m.Deliveries {
		if m.Current(&m.Deliveries[i]) {
			n++
		}
	}
	return n
}

// targetState is the key of a count of deliveries: their target and state.
type targetState struct {
	target string
	state  lifecycle.DeliveryState
}

// compareTargetStates orders keys as delivery_counts' key does.
func compareTargetStates(a, b targetState) int {
	return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.state, b.state))
}

// queueCounts adds the changes to the counts of deliveries by target and
// state to the rows of the backend's shard, in the order of their keys
// (see Tally.Queue).
func queueCounts(b *pgx.Batch, counts map[targetState]int64) {
	var (
		targets, states []string
		ns              []int64
	)
	for _, k := range slices.SortedFunc(maps.Keys(counts), compareTargetStates) {
		if n := counts[k]; n != 0 {
			targets, states, ns = append(targets, k.target), append(states, string(k.state)), append(ns, n)
		}
	}
	if len(ns) > 0 {
		b.Queue(addCountsSQL, targets, states, ns, countShards)
	}
}

// countShards is the number of rows each count of deliveries is spread
// over.
const countShards = 64

const addCountsSQL = `INSERT INTO delivery_counts (target, shard, state, n)
	SELECT k.target, pg_backend_pid() % $4, k.state, k.n FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(target, state, n)
	ON CONFLICT (target, shard, state) DO UPDATE SET n = delivery_counts.n + excluded.n`

// QueueCounts queues on b the read of the number of deliveries in each
// state; the returned function gives them, every state present, once the
// batch is read. It reads the kept counts, a few rows, not the deliveries.
func QueueCounts(b *pgx.Batch) func() map[lifecycle.DeliveryState]int64 {
	out := make(map[lifecycle.DeliveryState]int64, len(lifecycle.CountedStates))
	for _, s := range lifecycle.CountedStates {
		out[s] = 0
	}
	b.Queue(countsSQL).Query(func(rows pgx.Rows) error { return scanCounts(rows, out) })
	return func() map[lifecycle.DeliveryState]int64 { return out }
}

const countsSQL = `SELECT state, sum(n)::bigint FROM delivery_counts GROUP BY state`

// targetCountsSQL reads the kept counts by target and state.
const targetCountsSQL = `SELECT target, state, sum(n)::bigint FROM delivery_counts GROUP BY target, state`

// QueueTargetCounts queues on b the read of the number of deliveries of
// each target in each state, from the kept counts; the returned function
// gives them once the batch is read, with an entry for every state of each
// target the counts name.
func QueueTargetCounts(b *pgx.Batch) func() map[string]map[lifecycle.DeliveryState]int64 {
	out := map[string]map[lifecycle.DeliveryState]int64{}
	b.Queue(targetCountsSQL).Query(func(rows pgx.Rows) error {
		var (
			target, state string
			n             int64
		)
		_, err := pgx.ForEachRow(rows, []any{&target, &state, &n}, func() error {
			if out[target] == nil {
				out[target] = make(map[lifecycle.DeliveryState]int64, len(lifecycle.CountedStates))
				for _, s := range lifecycle.CountedStates {
					out[target][s] = 0
				}
			}
			out[target][lifecycle.DeliveryState(state)] = n
			return nil
		})
		return err
	})
	return func() map[string]map[lifecycle.DeliveryState]int64 { return out }
}

// QueueTargetsOldestDue queues on b the read of how long before now each of
// the targets' most overdue delivery due for a wake-up has been due, as
// GET /stats gives it (targetStatsSQL's firstDueSQL); the returned function
// gives them once the batch is read, 0 for a target with none due.
func QueueTargetsOldestDue(b *pgx.Batch, now time.Time, targets []string) func() map[string]time.Duration {
	out := make(map[string]time.Duration, len(targets))
	b.Queue(`SELECT t.target, first.state, first.next_due FROM unnest($1::text[]) t(target) `+firstDueSQL, targets).Query(
		func(rows pgx.Rows) error {
			var (
				target string
				state  pgtype.Text
				next   pgtype.Timestamptz
			)
			_, err := pgx.ForEachRow(rows, []any{&target, &state, &next}, func() error {
				out[target] = oldestDue(now, lifecycle.DeliveryState(state.String), timeOf(next))
				return nil
			})
			return err
		})
	return func() map[string]time.Duration { return out }
}

// QueueDue queues on b the count of the deliveries due for a wake-up at now
// (lifecycle.WakeRule) and the oldest due time (dueSQL); the returned
// function gives them once the batch is read, the time zero when none is
// due.
func QueueDue(b *pgx.Batch, now time.Time) func() (int64, time.Time) {
	var (
		n      int64
		oldest pgtype.Timestamptz
	)
	b.Queue(dueSQL, now, dueExact).QueryRow(func(row pgx.Row) error { return row.Scan(&n, &oldest) })
	return func() (int64, time.Time) { return n, timeOf(oldest) }
}

// dueExact is how many entries of deliveries_due dueSQL reads at most on
// each side of now before it counts the other way.
const dueExact = 10_000

// dueSQL counts the deliveries due at $1 at a cost bounded by the smaller
// side of deliveries_due: the due ones (lifecycle.WakeRule) or those in
// the same states waiting for their time (lifecycle.WaitRule). It counts up
// to $2 due; past that, and short of $2 waiting, the due ones are the kept
// counts of the states less the waiting ones. That holds as every
// delivery in those states has a next_due and is of its message's current
// generation, so counted; the property test of the lifecycle checks both.
// Past $2 on both sides it counts the due ones whole. The oldest due time
// is the least of each state's first due entry.
var dueSQL = `WITH due AS (SELECT count(*) AS n FROM (SELECT FROM deliveries d WHERE ` +
	lifecycle.WakeRule.SQL("d", "$1") + ` LIMIT $2) x),
	waiting AS (SELECT count(*) AS n FROM (SELECT FROM deliveries d WHERE ` + lifecycle.WaitRule.SQL("d", "$1") + ` LIMIT $2) x)
	SELECT CASE
		WHEN (SELECT n FROM due) < $2 THEN (SELECT n FROM due)
		WHEN (SELECT n FROM waiting) < $2 THEN (SELECT coalesce(sum(c.n), 0)::bigint FROM delivery_counts c WHERE ` +
	lifecycle.WakeRule.StatesSQL("c") + `) - (SELECT n FROM waiting)
		ELSE (SELECT count(*) FROM deliveries d WHERE ` + lifecycle.WakeRule.SQL("d", "$1") + `)
	END, least(` + oldestDueSQL() + `)`

// oldestDueSQL is the first due entry of each of lifecycle.WakeRule's
// states, each one index lookup.
func oldestDueSQL() string {
	var firsts []string
	for _, s := range lifecycle.WakeRule.States() {
		firsts = append(firsts, `(SELECT min(d.next_due) FROM deliveries d WHERE `+lifecycle.WakeRule.StateSQL(s, "d", "$1")+`)`)
	}
	return strings.Join(firsts, ", ")
}

// scanCounts reads the rows of countsSQL into counts and closes them.
func scanCounts(rows pgx.Rows, counts map[lifecycle.DeliveryState]int64) error {
	var (
		state string
		n     int64
	)
	_, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		counts[lifecycle.DeliveryState(state)] = n
		return nil
	})
	return err
}

// insertMessagesSQL inserts the new messages of a batch in one statement,
// leaving payload_expunged to its default, false: a new message has its
// payload.
const insertMessagesSQL = `INSERT INTO messages (id, version, source, from_party, to_party, content_type,
	idempotency_key, ordering_key, duplicate_key, possible_duplicate_of, type, generation, payload_size, payload_sha256,
	stage, refusal, status, error, delivery_count, created_at, updated_at, traceparent, tracestate, baggage,
	headers)
	SELECT id, version, source, from_party, to_party, content_type, idempotency_key, ordering_key, duplicate_key,
		possible_duplicate_of, type, generation, payload_size, payload_sha256, stage, refusal, status, error,
		delivery_count, created_at, updated_at, traceparent, tracestate, baggage, headers::jsonb
	FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::text[], $10::uuid[], $11::text[], $12::int[], $13::bigint[], $14::text[], $15::text[], $16::text[],
		$17::text[], $18::text[], $19::int[], $20::timestamptz[], $21::timestamptz[], $22::text[], $23::text[],
		$24::text[], $25::text[])
		AS x(id, version, source, from_party, to_party, content_type, idempotency_key, ordering_key, duplicate_key,
			possible_duplicate_of, type, generation, payload_size, payload_sha256, stage, refusal, status, error,
			delivery_count, created_at, updated_at, traceparent, tracestate, baggage, headers)`

// newMessageColumns are the columns of insertMessagesSQL.
type newMessageColumns struct {
	id, possibleDuplicateOf                            []pgtype.UUID
	version, generation, deliveryCount                 []int32
	source, from, to, contentType, sha256              []string
	stage, status, error                               []string
	idempotencyKey, orderingKey, duplicateKey, typ     []pgtype.Text
	refusal, traceParent, traceState, baggage, headers []pgtype.Text
	payloadSize                                        []int64
	createdAt, updatedAt                               []time.Time
}

// add adds the new message m.
func (c *newMessageColumns) add(m *Message) {
	c.id = append(c.id, pgUUID(m.ID))
	c.version = append(c.version, int32(m.RowVersion))
	c.source, c.from, c.to = append(c.source, m.Source), append(c.from, m.From), append(c.to, m.To)
	c.contentType = append(c.contentType, m.ContentType)
	c.idempotencyKey = append(c.idempotencyKey, pgText(m.IdempotencyKey))
	c.orderingKey = append(c.orderingKey, pgText(m.OrderingKey))
	c.duplicateKey = append(c.duplicateKey, pgText(m.DuplicateKey))
	c.possibleDuplicateOf = append(c.possibleDuplicateOf, pgUUID(m.PossibleDuplicateOf))
	c.typ = append(c.typ, pgText(m.Type))
	c.generation = append(c.generation, int32(m.Generation))
	c.payloadSize = append(c.payloadSize, m.PayloadSize)
	c.sha256 = append(c.sha256, m.PayloadSHA256)
	c.stage = append(c.stage, string(m.Stage))
	c.refusal = append(c.refusal, pgText(string(m.Refusal)))
	c.status, c.error = append(c.status, string(m.Status)), append(c.error, m.Error)
	c.deliveryCount = append(c.deliveryCount, int32(m.currentDeliveries()))
	c.createdAt, c.updatedAt = append(c.createdAt, m.CreatedAt), append(c.updatedAt, m.RowUpdatedAt)
	c.traceParent = append(c.traceParent, pgText(m.Trace.Parent))
	c.traceState = append(c.traceState, pgText(m.Trace.State))
	c.baggage = append(c.baggage, pgText(m.Trace.Baggage))
	c.headers = append(c.headers, pgText(string(headersJSON(m.Headers))))
}

func (c *newMessageColumns) args() []any {
	return []any{c.id, c.version, c.source, c.from, c.to, c.contentType, c.idempotencyKey, c.orderingKey, c.duplicateKey,
		c.possibleDuplicateOf, c.typ, c.generation, c.payloadSize, c.sha256, c.stage, c.refusal, c.status, c.error,
		c.deliveryCount, c.createdAt, c.updatedAt, c.traceParent, c.traceState, c.baggage, c.headers}
}

// updateMessagesSQL updates the message rows of a batch, each where it is
// still at the row version read, in one statement.
var updateMessagesSQL = `WITH updated AS (
		UPDATE messages m SET version = x.version, stage = x.stage, refusal = x.refusal, status = x.status,
			error = x.error, delivery_count = x.delivery_count,
			updated_at = x.updated_at, generation = x.generation, payload_expunged = x.payload_expunged
		FROM unnest($1::uuid[], $2::int[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[],
			$9::timestamptz[], $10::int[], $11::boolean[])
			AS x(id, read_version, version, stage, refusal, status, error, delivery_count, updated_at,
				generation, payload_expunged)
		WHERE m.id = x.id AND m.version = x.read_version RETURNING m.id)
	` + expectUpdatedSQL("cardinality($1::uuid[])")

// expectUpdatedSQL is the end of a statement whose WITH query updated
// updates the rows read at their version, want of them: it fails the
// transaction as a serialization failure when fewer were still there
// (projection_expect_rows). The function is called only then: called in
// every transaction, it cost the drain's update about 10 µs a call
// (performance.md).
func expectUpdatedSQL(want string) string {
	return `SELECT projection_expect_rows(c.n, ` + want + `) FROM (SELECT count(*) AS n FROM updated) c WHERE c.n <> ` + want
}

// messageUpdates are the columns of updateMessagesSQL.
type messageUpdates struct {
	id                   []uuid.UUID
	readVersion, version []int
	stage, status, error []string
	refusal              []pgtype.Text
	deliveryCount, gens  []int
	updatedAt            []time.Time
	payloadExpunged      []bool
}

// add adds m, read at version read.
func (u *messageUpdates) add(read int, m *Message) {
	u.id = append(u.id, m.ID)
	u.readVersion, u.version = append(u.readVersion, read), append(u.version, m.RowVersion)
	u.stage = append(u.stage, string(m.Stage))
	u.refusal = append(u.refusal, pgText(string(m.Refusal)))
	u.status, u.error = append(u.status, string(m.Status)), append(u.error, m.Error)
	u.deliveryCount = append(u.deliveryCount, m.currentDeliveries())
	u.gens = append(u.gens, m.Generation)
	u.updatedAt = append(u.updatedAt, m.RowUpdatedAt)
	u.payloadExpunged = append(u.payloadExpunged, m.PayloadExpunged)
}

func (u *messageUpdates) args() []any {
	return []any{u.id, u.readVersion, u.version, u.stage, u.refusal, u.status, u.error, u.deliveryCount,
		u.updatedAt, u.gens, u.payloadExpunged}
}

const insertDeliveriesSQL = `INSERT INTO deliveries (id, message_id, message_created_at, seq, version, generation, target,
	lane_key, lane_seq, lane_continue, state, attempts, dispatch_count, redeliveries, redelivered_at,
	redelivered_attempts, next_due, claim_token, lease_end, last_error, created_at, updated_at, finished_at, shaped)
	SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::int[], $5::int[], $6::int[], $7::text[], $8::text[],
		$9::bigint[], $10::bool[], $11::text[], $12::int[], $13::int[], $14::int[], $15::timestamptz[], $16::int[],
		$17::timestamptz[], $18::uuid[], $19::timestamptz[], $20::text[], $21::timestamptz[], $22::timestamptz[],
		$23::timestamptz[], $24::bool[])`

// upsertDeliveriesSQL makes insertDeliveriesSQL update the rows there
// already. The deliveries of a new message are inserted without it: an
// insert that checks for a conflict costs several times a plain one.
const upsertDeliveriesSQL = `
	ON CONFLICT (id) DO UPDATE SET version = excluded.version, lane_key = excluded.lane_key, lane_seq = excluded.lane_seq,
		lane_continue = excluded.lane_continue,
		state = excluded.state, attempts = excluded.attempts,
		dispatch_count = excluded.dispatch_count, redeliveries = excluded.redeliveries,
		redelivered_at = excluded.redelivered_at, redelivered_attempts = excluded.redelivered_attempts,
		next_due = excluded.next_due, claim_token = excluded.claim_token, lease_end = excluded.lease_end,
		last_error = excluded.last_error, updated_at = excluded.updated_at, finished_at = excluded.finished_at`

// deliveryColumnsOf holds deliveries column by column, for unnest.
type deliveryColumnsOf struct {
	id, messageID, claimToken                    []pgtype.UUID
	seq, version, attempts, dispatches, redelivs []int32
	generation                                   []int32
	redeliveredAttempts                          []int32
	target, state, lastError                     []string
	laneKey                                      []pgtype.Text
	laneSeq                                      []int64
	laneContinue, shaped                         []bool
	nextDue, leaseEnd, finishedAt, redeliveredAt []pgtype.Timestamptz
	messageCreatedAt, createdAt, updatedAt       []time.Time
}

func (c *deliveryColumnsOf) add(d *Delivery) {
	c.id = append(c.id, pgUUID(d.ID))
	c.messageID = append(c.messageID, pgUUID(d.MessageID))
	c.messageCreatedAt = append(c.messageCreatedAt, d.MessageCreatedAt)
	c.seq = append(c.seq, int32(d.Seq))
	c.version = append(c.version, int32(d.Version))
	c.generation = append(c.generation, int32(d.Generation))
	c.target = append(c.target, d.Target)
	c.laneKey = append(c.laneKey, pgText(d.LaneKey))
	c.laneSeq = append(c.laneSeq, d.LaneSeq)
	c.laneContinue = append(c.laneContinue, d.LaneContinue)
	c.state = append(c.state, string(d.State))
	c.attempts = append(c.attempts, int32(d.Attempts))
	c.dispatches = append(c.dispatches, int32(d.DispatchCount))
	c.redelivs = append(c.redelivs, int32(d.Redeliveries))
	c.redeliveredAt = append(c.redeliveredAt, pgTime(d.RedeliveredAt))
	c.redeliveredAttempts = append(c.redeliveredAttempts, int32(d.RedeliveredAttempts))
	c.nextDue = append(c.nextDue, pgTime(d.NextDue))
	c.claimToken = append(c.claimToken, pgUUID(d.ClaimToken))
	c.leaseEnd = append(c.leaseEnd, pgTime(d.LeaseEnd))
	c.lastError = append(c.lastError, d.LastError)
	c.createdAt = append(c.createdAt, d.CreatedAt)
	c.updatedAt = append(c.updatedAt, d.UpdatedAt)
	c.finishedAt = append(c.finishedAt, pgTime(d.FinishedAt))
	c.shaped = append(c.shaped, d.Shaped)
}

func (c *deliveryColumnsOf) args() []any {
	return []any{c.id, c.messageID, c.messageCreatedAt, c.seq, c.version, c.generation, c.target, c.laneKey, c.laneSeq, c.laneContinue, c.state, c.attempts, c.dispatches,
		c.redelivs, c.redeliveredAt, c.redeliveredAttempts, c.nextDue, c.claimToken, c.leaseEnd, c.lastError,
		c.createdAt, c.updatedAt, c.finishedAt, c.shaped}
}

// headersJSON is a message's headers as their column holds them: NULL for
// none.
func headersJSON(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	data, _ := json.Marshal(h) // a map of strings always encodes
	return data
}

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: id != uuid.Nil} }

func pgTime(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

func pgText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }
