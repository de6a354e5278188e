package feed_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// recordedAt is the time of every event the tests append.
var recordedAt = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// queueAccepted queues the first event of a new message stream on b and
// returns the stream.
func queueAccepted(t *testing.T, b *pgx.Batch) string {
	t.Helper()
	stream := journal.MessageStream(uuid.New())
	err := journal.Queue(b, journal.Event{RecordedAt: recordedAt, Stream: stream, Version: 1,
		Actor: journal.SourceActor("erp"), Payload: &journal.MessageAccepted{Source: "erp", From: "a", To: "b",
			ContentType: "text/plain", PayloadSHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// appendEvents commits n events, each in its own transaction, and returns
// their streams in order.
func appendEvents(t *testing.T, db *pgxpool.Pool, n int) []string {
	t.Helper()
	var streams []string
	for range n {
		b := &pgx.Batch{}
		streams = append(streams, queueAccepted(t, b))
		if err := db.SendBatch(t.Context(), b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	return streams
}

// recorder keeps the streams of the events a handler saw, in order.
type recorder struct {
	mu   sync.Mutex
	seen []string
	// fail, when set, makes the handler fail for the events it returns true for.
	fail func(e journal.Event) bool
}

func (r *recorder) handle(_ context.Context, events []journal.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range events {
		r.seen = append(r.seen, e.Stream)
		if r.fail != nil && r.fail(e) {
			return errors.New("handler refuses")
		}
	}
	return nil
}

func (r *recorder) streams() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *recorder) setFail(f func(journal.Event) bool) {
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
}

// consumer is a started Consumer with a count of its reads.
type consumer struct {
	*feed.Consumer
	polls atomic.Int64
}

func start(t *testing.T, cfg feed.Config) *consumer {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	fc, err := feed.NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{Consumer: fc}
	fc.OnPoll(func() { c.polls.Add(1) })
	if err := fc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return c
}

// settle waits for two more reads: the second begins after this call, so an
// event committed before it has been handed to the handler by its end.
func (c *consumer) settle(t *testing.T) {
	t.Helper()
	n := c.polls.Load()
	testpoll.Until(t, "two more reads", func() bool { return c.polls.Load() >= n+2 })
}

func TestLateCommitIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := t.Context()
	r := &recorder{}
	c := start(t, feed.Config{DB: db, Group: "late", Handle: r.handle})

	// A takes the lower position and stays open; B takes the next and commits.
	a, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(context.Background())
	ba := &pgx.Batch{}
	streamA := queueAccepted(t, ba)
	if err := a.SendBatch(ctx, ba).Close(); err != nil {
		t.Fatal(err)
	}
	bb := &pgx.Batch{}
	streamB := queueAccepted(t, bb)
	if err := db.SendBatch(ctx, bb).Close(); err != nil {
		t.Fatal(err)
	}
	var posA, posB int64
	if err := db.QueryRow(ctx, `SELECT position FROM journal WHERE stream = $1`, streamB).Scan(&posB); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRow(ctx, `SELECT position FROM journal WHERE stream = $1`, streamA).Scan(&posA); err != nil {
		t.Fatal(err)
	}
	if posA >= posB {
		t.Fatalf("positions A %d, B %d: A must hold the lower", posA, posB)
	}

	// While A is open, B is held back: handing it over now would put the
	// group's place past A's position.
	c.settle(t)
	if got := r.streams(); len(got) != 0 {
		t.Fatalf("delivered while A is open: %v", got)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "both events", func() bool { return len(r.streams()) >= 2 })
	c.settle(t)
	if got, want := r.streams(), []string{streamA, streamB}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// TestHandlerPanicIsAnError: a handler that panics fails that transaction,
// which is delivered again; the consumer goes on.
func TestHandlerPanicIsAnError(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	streams := appendEvents(t, db, 2)
	r := &recorder{}
	var panicked atomic.Bool
	start(t, feed.Config{DB: db, Group: "panics", Handle: func(ctx context.Context, events []journal.Event) error {
		if events[0].Stream == streams[1] && panicked.CompareAndSwap(false, true) {
			panic("a bug")
		}
		return r.handle(ctx, events)
	}})
	testpoll.Until(t, "both events handled", func() bool { return len(r.streams()) == 2 })
	if got := r.streams(); !slices.Equal(got, streams) || !panicked.Load() {
		t.Errorf("handled %v after a panic (%t), want %v", got, panicked.Load(), streams)
	}
}

func TestRestartResumesAfterTheLastAck(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	first := appendEvents(t, db, 3)

	// The first consumer acks two events and keeps failing on the third.
	r1 := &recorder{fail: func(e journal.Event) bool { return e.Stream == first[2] }}
	c1 := start(t, feed.Config{DB: db, Group: "resume", Handle: r1.handle})
	testpoll.Until(t, "the third event delivered again", func() bool {
		return len(r1.streams()) >= 4
	})
	c1.Stop(t.Context())
	c1.Stop(t.Context())
	got := r1.streams()
	if !slices.Equal(got[:2], first[:2]) {
		t.Fatalf("first consumer saw %v", got)
	}
	for _, s := range got[2:] {
		if s != first[2] {
			t.Fatalf("first consumer went past the failing event: %v", got)
		}
	}

	more := appendEvents(t, db, 2)
	r2 := &recorder{}
	c2 := start(t, feed.Config{DB: db, Group: "resume", Handle: r2.handle})
	testpoll.Until(t, "the rest", func() bool { return len(r2.streams()) >= 3 })
	c2.settle(t)
	if got, want := r2.streams(), append(first[2:], more...); !slices.Equal(got, want) {
		t.Fatalf("restarted consumer saw %v, want %v", got, want)
	}
}

func TestEveryGroupSeesEverything(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	before := appendEvents(t, db, 3)
	r1, r2 := &recorder{}, &recorder{}
	c1 := start(t, feed.Config{DB: db, Group: "one", Handle: r1.handle})
	c2 := start(t, feed.Config{DB: db, Group: "two", Handle: r2.handle})
	all := append(before, appendEvents(t, db, 3)...)
	for _, c := range []struct {
		c *consumer
		r *recorder
	}{{c1, r1}, {c2, r2}} {
		testpoll.Until(t, "every event", func() bool { return len(c.r.streams()) >= len(all) })
		c.c.settle(t)
		if got := c.r.streams(); !slices.Equal(got, all) {
			t.Errorf("group saw %v, want %v", got, all)
		}
	}
}

// TestReadsAJournalOfJSONB reads a journal whose payload column is jsonb,
// as an earlier build created it: the events decode as from json.
func TestReadsAJournalOfJSONB(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	if _, err := db.Exec(t.Context(), `ALTER TABLE journal ALTER COLUMN payload TYPE jsonb USING payload::jsonb`); err != nil {
		t.Fatal(err)
	}
	want := appendEvents(t, db, 3)
	r := &recorder{}
	c := start(t, feed.Config{DB: db, Group: "jsonb", Handle: r.handle})
	testpoll.Until(t, "every event", func() bool { return len(r.streams()) >= len(want) })
	c.settle(t)
	if got := r.streams(); !slices.Equal(got, want) {
		t.Errorf("group saw %v, want %v", got, want)
	}
}

func TestLagGauges(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	appendEvents(t, db, 3)
	reg := prometheus.NewRegistry()
	now := func() time.Time { return recordedAt.Add(90 * time.Second) }
	r := &recorder{fail: func(journal.Event) bool { return true }}
	c := start(t, feed.Config{Base: service.Base{Now: now}, DB: db, Group: "lagging", Handle: r.handle, Metrics: reg})

	testpoll.Until(t, "a failed delivery", func() bool { return len(r.streams()) >= 1 })
	if n, age := lag(t, reg); n != 3 || age != 90 {
		t.Fatalf("lag %v events, %v s; want 3 and 90", n, age)
	}
	r.setFail(nil)
	testpoll.Until(t, "no lag", func() bool { n, age := lag(t, reg); return n == 0 && age == 0 })

	c.Stop(t.Context())
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("after Stop the registry still has %v (%v)", mfs, err)
	}
}

// TestLagWalksTheIndex: the lag's query walks journal_txid from the
// group's place whatever the journal holds; a scan of the journal made
// every scrape cost the whole journal.
func TestLagWalksTheIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	appendEvents(t, db, 3)
	start(t, feed.Config{DB: db, Group: "planned", Handle: (&recorder{}).handle})
	tx, err := db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), feed.WalkPlan); err != nil {
		t.Fatal(err)
	}
	text := dbtest.Explain(t, tx, feed.LagSQL, "planned")
	if strings.Contains(text, "Seq Scan on journal") || strings.Count(text, "journal_txid") != 2 {
		t.Fatalf("the lag's plan does not walk journal_txid for both figures:\n%s", text)
	}
}

// TestReadWalksTheIndex: a group's read walks journal_txid from its place
// and stops at the limit, however far behind the group is and whatever the
// statistics say. Here they were taken when the journal was nearly empty,
// and the group lags by 5,000 events: the planner, guessing the range at
// a few rows, would fetch them all and sort them.
func TestReadWalksTheIndex(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	appendEvents(t, db, 3)
	c := start(t, feed.Config{DB: db, Group: "walking", Handle: (&recorder{}).handle})
	c.Stop(t.Context())
	if _, err := db.Exec(t.Context(), `ANALYZE journal`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b := &pgx.Batch{}
		for range 1000 {
			queueAccepted(t, b)
		}
		if err := db.SendBatch(t.Context(), b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	sql, args, err := feed.ReadSQL("walking")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := feed.BeginRead(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	text := dbtest.Explain(t, tx, sql, args...)
	if !strings.Contains(text, "Index Scan using journal_txid") || strings.Contains(text, "Sort") || strings.Contains(text, "Bitmap") {
		t.Fatalf("the read's plan does not walk journal_txid in order:\n%s", text)
	}
}

// lag reads the two gauges of the only group in reg.
func lag(t *testing.T, reg *prometheus.Registry) (events, seconds float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		v := mf.GetMetric()[0].GetGauge().GetValue()
		switch mf.GetName() {
		case "waybill_feed_lag_events":
			events = v
		case "waybill_feed_lag_seconds":
			seconds = v
		}
	}
	return events, seconds
}

// TestReadsCommitWithoutWaitingForTheDisk: the subscriber's transactions,
// whose commits only save a group's place, turn off synchronous_commit for
// themselves, whatever the session's setting, and leave it as it was.
func TestReadsCommitWithoutWaitingForTheDisk(t *testing.T) {
	t.Parallel()
	cfg := dbtest.Pool(t).Config()
	cfg.ConnConfig.RuntimeParams = maps.Clone(cfg.ConnConfig.RuntimeParams)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cfg.MaxConns = 1 // the check after the read is on the read's session
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := q.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	tx, err := feed.BeginRead(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	if got := setting(tx); got != "off" {
		t.Errorf("synchronous_commit in the read's transaction = %s, want off", got)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := setting(db); got != "on" {
		t.Errorf("synchronous_commit after the read = %s, want the session's on", got)
	}
}

func TestNewConsumerChecksConfig(t *testing.T) {
	if _, err := feed.NewConsumer(feed.Config{Group: "Not a name"}); err == nil {
		t.Fatal("NewConsumer accepted a config without DB, handler or valid group")
	}
}

// TestATransactionComesWhole checks that a handler gets the events of one
// transaction together, in position order, and that a failure hands all of
// them over again.
func TestATransactionComesWhole(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	b := &pgx.Batch{}
	together := []string{queueAccepted(t, b), queueAccepted(t, b), queueAccepted(t, b)}
	if err := db.SendBatch(t.Context(), b).Close(); err != nil {
		t.Fatal(err)
	}
	alone := appendEvents(t, db, 1)

	var (
		mu     sync.Mutex
		calls  [][]string
		failed bool
	)
	handle := func(_ context.Context, events []journal.Event) error {
		mu.Lock()
		defer mu.Unlock()
		var streams []string
		for i, e := range events {
			if i > 0 && e.Position <= events[i-1].Position {
				t.Errorf("positions out of order: %d after %d", e.Position, events[i-1].Position)
			}
			streams = append(streams, e.Stream)
		}
		calls = append(calls, streams)
		if len(events) == 3 && !failed {
			failed = true
			return errors.New("handler refuses once")
		}
		return nil
	}
	c := start(t, feed.Config{DB: db, Group: "whole", Handle: handle})
	testpoll.Until(t, "both transactions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 3
	})
	c.settle(t)
	mu.Lock()
	defer mu.Unlock()
	if want := [][]string{together, together, alone}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("handler got %v, want %v", calls, want)
	}
}
