package projection_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// plainStatsSQL is what ReadStats reads from the kept counts, counted from
// the rows themselves.
var plainStatsSQL = `SELECT
	count(*) FILTER (WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(func(s lifecycle.MessageStatus) bool { return !s.Settled() })) + `),
	count(*) FILTER (WHERE ` + lifecycle.StatusesSQL("status", lifecycle.StatusesWhere(lifecycle.MessageStatus.Faulted)) + ` AND created_at >= $1),
	count(*) FILTER (WHERE status = 'refused' AND created_at >= $1),
	count(*) FILTER (WHERE created_at >= $2)
	FROM messages`

// plainStats is the figures of ReadStats at now, counted from the rows:
// the deliveries by state are those of each message's current generation.
func (b *bundle) plainStats(t *testing.T, now time.Time) projection.Stats {
	t.Helper()
	out := projection.Stats{DeliveriesByState: map[lifecycle.DeliveryState]int64{}}
	for _, s := range lifecycle.CountedStates {
		out.DeliveriesByState[s] = 0
	}
	batch := &pgx.Batch{}
	batch.Queue(plainStatsSQL, now.Add(-24*time.Hour), now.Add(-7*24*time.Hour)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.InFlightMessages, &out.FailedLast24h, &out.RefusedLast24h, &out.MessagesLast7d)
	})
	batch.Queue(`SELECT d.state, count(*) FROM deliveries d JOIN messages m ON m.id = d.message_id
		WHERE d.generation = m.generation GROUP BY d.state`).Query(func(rows pgx.Rows) error {
		var (
			state string
			n     int64
		)
		_, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
			out.DeliveriesByState[lifecycle.DeliveryState(state)] = n
			return nil
		})
		return err
	})
	batch.Queue(`SELECT count(*), min(d.next_due) FROM deliveries d WHERE `+lifecycle.WakeRule.SQL("d", "$1"), now).
		QueryRow(func(row pgx.Row) error {
			var oldest *time.Time
			if err := row.Scan(&out.DueDeliveries, &oldest); err != nil {
				return err
			}
			if oldest != nil {
				out.OldestDue = projection.Overdue(now, *oldest)
			}
			return nil
		})
	batch.Queue(plainTargetStatsSQL, now.Add(-24*time.Hour), now).Query(func(rows pgx.Rows) error {
		var (
			ts     projection.TargetStats
			oldest *time.Time
		)
		_, err := pgx.ForEachRow(rows, []any{&ts.Target, &ts.InFlight, &ts.FailedLast24h, &oldest}, func() error {
			// ts is scanned into row after row: a target with none due
			// must not keep the figure of the one before.
			ts.OldestDue = 0
			if oldest != nil {
				// As ReadStats: the database keeps microseconds.
				ts.OldestDue = max(0, now.Truncate(time.Microsecond).Sub(*oldest))
			}
			out.Targets = append(out.Targets, ts)
			return nil
		})
		return err
	})
	if err := b.db.SendBatch(b.ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// plainTargetStatsSQL is each target's figures counted from the rows of
// the current generations' deliveries.
var plainTargetStatsSQL = `SELECT d.target,
	count(*) FILTER (WHERE ` + lifecycle.StatusesSQL("d.state", lifecycle.StatesWhere(lifecycle.DeliveryState.InFlight)) + `),
	count(*) FILTER (WHERE ` + lifecycle.StatusesSQL("d.state", lifecycle.StatesWhere(lifecycle.DeliveryState.Faulted)) + ` AND m.created_at >= $1),
	min(d.next_due) FILTER (WHERE ` + lifecycle.WakeRule.SQL("d", "$2") + `)
	FROM deliveries d JOIN messages m ON m.id = d.message_id WHERE d.generation = m.generation
	GROUP BY d.target ORDER BY d.target`

// checkStats compares ReadStats with the plain counts at now and at times
// around it: the windows' starts on an hour, a microsecond either side of
// one, and inside one.
func (b *bundle) checkStats(t *testing.T, rng *rand.Rand) {
	t.Helper()
	hour := b.now.Truncate(time.Hour)
	for _, now := range []time.Time{b.now, hour, hour.Add(time.Microsecond), hour.Add(-time.Microsecond),
		hour.Add(-time.Duration(rng.Int64N(int64(200 * time.Hour))))} {
		got, err := projection.ReadStats(b.ctx, b.db, now)
		if err != nil {
			t.Fatal(err)
		}
		want := b.plainStats(t, now)
		if got.InFlightMessages != want.InFlightMessages || got.FailedLast24h != want.FailedLast24h ||
			got.RefusedLast24h != want.RefusedLast24h || got.MessagesLast7d != want.MessagesLast7d ||
			!maps.Equal(got.DeliveriesByState, want.DeliveriesByState) || !slices.Equal(got.Targets, want.Targets) ||
			got.DueDeliveries != want.DueDeliveries || got.OldestDue != want.OldestDue {
			t.Fatalf("at %s the stats are\n%+v\nthe rows count\n%+v", now, got, want)
		}
		// The due count read each way: counted, the kept counts less the
		// waiting ones, counted past both bounds.
		for _, exact := range []int{1, 3, 10_000} {
			n, oldest, err := projection.ReadDue(b.ctx, b.db, now, exact)
			if err != nil {
				t.Fatal(err)
			}
			if n != want.DueDeliveries || projection.Overdue(now, oldest) != want.OldestDue {
				t.Fatalf("at %s, reading at most %d entries a side: %d due, oldest %s ago; the rows count %d, %s",
					now, exact, n, projection.Overdue(now, oldest), want.DueDeliveries, want.OldestDue)
			}
		}
	}
}

// TestStatsEqualPlainCounts runs messages through random lives over days,
// several writers at once (so the counts are spread over several shards),
// the clock moving between rounds by up to six hours: messages change
// status hours after their creation, and go through new generations.
// After every round the figures of /stats equal plain counts of the rows,
// for windows that begin on an hour, beside one and inside one; at the
// end the audit finds nothing, and after a rebuild the figures are the
// same. Three writers over eight days read the stats at a time when one
// target has a delivery due for hours and the other none.
func TestStatsEqualPlainCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ writers, days int }{{4, 9}, {3, 8}} {
		t.Run(fmt.Sprintf("%d writers over %d days", tc.writers, tc.days), func(t *testing.T) {
			t.Parallel()
			statsEqualPlainCounts(t, tc.writers, time.Duration(tc.days)*24*time.Hour)
		})
	}
}

// statsEqualPlainCounts is TestStatsEqualPlainCounts with writers writers
// over the span.
func statsEqualPlainCounts(t *testing.T, writers int, span time.Duration) {
	b := setup(t)
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 1}}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	// Each writer acts on its own messages only, so no two race for one.
	owned := make([][]*projection.Message, writers)
	end := b.now.Add(span)
	round := 0
	for b.now.Before(end) {
		round++
		seeds := make([]uint64, writers)
		for i := range seeds {
			seeds[i] = rng.Uint64()
		}
		var g errgroup.Group
		for i := range writers {
			g.Go(func() error {
				var err error
				owned[i], err = b.live(rand.New(rand.NewPCG(seeds[i], uint64(round))), owned[i])
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		b.checkStats(t, rng)
		b.now = b.now.Add(time.Duration(rng.Int64N(int64(6 * time.Hour))))
	}
	if r := b.audit(t); len(r.Violations) > 0 {
		t.Fatalf("audit: %v", r.Violations)
	}
	before, err := projection.ReadStats(b.ctx, b.db, b.now)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v, %v", r, err)
	}
	after, err := projection.ReadStats(b.ctx, b.db, b.now)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("stats after the rebuild\n%+v\nbefore\n%+v", after, before)
	}
	b.checkStats(t, rng)
}

// live takes a few steps of random lives at the clock's time: new messages
// (dispatched, not routed, only accepted, refused), and on the messages ms
// claims with every kind of outcome, wake-ups that stall, skips,
// redeliveries, resends and replays. It returns ms with the new messages.
func (b *bundle) live(rng *rand.Rand, ms []*projection.Message) ([]*projection.Message, error) {
	act := commands.Action{Operator: "admin", Reason: "test"}
	for range 3 {
		var (
			m   *projection.Message
			err error
		)
		switch in := (commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")}); rng.IntN(8) {
		case 0:
			in.Source = "crm" // no route
			m, _, err = b.w.Ingest(b.ctx, in)
		case 1:
			if m, _, err = b.w.Accept(b.ctx, in); err == nil && rng.IntN(3) > 0 {
				refusal := lifecycle.RefusalRejected
				if rng.IntN(2) == 0 {
					refusal = lifecycle.RefusalInternal
				}
				m, err = b.w.Refuse(b.ctx, m.ID, refusal, "no", "operator:admin")
			}
		default:
			m, _, err = b.w.Ingest(b.ctx, in)
		}
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	for range 6 {
		i := rng.IntN(len(ms))
		m := ms[i]
		if len(m.Deliveries) == 0 {
			continue
		}
		d := m.Deliveries[rng.IntN(len(m.Deliveries))]
		var err error
		switch rng.IntN(7) {
		case 0, 1, 2:
			var c commands.Claim
			if c, err = b.w.Claim(b.ctx, d.ID, time.Minute); err == nil {
				outcome := []lifecycle.Outcome{lifecycle.Delivered("200"), lifecycle.Retry(b.now.Add(time.Minute), "503"),
					lifecycle.Failed("400"), lifecycle.AwaitingAck("sent", b.now.Add(time.Hour))}[rng.IntN(4)]
				_, err = b.w.Complete(b.ctx, d.ID, c.Token, outcome)
			}
		case 3:
			_, err = b.w.Wake(b.ctx, d.ID)
		case 4:
			_, err = b.w.Skip(b.ctx, m.ID, d.ID, act)
		case 5:
			_, err = b.w.Redeliver(b.ctx, m.ID, d.ID, act)
		case 6:
			if rng.IntN(2) == 0 {
				_, err = b.w.Resend(b.ctx, m.ID, nil, act)
			} else {
				_, err = b.w.Replay(b.ctx, m.ID, act)
			}
		}
		if err != nil && !errors.Is(err, commands.ErrNotClaimable) && !errors.Is(err, commands.ErrNotSkippable) &&
			!errors.Is(err, commands.ErrNotRedeliverable) && !errors.Is(err, commands.ErrNotResendable) {
			return nil, err
		}
		// As it is now, a new generation's deliveries included.
		if ms[i], err = projection.Load(b.ctx, b.db, m.ID); err != nil {
			return nil, err
		}
	}
	return ms, nil
}
