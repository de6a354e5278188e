package projection

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// Tally is a change to the counts the projector keeps so that no figure
// counts the messages or the deliveries: the deliveries of each message's
// current generation by target and state (delivery_counts), the messages by status
// (message_counts) and by status and hour of creation
// (message_hour_counts), and the outcomes of attempts by the minute
// (delivery_minute_counts). Whatever writes the projection
// tables adds to a tally what it changes and queues the tally in the same
// transaction: Queue for the commands, the rebuild for the whole journal,
// QueueRemove for the messages retention deletes, each added with sign -1.
type Tally struct {
	deliveries map[targetState]int64
	messages   map[statusHour]int64
	minutes    map[minuteKey]int64
}

// statusHour is the key of a message count: a status and the hour the
// messages were created in, in Unix seconds (a time.Time is a poor map
// key: one instant has several representations).
type statusHour struct {
	status lifecycle.MessageStatus
	hour   int64
}

// createdHour is the start of the hour that holds t, in Unix seconds:
// hours of UTC, whatever the time zone of the server or of the session.
func createdHour(t time.Time) int64 { return t.Truncate(time.Hour).Unix() }

// compareStatusHours orders keys as message_hour_counts' key does.
func compareStatusHours(a, b statusHour) int {
	return cmp.Or(cmp.Compare(a.status, b.status), cmp.Compare(a.hour, b.hour))
}

// Add adds sign times m to the tally: its status in the hour of its
// creation, and its current generation's deliveries by state. A write
// adds the message as it was read with sign -1 and as it is now with +1,
// so a change of status moves one count from the old status to the new
// one, in the hour the message was created.
func (t *Tally) Add(m *Message, sign int64) {
	if t.deliveries == nil {
		t.deliveries = map[targetState]int64{}
		t.messages = map[statusHour]int64{}
	}
	m.countInto(t.deliveries, sign)
	t.messages[statusHour{m.Status, createdHour(m.CreatedAt)}] += sign
}

// Queue queues on b the upserts that add the tally to the kept counts,
// nothing for a count it leaves as it was. Each writes the rows of the
// backend's shard, in the order of their keys, and the tables come in the
// same order every time, so two transactions on one shard cannot wait for
// each other in a cycle. Queue them after every other write of the
// transaction: a transaction then holds its shard's rows only while it
// commits, as every lock it may wait for (a message row, an idempotency
// key) it has taken before.
func (t *Tally) Queue(b *pgx.Batch) {
	queueCounts(b, t.deliveries)
	byStatus := t.byStatus()
	var (
		statuses []string
		ns       []int64
	)
	for _, s := range slices.Sorted(maps.Keys(byStatus)) {
		if n := byStatus[s]; n != 0 {
			statuses, ns = append(statuses, string(s)), append(ns, n)
		}
	}
	if len(statuses) > 0 {
		b.Queue(addMessageCountsSQL, statuses, ns, MessageCountShards)
	}
	byHour := t.byHour()
	keys := slices.SortedFunc(maps.Keys(byHour), compareStatusHours)
	// New slices: b holds the others until it is sent.
	statuses, ns = nil, nil
	var hours []time.Time
	for _, k := range keys {
		if n := byHour[k]; n != 0 {
			statuses, hours, ns = append(statuses, string(k.status)), append(hours, time.Unix(k.hour, 0).UTC()), append(ns, n)
		}
	}
	if len(statuses) > 0 {
		b.Queue(addMessageHourCountsSQL, statuses, hours, ns, MessageCountShards)
	}
	queueMinutes(b, t.minutes)
}

// byStatus sums the tally's message counts over the hours.
func (t *Tally) byStatus() map[lifecycle.MessageStatus]int64 {
	out := map[lifecycle.MessageStatus]int64{}
	for k, n := range t.messages {
		out[k.status] += n
	}
	return out
}

// anyStatus is the status of the rows of message_hour_counts that count
// the messages created in their hour whatever their status: the 7-day
// figure sums one row per hour and shard, not one per status.
const anyStatus lifecycle.MessageStatus = ""

// byHour is the rows of message_hour_counts the tally changes: the counts
// by status and hour, and by hour for anyStatus.
func (t *Tally) byHour() map[statusHour]int64 {
	out := make(map[statusHour]int64, len(t.messages)+1)
	for k, n := range t.messages {
		out[k] += n
		out[statusHour{anyStatus, k.hour}] += n
	}
	return out
}

// MessageCountShards is the number of rows each kept count of messages is
// spread over, fewer than delivery_counts' 64: the figures of /stats sum
// up to this many rows for each status and hour of a week.
const MessageCountShards = 16

const addMessageCountsSQL = `INSERT INTO message_counts (shard, status, n)
	SELECT pg_backend_pid() % $3, k.status, k.n FROM unnest($1::text[], $2::bigint[]) AS k(status, n)
	ON CONFLICT (shard, status) DO UPDATE SET n = message_counts.n + excluded.n`

const addMessageHourCountsSQL = `INSERT INTO message_hour_counts (status, hour, shard, n)
	SELECT k.status, k.hour, pg_backend_pid() % $4, k.n FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS k(status, hour, n)
	ON CONFLICT (status, hour, shard) DO UPDATE SET n = message_hour_counts.n + excluded.n`

// tally is the fold's counts: every message added once, and the
// outcomes of every event.
func (f *Folded) tally() Tally {
	t := Tally{minutes: f.outcomes.minutes}
	for _, m := range f.inOrder {
		t.Add(m, 1)
	}
	return t
}

// checkCounts compares the kept counts with the fold's: the deliveries by
// state, the messages by status and by status and hour of creation. A
// count that differs is a violation that names no message.
func checkCounts(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	want := f.tally()
	stored := map[targetState]int64{}
	var (
		target, state string
		count         int64
	)
	err := scanRows(ctx, q, targetCountsSQL, nil, func(rows pgx.Rows) error {
		err := rows.Scan(&target, &state, &count)
		stored[targetState{target, lifecycle.DeliveryState(state)}] = count
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit delivery counts: %w", err)
	}
	var out []Violation
	for _, k := range slices.SortedFunc(maps.Keys(union(stored, want.deliveries)), compareTargetStates) {
		if got := stored[k]; got != want.deliveries[k] {
			out = append(out, Violation{Problem: fmt.Sprintf("the count of %s deliveries to %s is %d, the journal makes %d",
				k.state, k.target, got, want.deliveries[k])})
		}
	}
	var (
		status string
		hour   time.Time
		n      int64
	)
	byStatus := map[lifecycle.MessageStatus]int64{}
	err = scanRows(ctx, q, `SELECT status, sum(n)::bigint FROM message_counts GROUP BY status`, nil, func(rows pgx.Rows) error {
		err := rows.Scan(&status, &n)
		byStatus[lifecycle.MessageStatus(status)] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit message counts: %w", err)
	}
	wantByStatus := want.byStatus()
	for _, s := range slices.Sorted(maps.Keys(union(byStatus, wantByStatus))) {
		if got := byStatus[s]; got != wantByStatus[s] {
			out = append(out, Violation{Problem: fmt.Sprintf("the count of %s messages is %d, the journal makes %d", s, got, wantByStatus[s])})
		}
	}
	byHour := map[statusHour]int64{}
	err = scanRows(ctx, q, `SELECT status, hour, sum(n)::bigint FROM message_hour_counts GROUP BY status, hour`, nil, func(rows pgx.Rows) error {
		err := rows.Scan(&status, &hour, &n)
		byHour[statusHour{lifecycle.MessageStatus(status), hour.Unix()}] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit message counts by hour: %w", err)
	}
	wantByHour := want.byHour()
	for _, k := range slices.SortedFunc(maps.Keys(union(byHour, wantByHour)), compareStatusHours) {
		if got := byHour[k]; got != wantByHour[k] {
			of := string(k.status) + " messages"
			if k.status == anyStatus {
				of = "messages"
			}
			out = append(out, Violation{Problem: fmt.Sprintf("the count of %s created in the hour from %s is %d, the journal makes %d",
				of, time.Unix(k.hour, 0).UTC().Format(time.RFC3339), got, wantByHour[k])})
		}
	}
	minutes, err := checkMinutes(ctx, q, want.minutes)
	return append(out, minutes...), err
}

// union is the set of the keys of a and b.
func union[K comparable](a, b map[K]int64) map[K]struct{} {
	out := make(map[K]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}
