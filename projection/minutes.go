package projection

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// MinutesKept is how long the outcomes by the minute are kept: retention
// deletes older minutes. The charts read the last 24 hours; the rest is a
// margin for a retention pass that runs late.
const MinutesKept = 48 * time.Hour

// minuteShards is the number of rows each count of outcomes by the minute
// is spread over, as the messages' counts are.
const minuteShards = MessageCountShards

// The classes of an attempt's answer kept with its outcome.
const (
	ClassNone = "none"
	Class2xx  = "2xx"
	Class3xx  = "3xx"
	Class4xx  = "4xx"
	Class5xx  = "5xx"
)

// Classes are the classes of an answer in the order the charts show them.
var Classes = []string{Class2xx, Class3xx, Class4xx, Class5xx, ClassNone}

// latencyBounds are the upper bounds of the buckets of the time from a
// message's ingest to a delivery's outcome: 5 ms doubling to about 5.8
// hours; a bucket past the last holds the rest. Log-spaced, so a quantile
// read from them is off by less than the bucket's width, a factor of 2 at
// worst, whatever the scale.
var latencyBounds = func() []time.Duration {
	out := make([]time.Duration, 23)
	for i := range out {
		out[i] = 5 * time.Millisecond << i
	}
	return out
}()

// noBucket is the bucket of an outcome other than delivered.
const noBucket = -1

// latencyBucket is the bucket d falls in.
func latencyBucket(d time.Duration) int {
	i, _ := slices.BinarySearch(latencyBounds, d)
	return i
}

// minuteKey is the key of a count of outcomes by the minute.
type minuteKey struct {
	target string
	minute int64 // Unix seconds
	// outcome is the state the outcome left the delivery in.
	outcome lifecycle.DeliveryState
	class   string
	bucket  int
}

// compareMinuteKeys orders keys as delivery_minute_counts' key does.
func compareMinuteKeys(a, b minuteKey) int {
	return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.minute, b.minute), cmp.Compare(a.outcome, b.outcome),
		cmp.Compare(a.class, b.class), cmp.Compare(a.bucket, b.bucket))
}

// outcomeOf is the key of the count e adds to, when e records the outcome
// of an attempt or of an awaited receipt: it moves a delivery out of
// delivering or awaiting_ack into another of delivered, retrying, failed
// and awaiting_ack. created is the message's ingest.
func outcomeOf(e *journal.Event, created time.Time) (minuteKey, bool) {
	switch {
	case e.OldState == e.NewState, // a receipt that settles nothing
		e.OldState != lifecycle.StateDelivering && e.OldState != lifecycle.StateAwaitingAck,
		e.NewState != lifecycle.StateDelivered && e.NewState != lifecycle.StateRetrying &&
			e.NewState != lifecycle.StateFailed && e.NewState != lifecycle.StateAwaitingAck:
		return minuteKey{}, false
	}
	k := minuteKey{target: e.Target, minute: e.RecordedAt.Truncate(time.Minute).Unix(), outcome: e.NewState,
		class: ClassNone, bucket: noBucket}
	if p, ok := e.Payload.(*journal.DeliveryAttempted); ok {
		k.class = statusClass(p.Outcome.Text)
	}
	if e.NewState == lifecycle.StateDelivered {
		k.bucket = latencyBucket(e.RecordedAt.Sub(created))
	}
	return k, true
}

// statusClass is the class of the HTTP status an outcome's text begins
// with (an http target's text is the answer's status line first), none
// for a text that begins with none: an error before any answer, a file
// target's write.
func statusClass(text string) string {
	if len(text) < 4 || text[3] != ' ' || text[0] < '1' || text[0] > '5' {
		return ClassNone
	}
	for _, c := range text[1:3] {
		if c < '0' || c > '9' {
			return ClassNone
		}
	}
	return text[:1] + "xx"
}

// addOutcome adds sign times the outcome e records, if it records one,
// to the tally, in the minute it was recorded in; created is the
// message's ingest. The projector adds a write's events with +1, the fold
// every event; retention's removal adds the removed streams' with -1, so
// the counts stay the fold of the journal.
func (t *Tally) addOutcome(e *journal.Event, created time.Time, sign int64) {
	if k, ok := outcomeOf(e, created); ok {
		if t.minutes == nil {
			t.minutes = map[minuteKey]int64{}
		}
		t.minutes[k] += sign
	}
}

// addMinuteCountsSQL adds to the backend's shard of each count from the
// minute delivery_minutes_kept holds on: the minutes before it are gone,
// and a removal must not bring them back as negative counts.
const addMinuteCountsSQL = `INSERT INTO delivery_minute_counts (target, minute, outcome, class, bucket, shard, n)
	SELECT k.target, k.minute, k.outcome, k.class, k.bucket, pg_backend_pid() % $7, k.n
	FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::smallint[], $6::bigint[]) AS k(target, minute, outcome, class, bucket, n)
	WHERE k.minute >= coalesce((SELECT since FROM delivery_minutes_kept), '-infinity')
	ON CONFLICT (target, minute, outcome, class, bucket, shard) DO UPDATE SET n = delivery_minute_counts.n + excluded.n`

// queueMinutes queues the upsert of the counts of outcomes that change,
// in the order of their keys.
func queueMinutes(b *pgx.Batch, counts map[minuteKey]int64) {
	var (
		targets, outcomes, classes []string
		minutes                    []time.Time
		buckets                    []int16
		ns                         []int64
	)
	for _, k := range slices.SortedFunc(maps.Keys(counts), compareMinuteKeys) {
		if n := counts[k]; n != 0 {
			targets, minutes, outcomes = append(targets, k.target), append(minutes, time.Unix(k.minute, 0).UTC()), append(outcomes, string(k.outcome))
			classes, buckets, ns = append(classes, k.class), append(buckets, int16(k.bucket)), append(ns, n)
		}
	}
	if len(ns) > 0 {
		b.Queue(addMinuteCountsSQL, targets, minutes, outcomes, classes, buckets, ns, minuteShards)
	}
}

// checkMinutes compares the kept counts of outcomes by the minute with the
// fold's, from the minute retention keeps on.
func checkMinutes(ctx context.Context, q journal.Querier, want map[minuteKey]int64) ([]Violation, error) {
	from := int64(math.MinInt64)
	err := scanRows(ctx, q, `SELECT since FROM delivery_minutes_kept`, nil, func(rows pgx.Rows) error {
		var since time.Time
		err := rows.Scan(&since)
		from = since.Unix()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit outcomes by the minute: %w", err)
	}
	stored := map[minuteKey]int64{}
	var (
		k      minuteKey
		minute time.Time
		bucket int16
		n      int64
	)
	err = scanRows(ctx, q, `SELECT target, minute, outcome, class, bucket, sum(n)::bigint FROM delivery_minute_counts
		GROUP BY target, minute, outcome, class, bucket`, nil, func(rows pgx.Rows) error {
		err := rows.Scan(&k.target, &minute, &k.outcome, &k.class, &bucket, &n)
		k.minute, k.bucket = minute.Unix(), int(bucket)
		if k.minute >= from {
			stored[k] = n
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("audit outcomes by the minute: %w", err)
	}
	var out []Violation
	for _, k := range slices.SortedFunc(maps.Keys(union(stored, want)), compareMinuteKeys) {
		if got := stored[k]; got != want[k] && k.minute >= from {
			of := fmt.Sprintf("%s outcomes (%s", k.outcome, k.class)
			if k.bucket != noBucket {
				of += fmt.Sprintf(", latency bucket %d", k.bucket)
			}
			out = append(out, Violation{Problem: fmt.Sprintf("the count of %s) of %s in the minute from %s is %d, the journal makes %d",
				of, k.target, time.Unix(k.minute, 0).UTC().Format(time.RFC3339), got, want[k])})
		}
	}
	return out, nil
}

// TidyMinutes keeps the outcomes by the minute small, at now: it deletes
// the minutes older than MinutesKept, recording where the kept ones begin
// (the horizon below which no count is written or audited; it never moves
// back), and folds the shards of each minute before the last into shard
// 0, so a chart reads a row per minute and key, not one per backend that
// wrote it. Rows a transaction holds are left for the next time; a count
// written to a folded minute later takes a row of its own again. It
// returns the rows deleted and folded.
func TidyMinutes(ctx context.Context, q journal.Querier, now time.Time) (pruned, folded int64, err error) {
	now = now.UTC().Truncate(time.Minute)
	horizon := now.Add(-MinutesKept)
	err = scanRows(ctx, q, `WITH kept AS (INSERT INTO delivery_minutes_kept (since) VALUES ($1)
			ON CONFLICT (singleton) DO UPDATE SET since = greatest(delivery_minutes_kept.since, excluded.since)),
		gone AS (DELETE FROM delivery_minute_counts WHERE minute < $1 RETURNING 1)
		SELECT count(*) FROM gone`, []any{horizon}, func(rows pgx.Rows) error { return rows.Scan(&pruned) })
	if err == nil {
		err = scanRows(ctx, q, foldMinutesSQL, []any{horizon, now.Add(-time.Minute)}, func(rows pgx.Rows) error { return rows.Scan(&folded) })
	}
	if err != nil {
		return 0, 0, fmt.Errorf("tidy the outcomes by the minute: %w", err)
	}
	return pruned, folded, nil
}

// foldMinutesSQL moves the counts of shards other than 0 of the minutes
// from $1 to before $2 into shard 0. It skips the rows a transaction
// holds, so it waits for none: the only lock it may wait for is a row of
// shard 0, and whoever holds one (a removal whose backend's shard is 0)
// waits for none of the rows it deleted.
const foldMinutesSQL = `WITH moved AS (DELETE FROM delivery_minute_counts c
		USING (SELECT ctid FROM delivery_minute_counts WHERE minute >= $1 AND minute < $2 AND shard <> 0 FOR UPDATE SKIP LOCKED) s
		WHERE c.ctid = s.ctid RETURNING c.target, c.minute, c.outcome, c.class, c.bucket, c.n),
	summed AS (INSERT INTO delivery_minute_counts (target, minute, outcome, class, bucket, shard, n)
		SELECT target, minute, outcome, class, bucket, 0, sum(n) FROM moved GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
		ON CONFLICT (target, minute, outcome, class, bucket, shard) DO UPDATE SET n = delivery_minute_counts.n + excluded.n)
	SELECT count(*) FROM moved`

// MinuteCount is a kept count of outcomes in one minute, summed over the
// shards (and over the targets, for all of them).
type MinuteCount struct {
	Minute time.Time
	// Outcome is the state the outcome left the delivery in: delivered,
	// retrying, failed or awaiting_ack.
	Outcome lifecycle.DeliveryState
	// Class is the class of the answer's HTTP status, one of Classes.
	Class string
	// Bucket is the latency bucket of a delivered outcome (LatencyBounds);
	// -1 for the others.
	Bucket int
	N      int64
}

// LatencyBounds are the upper bounds of the latency buckets, in order;
// bucket len(LatencyBounds) holds what is longer.
func LatencyBounds() []time.Duration { return slices.Clone(latencyBounds) }

// ReadMinutes reads the kept outcomes by the minute from since on, of one
// target or, for "", of all: those before fine summed by step (each sum
// at the start of its step, counted from the Unix epoch), the others by
// the minute. Rows of minutes no older than MinutesKept, one per minute
// and key once retention has tidied them, whatever the number of
// messages.
func ReadMinutes(ctx context.Context, q journal.Querier, target string, since, fine time.Time, step time.Duration) ([]MinuteCount, error) {
	// A target's is a range of the table's key, all targets' a range of
	// delivery_minute_counts_minute.
	where, args := `minute >= $1`, []any{since.UTC().Truncate(time.Minute), fine.UTC(), step}
	if target != "" {
		where, args = `target = $4 AND minute >= $1`, append(args, target)
	}
	sql := `SELECT CASE WHEN minute >= $2 THEN minute ELSE date_bin($3::interval, minute, 'epoch') END,
		outcome, class, bucket, sum(n)::bigint FROM delivery_minute_counts WHERE ` + where +
		` GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`
	var (
		out    []MinuteCount
		c      MinuteCount
		bucket int16
	)
	err := scanRows(ctx, q, sql, args, func(rows pgx.Rows) error {
		err := rows.Scan(&c.Minute, &c.Outcome, &c.Class, &bucket, &c.N)
		c.Minute, c.Bucket = c.Minute.UTC(), int(bucket)
		out = append(out, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read outcomes by the minute: %w", err)
	}
	return out, nil
}

// LatencyQuantile is the q-quantile (0 < q < 1) of the latencies counted
// by bucket (index as LatencyBounds), interpolated linearly within its
// bucket; false when none is counted. A quantile in the last bucket,
// which has no upper bound, is its lower bound.
func LatencyQuantile(byBucket []int64, q float64) (time.Duration, bool) {
	var total int64
	for _, n := range byBucket {
		total += n
	}
	if total <= 0 {
		return 0, false
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range byBucket {
		if n <= 0 || float64(seen+n) < rank {
			seen += max(n, 0)
			continue
		}
		var lo time.Duration
		if i > 0 {
			lo = latencyBounds[min(i, len(latencyBounds))-1]
		}
		if i >= len(latencyBounds) {
			return lo, true
		}
		frac := (rank - float64(seen)) / float64(n)
		return lo + time.Duration(frac*float64(latencyBounds[i]-lo)), true
	}
	return latencyBounds[len(latencyBounds)-1], true
}
