package projection_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// writers runs n goroutines that ingest messages and take their deliveries
// through claims and outcomes (awaiting receipts by ids the receivers
// reuse among them, so correlations move) until stop is called, which
// returns the first error any met, as failed does meanwhile. done counts the messages whose life
// each finished. Stop lets each finish its message rather than cancel its
// command: a command cancelled mid-batch may still commit after its
// caller has returned, after the test has read the tables.
func (b *bundle) writers(t *testing.T, n int) (done *atomic.Int64, failed func() error, stop func() error) {
	t.Helper()
	var stopped atomic.Bool
	done = &atomic.Int64{}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	failed = func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	for w := range n {
		wg.Go(func() {
			for i := 0; !stopped.Load(); i++ {
				in := commands.NewMessage{Source: "erp", From: "acme", To: "globex",
					Payload: fmt.Appendf(nil, "live %d/%d", w, i), IdempotencyKey: fmt.Sprintf("live-%d-%d", w, i)}
				if i%3 == 0 {
					in.CallbackURL = "http://127.0.0.1:9/outcome"
				}
				m, _, err := b.w.Ingest(b.ctx, in)
				for j := 0; err == nil && j < len(m.Deliveries); j++ {
					d := m.Deliveries[j]
					var c commands.Claim
					if c, err = b.w.Claim(b.ctx, d.ID, time.Minute); err != nil {
						break
					}
					// No failures: the breaker of a failing target would
					// hold the next claims.
					o := lifecycle.Delivered("200 OK")
					if (i+j)%2 == 1 {
						o = lifecycle.AwaitingAck("sent", b.now.Add(time.Hour))
						o.ExternalID = fmt.Sprintf("ext-%d", i%5)
					}
					_, err = b.w.Complete(b.ctx, d.ID, c.Token, o)
				}
				if err != nil {
					fail(fmt.Errorf("writer %d, message %d: %w", w, i, err))
					return
				}
				done.Add(1)
			}
		})
	}
	return done, failed, func() error {
		stopped.Store(true)
		wg.Wait()
		return failed()
	}
}

// tables returns every row of the projection tables as text, in a stable
// order: the counts summed over their shards, which follow the backends
// that wrote them, and of the targets' health what the journal holds (a
// row of version 0 is a target's window of outcomes alone).
func (b *bundle) tables(t *testing.T) []string {
	t.Helper()
	out := b.snapshot(t)
	rows, err := b.db.Query(b.ctx, `SELECT r::text FROM (SELECT * FROM lanes ORDER BY target, ordering_key) r
		UNION ALL SELECT r::text FROM (SELECT * FROM operations ORDER BY id) r
		UNION ALL SELECT r::text FROM (SELECT target, version, breaker, since, until, cooldown_ms, throttled_until
			FROM target_health WHERE version > 0 ORDER BY target) r
		UNION ALL SELECT r::text FROM (SELECT target, state, sum(n) FROM delivery_counts GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2) r
		UNION ALL SELECT r::text FROM (SELECT status, sum(n) FROM message_counts GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 1) r
		UNION ALL SELECT r::text FROM (SELECT status, hour, sum(n) FROM message_hour_counts GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2) r
		UNION ALL SELECT r::text FROM (SELECT target, minute, outcome, class, bucket, sum(n) FROM delivery_minute_counts
			GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0 ORDER BY 1, 2, 3, 4, 5) r`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOnlineRebuildBesideWriters runs an online rebuild while writers
// keep ingesting and delivering, pausing it in the fold, the catch-up and
// the switch until the writers have moved on: no write fails, the audit
// is clean, and the tables equal what an offline rebuild makes of the
// journal afterwards; paced (the default share) and at full speed.
func TestOnlineRebuildBesideWriters(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{0, 1} {
		t.Run(fmt.Sprint("share ", share), func(t *testing.T) {
			t.Parallel()
			onlineBesideWriters(t, share)
		})
	}
}

func onlineBesideWriters(t *testing.T, share float64) {
	b := setup(t)
	b.lifecycles(t, 60, rand.New(rand.NewPCG(5, 6)))
	done, failed, stop := b.writers(t, 3)
	defer func() { _ = stop() }()
	var phases []projection.OnlinePhase
	var last projection.OnlineProgress
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{
		Share: share,
		Progress: func(p projection.OnlineProgress) {
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
			last = p
		},
		Pause: func(p projection.OnlinePhase) {
			if p == projection.PhaseSwitch {
				return
			}
			// The writers go on while the shadow tables are written.
			from := done.Load()
			testpoll.Until(t, "writers to finish 20 messages during "+string(p), func() bool { return done.Load() >= from+20 || failed() != nil })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) > 0 {
		t.Fatalf("audit of the online rebuild: %v", r.Violations)
	}
	if want := []projection.OnlinePhase{projection.PhaseFold, projection.PhaseCatchUp, projection.PhaseSwitch,
		projection.PhaseAudit, projection.PhaseDone}; fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	if last.Rounds == 0 || last.LockHeld <= 0 || last.Events < r.Events-last.Lag {
		t.Errorf("progress at the end: %+v, report %d events", last, r.Events)
	}
	// The writers go on on the new tables.
	from := done.Load()
	testpoll.Until(t, "writers to finish 20 messages after the switch", func() bool { return done.Load() >= from+20 || failed() != nil })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dbtest.Audit(t, b.db)
	online := b.tables(t)
	if _, err := projection.Rebuild(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	offline := b.tables(t)
	sameRows(t, "online", online, "offline", offline)
	var shadow bool
	if err := b.db.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema.ShadowSchema).Scan(&shadow); err != nil || shadow {
		t.Errorf("schema %s left behind: %v %v", schema.ShadowSchema, shadow, err)
	}
}

// TestOnlineRebuildInterruptedLeavesTheLiveTables ends an online rebuild
// in each phase with its work uncommitted (its context cancelled, as its
// process would die): the live tables are as they were, and the next run
// finishes.
func TestOnlineRebuildInterruptedLeavesTheLiveTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 60, rand.New(rand.NewPCG(7, 8)))
	before := b.tables(t)
	for _, phase := range []projection.OnlinePhase{projection.PhaseFold, projection.PhaseCatchUp, projection.PhaseSwitch} {
		ctx, cancel := context.WithCancel(b.ctx)
		_, err := projection.OnlineRebuild(ctx, b.db, projection.OnlineOptions{Pause: func(p projection.OnlinePhase) {
			if p == phase {
				cancel()
			}
		}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("rebuild ended in %s: %v", phase, err)
		}
		if after := b.tables(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Fatalf("the live tables changed by a rebuild ended in %s", phase)
		}
	}
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{})
	if err != nil || len(r.Violations) > 0 || r.Messages != 60 {
		t.Fatalf("rebuild after: %v %+v", err, r)
	}
	sameRows(t, "before", before, "after the online rebuild", b.tables(t))
}

// TestOnlineRebuildRefusesBesideAnother holds the online rebuild's lock as
// another run would: a second one refuses naming it, and so do an offline
// rebuild and a reset.
func TestOnlineRebuildRefusesBesideAnother(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lock, err := schema.LockOnline(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{})
	if !errors.Is(err, schema.ErrRebuildRunning) || !strings.Contains(err.Error(), "PostgreSQL backend") {
		t.Fatalf("second online rebuild: %v", err)
	}
	_, err = projection.Rebuild(b.ctx, b.db)
	if !errors.Is(err, schema.ErrDatabaseInUse) || !strings.Contains(err.Error(), "an online rebuild is running") {
		t.Fatalf("offline rebuild beside an online one: %v", err)
	}
	lock.Release()
	server, err := schema.LockExclusive(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{}); !errors.Is(err, schema.ErrDatabaseInUse) {
		t.Fatalf("online rebuild beside an offline one: %v", err)
	}
	server.Release()
	if _, err = projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOnlineRebuildRefusesABadShare: a share outside (0, 1] is refused,
// naming the field, and the live tables stay as they were.
func TestOnlineRebuildRefusesABadShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 10, rand.New(rand.NewPCG(9, 10)))
	before := b.tables(t)
	for _, share := range []float64{-0.5, 1.5, math.NaN()} {
		_, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{Share: share})
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != "share" || !strings.Contains(fe.Problem, "above 0 and at most 1") {
			t.Errorf("share %g: %v, want a FieldError on share", share, err)
		}
	}
	sameRows(t, "before", before, "after", b.tables(t))
}

// sameRows reports the rows of a that b lacks and those of b that a lacks.
func sameRows(t *testing.T, aName string, a []string, bName string, b []string) {
	t.Helper()
	count := map[string]int{}
	for _, r := range a {
		count[r]++
	}
	for _, r := range b {
		count[r]--
	}
	for _, r := range a {
		if count[r] > 0 {
			t.Errorf("only %s: %s", aName, r)
		}
	}
	for _, r := range b {
		if count[r] < 0 {
			t.Errorf("only %s: %s", bName, r)
		}
	}
}

// TestAuditAndOnlineRebuildWaitForNoWriter holds a writer's transaction
// open on the journal and the projection tables while an audit runs and an
// online rebuild folds and writes its shadow tables: neither waits for it
// (each would hang until it ends). Only the switch waits for writers, by
// design, so the writer commits when the catch-up begins.
func TestAuditAndOnlineRebuildWaitForNoWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 10, rand.New(rand.NewPCG(9, 10)))
	writer, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if writer != nil {
			_ = writer.Rollback(b.ctx)
		}
	}()
	// The lock every writer of these tables holds till it commits: DDL
	// on them, or a lock that keeps writers out, waits for it.
	if _, err := writer.Exec(b.ctx, `LOCK TABLE journal, messages, deliveries, message_counts, delivery_counts IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if r, err := projection.Audit(ctx, b.db, uuid.Nil); err != nil || len(r.Violations) > 0 {
		t.Fatalf("audit beside an open writer: %v %v", err, r)
	}
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{Pause: func(p projection.OnlinePhase) {
		if p != projection.PhaseCatchUp || writer == nil {
			return
		}
		if err := writer.Commit(b.ctx); err != nil {
			t.Errorf("commit the writer: %v", err)
		}
		writer = nil
	}})
	if err != nil || len(r.Violations) > 0 || r.Messages != 10 {
		t.Fatalf("online rebuild: %v %+v", err, r)
	}
}

// TestOnlineRebuildStopsOnALostLock ends the PostgreSQL session that holds
// the online rebuild's lock, or the retention lease it holds, while the
// rebuild is paused in each of the fold, the catch-up and the switch (as a
// restart of PostgreSQL or a failover would): the rebuild stops with
// schema.ErrLockLost naming the lock, nothing of it is committed (the live
// tables are the same tables, with the same rows), and the next run
// finishes with a clean audit.
func TestOnlineRebuildStopsOnALostLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 40, rand.New(rand.NewPCG(11, 12)))
	before, live := b.tables(t), liveOIDs(t, b)
	for _, lost := range []struct {
		key  schema.LockKey
		name string
	}{{schema.KeyOnlineRebuild, "the online rebuild lock"}, {schema.KeyRetention, "the retention lease"}} {
		for _, phase := range []projection.OnlinePhase{projection.PhaseFold, projection.PhaseCatchUp, projection.PhaseSwitch} {
			done := false
			_, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{Pause: func(p projection.OnlinePhase) {
				if p == phase && !done {
					done = true
					dbtest.TerminateHolder(t, b.db, lost.key)
				}
			}})
			if !errors.Is(err, schema.ErrLockLost) || !strings.Contains(err.Error(), lost.name+" was lost") {
				t.Fatalf("%s lost in %s: the rebuild ended with %v", lost.name, phase, err)
			}
			if now := liveOIDs(t, b); now != live {
				t.Fatalf("%s lost in %s: the live tables were switched", lost.name, phase)
			}
			sameRows(t, "before", before, "after "+lost.name+" was lost in "+string(phase), b.tables(t))
		}
	}
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{})
	if err != nil || len(r.Violations) > 0 || r.Messages != 40 {
		t.Fatalf("rebuild after: %v %+v", err, r)
	}
	sameRows(t, "before", before, "after the online rebuild", b.tables(t))
	dbtest.Audit(t, b.db)
}

// liveOIDs names the live projection tables by their ids: a switch
// replaces them.
func liveOIDs(t *testing.T, b *bundle) string {
	t.Helper()
	var s string
	if err := b.db.QueryRow(b.ctx, `SELECT concat_ws(',', 'public.messages'::regclass::oid, 'public.deliveries'::regclass::oid,
		'public.lanes'::regclass::oid, 'public.delivery_counts'::regclass::oid)`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
