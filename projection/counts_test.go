package projection

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// counted is a message of a status, created at, of generation gen, with
// deliveries of the given generations and states.
func counted(status lifecycle.MessageStatus, at time.Time, gen int, deliveries ...Delivery) *Message {
	return &Message{Status: status, CreatedAt: at, Generation: gen, Deliveries: deliveries}
}

func delivery(gen int, state lifecycle.DeliveryState) Delivery {
	return Delivery{Generation: gen, Target: "billing", State: state}
}

// countStatements lists the upserts of kept counts queued on b, one line
// each: the table and the arguments.
func countStatements(b *pgx.Batch) []string {
	tables := map[string]string{addCountsSQL: "delivery_counts", addMessageCountsSQL: "message_counts",
		addMessageHourCountsSQL: "message_hour_counts"}
	var out []string
	for _, q := range b.QueuedQueries {
		if table, ok := tables[q.SQL]; ok {
			args := q.Arguments[:len(q.Arguments)-1] // the shards
			for i, a := range args {
				if ts, ok := a.([]time.Time); ok {
					hours := make([]string, len(ts))
					for j, t := range ts {
						hours[j] = t.Format(time.RFC3339)
					}
					args[i] = hours
				}
			}
			out = append(out, table+fmt.Sprint(args))
		}
	}
	return out
}

// TestTallyMovesCountsInTheHourOfCreation: a write takes the message as it
// was out of the counts and adds it as it is, so a change of status moves
// one count between statuses in the hour the message was created, whenever
// the change happens, and only a new message (or a deleted one) changes
// the hour's count of any status (""); counts that do not change are not
// written; the rows go in the order of their keys.
func TestTallyMovesCountsInTheHourOfCreation(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 15, 0, 0, time.UTC)
	lastMicro := time.Date(2026, 12, 1, 7, 59, 59, 999_999_000, time.UTC)
	kolkata := time.FixedZone("IST", 5*3600+1800)
	cases := []struct {
		name   string
		writes []Write
		want   []string
	}{{
		name:   "ingest",
		writes: []Write{{Message: counted("in_progress", at, 1, delivery(1, "queued"), delivery(1, "queued"))}},
		want: []string{"delivery_counts[[billing] [queued] [2]]", "message_counts[[in_progress] [1]]",
			"message_hour_counts[[ in_progress] [2026-12-01T08:00:00Z 2026-12-01T08:00:00Z] [1 1]]"},
	}, {
		name: "a claim leaves the status",
		writes: []Write{{Before: counted("in_progress", at, 1, delivery(1, "queued"), delivery(1, "queued")),
			Message: counted("in_progress", at, 1, delivery(1, "delivering"), delivery(1, "queued"))}},
		want: []string{"delivery_counts[[billing billing] [delivering queued] [1 -1]]"},
	}, {
		name: "a change of status counts in the hour of creation",
		writes: []Write{{Before: counted("in_progress", lastMicro, 1, delivery(1, "delivering")),
			Message: counted("delivered", lastMicro, 1, delivery(1, "delivered"))}},
		want: []string{"delivery_counts[[billing billing] [delivered delivering] [1 -1]]", "message_counts[[delivered in_progress] [1 -1]]",
			"message_hour_counts[[delivered in_progress] [2026-12-01T07:00:00Z 2026-12-01T07:00:00Z] [1 -1]]"},
	}, {
		name:   "the hour is UTC's",
		writes: []Write{{Message: counted("refused", time.Date(2026, 12, 1, 13, 45, 0, 0, kolkata), 1)}},
		want: []string{"message_counts[[refused] [1]]",
			"message_hour_counts[[ refused] [2026-12-01T08:00:00Z 2026-12-01T08:00:00Z] [1 1]]"},
	}, {
		name: "a new generation leaves the last one out",
		writes: []Write{{Before: counted("error", at, 1, delivery(1, "failed"), delivery(1, "delivered")),
			Message: counted("in_progress", at, 2, delivery(1, "superseded"), delivery(1, "delivered"), delivery(2, "queued"))}},
		want: []string{"delivery_counts[[billing billing billing] [delivered failed queued] [-1 -1 1]]", "message_counts[[error in_progress] [-1 1]]",
			"message_hour_counts[[error in_progress] [2026-12-01T08:00:00Z 2026-12-01T08:00:00Z] [-1 1]]"},
	}, {
		name: "moves that cancel out write nothing",
		writes: []Write{
			{Message: counted("received", at, 1)},
			{Before: counted("in_progress", at, 1), Message: counted("delivered", at, 1)},
			{Before: counted("delivered", at.Add(time.Hour), 1), Message: counted("in_progress", at.Add(time.Hour), 1)},
		},
		want: []string{"message_counts[[received] [1]]",
			"message_hour_counts[[ delivered delivered in_progress in_progress received] " +
				"[2026-12-01T08:00:00Z 2026-12-01T08:00:00Z 2026-12-01T09:00:00Z 2026-12-01T08:00:00Z 2026-12-01T09:00:00Z 2026-12-01T08:00:00Z] [1 1 -1 -1 1 1]]"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &pgx.Batch{}
			Queue(b, nil, c.writes...)
			if got := countStatements(b); !slices.Equal(got, c.want) {
				t.Errorf("queued\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// TestTallyTakesOutADeletedMessage: whatever deletes a message adds it with
// sign -1.
func TestTallyTakesOutADeletedMessage(t *testing.T) {
	var tally Tally
	tally.Add(counted("stalled", time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), 2,
		delivery(1, "superseded"), delivery(2, "stalled"), delivery(2, "delivered")), -1)
	b := &pgx.Batch{}
	tally.Queue(b)
	want := []string{"delivery_counts[[billing billing] [delivered stalled] [-1 -1]]", "message_counts[[stalled] [-1]]",
		"message_hour_counts[[ stalled] [2026-12-01T08:00:00Z 2026-12-01T08:00:00Z] [-1 -1]]"}
	if got := countStatements(b); !slices.Equal(got, want) {
		t.Errorf("queued\n%s\nwant\n%s", got, want)
	}
}

// TestHourFrom: a window sums the kept counts from the first whole hour at
// or after its start.
func TestHourFrom(t *testing.T) {
	at := func(h, m, s, ns int) time.Time { return time.Date(2026, 12, 1, h, m, s, ns, time.UTC) }
	for _, c := range []struct{ t, want time.Time }{
		{at(8, 0, 0, 0), at(8, 0, 0, 0)},
		{at(8, 0, 0, 1000), at(9, 0, 0, 0)},
		{at(8, 59, 59, 999_999_000), at(9, 0, 0, 0)},
		{at(23, 30, 0, 0), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 1, 14, 0, 0, 0, time.FixedZone("IST", 5*3600+1800)), at(9, 0, 0, 0)},
	} {
		if got := hourFrom(c.t); !got.Equal(c.want) {
			t.Errorf("hourFrom(%s) = %s, want %s", c.t, got, c.want)
		}
	}
}
