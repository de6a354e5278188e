package retention_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/retention"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const admin = "operator:admin"

// quiet keeps the logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

var start = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

type bundle struct {
	ctx   context.Context
	db    *pgxpool.Pool
	clock *testclock.Clock
	w     *commands.Writer
	r     *retention.Retention
	reg   *prometheus.Registry
	dir   string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), db: dbtest.Pool(t), clock: testclock.New(start), reg: prometheus.NewRegistry(), dir: t.TempDir()}
	base := service.Base{Now: b.clock.Now, Logger: quiet}
	var err error
	if b.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: b.db}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "alpha", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "alpha"}, admin); err != nil {
		t.Fatal(err)
	}
	if b.r, err = retention.New(retention.Config{Base: base, Writer: b.w, DB: b.db, Pause: time.Millisecond, Registerer: b.reg}); err != nil {
		t.Fatal(err)
	}
	return b
}

// period is d as a setting; 0 is never.
func period(d time.Duration) *lifecycle.Duration {
	if d == 0 {
		return nil
	}
	return new(lifecycle.Duration(d))
}

// retain sets the periods (0 for never), with the bundle's archive.
func (b *bundle) retain(t testing.TB, payload, settled, failed time.Duration) {
	t.Helper()
	s := lifecycle.DefaultSettings()
	s.Retention = lifecycle.Retention{PayloadAfter: period(payload), SettledAfter: period(settled), FailedAfter: period(failed)}
	if settled > 0 {
		s.Retention.ArchiveDir = b.dir
	}
	if err := b.w.SetSettings(b.ctx, s, admin); err != nil {
		t.Fatal(err)
	}
}

// settle ingests a message and gives its delivery the outcome.
func (b *bundle) settle(t testing.TB, o lifecycle.Outcome) *projection.Message {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hello " + uuid.NewString())})
	if err != nil {
		t.Fatal(err)
	}
	b.attempt(t, m.Deliveries[0].ID, o)
	return b.load(t, m.ID)
}

func (b *bundle) attempt(t testing.TB, delivery uuid.UUID, o lifecycle.Outcome) {
	t.Helper()
	c, err := b.w.Claim(b.ctx, delivery, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, delivery, c.Token, o); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) load(t testing.TB, id uuid.UUID) *projection.Message {
	t.Helper()
	m, err := projection.Load(b.ctx, b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// live reports whether the message is in the tables, the journal, and,
// with its payload or not, in payloads.
func (b *bundle) live(t testing.TB, id uuid.UUID) (live, payload bool) {
	t.Helper()
	// One snapshot: a pass that runs meanwhile commits a removal whole.
	tx, err := b.db.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	_, loadErr := projection.Load(b.ctx, tx, id)
	if loadErr != nil && !errors.Is(loadErr, projection.ErrNotFound) {
		t.Fatal(loadErr)
	}
	events, err := journal.Stream(b.ctx, tx, journal.MessageStream(id))
	if err != nil {
		t.Fatal(err)
	}
	if (loadErr == nil) != (len(events) > 0) {
		t.Fatalf("message %s: in the tables %v, %d events", id, loadErr == nil, len(events))
	}
	if err := tx.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM payloads WHERE message_id = $1)`, id).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	return len(events) > 0, payload
}

// pass runs a pass and audits the live journal and the archive.
func (b *bundle) pass(t testing.TB) retention.Result {
	t.Helper()
	res, err := b.r.Pass(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.audit(t)
	return res
}

// audit fails the test on any violation of the live journal and tables or
// of the archive.
func (b *bundle) audit(t testing.TB) {
	t.Helper()
	dbtest.Audit(t, b.db)
	r, err := retention.VerifyArchive(b.ctx, b.db, b.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Violations {
		t.Errorf("archive: %s", v)
	}
}

// place saves a feed group's place, making the feed's table as the feed
// does at its first start.
func (b *bundle) place(t testing.TB, group string, at journal.Mark) {
	t.Helper()
	if _, err := b.db.Exec(b.ctx, `CREATE TABLE IF NOT EXISTS feed_offsets (consumer_group varchar(255) PRIMARY KEY,
		offset_acked bigint, last_processed_transaction_id xid8 NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO feed_offsets VALUES ($1, $2, $3::text::xid8)
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
		last_processed_transaction_id = excluded.last_processed_transaction_id`, group, at.Position, fmt.Sprint(at.TxID)); err != nil {
		t.Fatal(err)
	}
}

// lastMark is the mark of the last event of the stream.
func (b *bundle) lastMark(t testing.TB, stream string) journal.Mark {
	t.Helper()
	events, marks, err := journal.ReadStreams(b.ctx, b.db, []string{stream})
	if err != nil || len(events) == 0 {
		t.Fatalf("stream %s: %d events, %v", stream, len(events), err)
	}
	return marks[len(marks)-1]
}

// TestSelectionAgreesWithTheRule runs every status, age and expunge over
// the statements that select what is due and over lifecycle.Retention's
// rule, which the Writer and the removal check on the locked rows: they
// must choose the same messages.
func TestSelectionAgreesWithTheRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rs := lifecycle.Retention{PayloadAfter: period(time.Hour), SettledAfter: period(3 * time.Hour), FailedAfter: period(5 * time.Hour)}
	now := start.Add(100 * time.Hour)
	type row struct {
		id       uuid.UUID
		status   lifecycle.MessageStatus
		updated  time.Time
		expunged bool
	}
	var rows []row
	for _, s := range lifecycle.MessageStatuses {
		for _, age := range []time.Duration{0, time.Hour - time.Microsecond, time.Hour, 3 * time.Hour, 5*time.Hour - time.Microsecond, 5 * time.Hour, 99 * time.Hour} {
			for _, expunged := range []bool{false, true} {
				rows = append(rows, row{uuid.New(), s, now.Add(-age), expunged})
			}
		}
	}
	batch := &pgx.Batch{}
	for _, r := range rows {
		batch.Queue(`INSERT INTO messages (id, version, source, from_party, to_party, content_type, payload_size,
			payload_sha256, stage, status, error, delivery_count, created_at, updated_at, payload_expunged)
			VALUES ($1, 1, 'erp', 'a', 'b', 'text/plain', 1, $2, 'dispatched', $3, '', 0, $4, $5, $6)`,
			r.id, strings.Repeat("ab", 32), r.status, r.updated.Add(-time.Hour), r.updated, r.expunged)
	}
	if err := b.db.SendBatch(b.ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	type selection func(s lifecycle.MessageStatus, cutoff time.Time, limit int) ([]uuid.UUID, error)
	selected := func(statuses []lifecycle.MessageStatus, sel selection, cutoff func(lifecycle.MessageStatus) (time.Time, bool)) map[uuid.UUID]bool {
		out := map[uuid.UUID]bool{}
		for _, s := range statuses {
			at, ok := cutoff(s)
			if !ok {
				continue
			}
			ids, err := sel(s, at, len(rows))
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				out[id] = true
			}
		}
		return out
	}
	expunge := selected(lifecycle.ExpungeStatuses(), func(s lifecycle.MessageStatus, cutoff time.Time, limit int) ([]uuid.UUID, error) {
		return projection.PayloadsDue(b.ctx, b.db, s, cutoff, limit)
	}, func(lifecycle.MessageStatus) (time.Time, bool) { return now.Add(-time.Hour), true })
	remove := selected(lifecycle.SettledStatuses(), func(s lifecycle.MessageStatus, cutoff time.Time, limit int) ([]uuid.UUID, error) {
		ids, _, err := projection.RemovalsDue(b.ctx, b.db, s, cutoff, limit, projection.DueAt{})
		return ids, err
	}, func(s lifecycle.MessageStatus) (time.Time, bool) {
		after, ok := rs.RemovalAfter(s)
		return now.Add(-after), ok
	})
	for _, r := range rows {
		if want := !r.expunged && rs.PayloadDue(r.status, r.updated, now); expunge[r.id] != want {
			t.Errorf("%s %v ago, expunged %v: the SQL selects it to expunge %v, the rule %v", r.status, now.Sub(r.updated), r.expunged, expunge[r.id], want)
		}
		if want := rs.RemovalDue(r.status, r.updated, now); remove[r.id] != want {
			t.Errorf("%s %v ago: the SQL selects it to remove %v, the rule %v", r.status, now.Sub(r.updated), remove[r.id], want)
		}
	}
}

// TestPeriodsCountFromTheLastTransition: a delivered message loses its
// payload at payload_after and leaves at settled_after; one whose delivery
// an operator redelivered counts both from the redelivery's outcome; a
// failed one keeps its payload and leaves only at failed_after; one not
// settled stays whatever the time. The audit, of the live journal and of
// the archive, is clean after every step.
func TestPeriodsCountFromTheLastTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, time.Hour, 3*time.Hour, 6*time.Hour)
	delivered := b.settle(t, lifecycle.Delivered("200"))
	failed := b.settle(t, lifecycle.Failed("400"))
	redelivered := b.settle(t, lifecycle.Delivered("200"))
	waiting, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("queued")})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(30 * time.Minute)
	d := redelivered.Deliveries[0].ID
	if _, err := b.w.Redeliver(b.ctx, redelivered.ID, d, commands.Action{Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	b.attempt(t, d, lifecycle.Delivered("200"))

	type state struct{ live, payload bool }
	check := func(when string, want map[uuid.UUID]state) {
		t.Helper()
		for id, w := range want {
			live, payload := b.live(t, id)
			if (state{live, payload}) != w {
				t.Errorf("%s: message %s live %v with payload %v, want %+v", when, id, live, payload, w)
			}
		}
	}
	all := func(d, f, r state) map[uuid.UUID]state {
		return map[uuid.UUID]state{delivered.ID: d, failed.ID: f, redelivered.ID: r, waiting.ID: {true, true}}
	}

	b.clock.Advance(30*time.Minute - time.Microsecond)
	if r := b.pass(t); r.Expunged != 0 || r.Removed() != 0 {
		t.Errorf("just before payload_after: %+v", r)
	}
	b.clock.Advance(time.Microsecond)
	if r := b.pass(t); r.Expunged != 1 {
		t.Errorf("at payload_after: %+v", r)
	}
	check("1h", all(state{true, false}, state{true, true}, state{true, true}))
	b.clock.Advance(30 * time.Minute)
	if r := b.pass(t); r.Expunged != 1 {
		t.Errorf("at payload_after from the redelivery: %+v", r)
	}
	check("1h30", all(state{true, false}, state{true, true}, state{true, false}))
	if m := b.load(t, delivered.ID); !m.PayloadExpunged || !m.UpdatedAt.Equal(delivered.UpdatedAt) {
		t.Errorf("expunged message %+v", m)
	}

	b.clock.Advance(90 * time.Minute)
	if r := b.pass(t); r.Settled != 1 || r.Faulted != 0 || r.Batches != 1 {
		t.Errorf("at settled_after: %+v", r)
	}
	check("3h", all(state{false, false}, state{true, true}, state{true, false}))
	b.clock.Advance(30 * time.Minute)
	if r := b.pass(t); r.Settled != 1 {
		t.Errorf("at settled_after from the redelivery: %+v", r)
	}
	check("3h30", all(state{false, false}, state{true, true}, state{false, false}))
	b.clock.Advance(2*time.Hour + 30*time.Minute)
	if r := b.pass(t); r.Faulted != 1 || r.Settled != 0 {
		t.Errorf("at failed_after: %+v", r)
	}
	check("6h", all(state{false, false}, state{false, false}, state{false, false}))
	b.clock.Advance(1000 * time.Hour)
	if r := b.pass(t); r.Expunged+r.Removed() != 0 {
		t.Errorf("with only an unsettled message left: %+v", r)
	}
	check("1006h", all(state{false, false}, state{false, false}, state{false, false}))

	// What left is recorded. The batch at 6h took along retention's own
	// records of 3h ago or more but the last batch's: the first batch's
	// and the passes at 1h, 1h30 and 3h. The totals count them.
	var archived, passes int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE kind = 'retention.archived'), count(*) FILTER (WHERE kind = 'retention.pass')
		FROM journal WHERE stream = 'retention'`).Scan(&archived, &passes); err != nil || archived != 2 || passes != 2 {
		t.Errorf("%d batches and %d passes live in the journal, %v", archived, passes, err)
	}
	report, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if rm := report.Removed; err != nil || rm.Batches != 3 || rm.Messages != 3 || rm.Settled != 2 || rm.Faulted != 1 || rm.Events != 5+4+8+4 {
		t.Errorf("the audit's account of what left: %+v, %v", rm, err)
	}
	// A rebuild makes what is live: the waiting message alone.
	if report, err := projection.Rebuild(b.ctx, b.db); err != nil || len(report.Violations) > 0 || report.Messages != 1 {
		t.Errorf("rebuild: %+v, %v", report, err)
	}
	for name, want := range map[string]float64{"waybill_retention_expunged_total": 2,
		`waybill_retention_removed_total{class="settled"}`: 2, `waybill_retention_removed_total{class="faulted"}`: 1,
		`waybill_retention_oldest_settled_seconds{class="faulted"}`: 0} {
		if got := metric(t, b.reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := metric(t, b.reg, "waybill_retention_archive_bytes_total"); got <= 0 {
		t.Errorf("archive bytes %v", got)
	}
}

// metric reads one series, written as name or name{label="value"}.
func metric(t testing.TB, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	name, label, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName()+`="`+l.GetValue()+`"` == label
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

// TestFaultedMessagesStayWithoutFailedAfter: with failed_after null a
// failed message, and one refused for a fault of ours, keep their payload
// and stay through every other period, however long; a message refused on
// its merits is settled, not faulted, and goes.
func TestFaultedMessagesStayWithoutFailedAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, time.Second, time.Second, 0)
	failed := b.settle(t, lifecycle.Failed("400"))
	refuse := func(r lifecycle.Refusal) uuid.UUID {
		m, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte(uuid.NewString())})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Refuse(b.ctx, m.ID, r, "no", "source:erp"); err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	internal, rejected := refuse(lifecycle.RefusalInternal), refuse(lifecycle.RefusalRejected)
	b.clock.Advance(100_000 * time.Hour)
	if r := b.pass(t); r.Settled != 1 || r.Faulted != 0 {
		t.Errorf("pass: %+v", r)
	}
	for _, id := range []uuid.UUID{failed.ID, internal} {
		if live, payload := b.live(t, id); !live || !payload {
			t.Errorf("faulted message %s: live %v, payload %v", id, live, payload)
		}
	}
	if live, _ := b.live(t, rejected); live {
		t.Error("the rejected message stayed")
	}
	if got := metric(t, b.reg, `waybill_retention_oldest_settled_seconds{class="faulted"}`); got != (100_000 * time.Hour).Seconds() {
		t.Errorf("oldest faulted %vs", got)
	}
}

// TestCrashWhileArchiving stops a pass after it wrote a batch's files and
// before its transaction, and another after the commit and before the
// rename, as a crash would: no event is lost, none is archived twice, and
// the next pass settles the files and goes on. The audit is clean after
// every step.
func TestCrashWhileArchiving(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	var ids []uuid.UUID
	for range 5 {
		ids = append(ids, b.settle(t, lifecycle.Delivered("200")).ID)
	}
	b.clock.Advance(time.Hour)
	crash := errors.New("crash")
	for _, point := range []string{"written", "committed"} {
		retention.SetCut(b.r, func(p string) error {
			if p == point {
				return crash
			}
			return nil
		})
		if _, err := b.r.Pass(b.ctx); !errors.Is(err, crash) {
			t.Fatalf("%s: %v", point, err)
		}
		pending, _ := filepath.Glob(filepath.Join(b.dir, "*", "pending", "*.pending"))
		if len(pending) != 2 {
			t.Errorf("%s: pending files %v", point, pending)
		}
		b.audit(t)
		retention.SetCut(b.r, nil)
		// The next batch: one more message due.
		ids = append(ids, b.settle(t, lifecycle.Delivered("200")).ID)
		b.clock.Advance(time.Hour)
	}
	// The crash after the commit had removed the first six; the last
	// message is the second batch.
	if r := b.pass(t); r.Removed() != 1 {
		t.Errorf("the last pass: %+v", r)
	}
	if pending, _ := filepath.Glob(filepath.Join(b.dir, "*", "pending", "*.pending")); len(pending) != 0 {
		t.Errorf("pending files left: %v", pending)
	}
	for _, id := range ids {
		if live, _ := b.live(t, id); live {
			t.Errorf("message %s is live", id)
		}
	}
	r, err := retention.VerifyArchive(b.ctx, b.db, b.dir)
	if err != nil || r.Files != 2 || r.Messages != len(ids) || len(r.Violations) > 0 {
		t.Errorf("archive: %+v, %v", r, err)
	}
}

// TestArchiveDirChanges: a batch's files stay under the archive_dir its
// record names when the setting changes. A batch that committed but kept
// its pending names (a crash) before the change takes its final names
// there at the next pass, the next batch goes under the new archive_dir,
// and the audit finds each batch where its record says, whichever
// archive_dir it is given.
func TestArchiveDirChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.dir
	b.retain(t, 0, time.Hour, 0)
	first := b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	crash := errors.New("crash")
	retention.SetCut(b.r, func(point string) error {
		if point == "committed" {
			return crash
		}
		return nil
	})
	if _, err := b.r.Pass(b.ctx); !errors.Is(err, crash) {
		t.Fatalf("pass: %v", err)
	}
	retention.SetCut(b.r, nil)
	b.dir = t.TempDir()
	b.retain(t, 0, time.Hour, 0)
	second := b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 1 {
		t.Fatalf("pass after the change: %+v", r)
	}
	for dir, batch := range map[string]string{old: "batch-00000001", b.dir: "batch-00000002"} {
		for _, name := range []string{batch + ".jsonl.gz", batch + ".manifest.json"} {
			if files, _ := filepath.Glob(filepath.Join(dir, "*", "000000", name)); len(files) != 1 {
				t.Errorf("%s in %s: %v", name, dir, files)
			}
		}
		if pending, _ := filepath.Glob(filepath.Join(dir, "*", "pending", "*")); len(pending) != 0 {
			t.Errorf("pending files left in %s: %v", dir, pending)
		}
	}
	for _, id := range []uuid.UUID{first.ID, second.ID} {
		if live, _ := b.live(t, id); live {
			t.Errorf("message %s is live", id)
		}
	}
	for _, dir := range []string{old, b.dir} {
		r, err := retention.VerifyArchive(b.ctx, b.db, dir)
		if err != nil || r.Files != 2 || r.Messages != 2 || len(r.Violations) != 0 || len(r.Dirs) != 2 {
			t.Errorf("archive given %s: %+v, %v", dir, r, err)
		}
	}
}

// periods are the payload_after, settled_after and failed_after of a
// test, 0 for never.
type periods [3]time.Duration

// TestSettingsChangedMidPass: a pass that finds the settings changed
// stops there. Of five messages due, a batch or an expunge query at a
// time, one goes; then settled_after or payload_after grows, or retention
// is turned off, and the other four stay.
func TestSettingsChangedMidPass(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name               string
		point              string
		before, after      periods
		expunged, removals int
	}{
		{"settled_after grows", "committed", periods{0, time.Hour, 0}, periods{0, 720 * time.Hour, 0}, 0, 1},
		{"removal turned off", "committed", periods{0, time.Hour, 0}, periods{}, 0, 1},
		{"payload_after grows", "expunged", periods{time.Hour, 0, 0}, periods{720 * time.Hour, 0, 0}, 1, 0},
		{"expunge turned off", "expunged", periods{time.Hour, 0, 0}, periods{}, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.retain(t, tt.before[0], tt.before[1], tt.before[2])
			var ids []uuid.UUID
			for range 5 {
				ids = append(ids, b.settle(t, lifecycle.Delivered("200")).ID)
			}
			b.clock.Advance(time.Hour)
			r, err := retention.New(retention.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db,
				Batch: 1, Expunges: 1, Concurrency: 1, Pause: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			changed := false
			retention.SetCut(r, func(point string) error {
				// An expunge query of a status with nothing due changes
				// nothing yet.
				var expunged bool
				if err := b.db.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM messages WHERE payload_expunged)`).Scan(&expunged); err != nil {
					t.Fatal(err)
				}
				if point == tt.point && !changed && (expunged || point != "expunged") {
					changed = true
					b.retain(t, tt.after[0], tt.after[1], tt.after[2])
					r.Wake()
				}
				return nil
			})
			res, err := r.Pass(b.ctx)
			if err != nil || res.Expunged != tt.expunged || res.Removed() != tt.removals || !res.SettingsChanged {
				t.Fatalf("pass: %+v, %v", res, err)
			}
			var live, payloads int
			for _, id := range ids {
				l, p := b.live(t, id)
				live += map[bool]int{true: 1}[l]
				payloads += map[bool]int{true: 1}[p]
			}
			if live != 5-tt.removals || payloads != 5-tt.removals-tt.expunged {
				t.Errorf("%d messages live, %d with their payload", live, payloads)
			}
			b.audit(t)
		})
	}
}

// TestSettingsChangedAtCommit: a change of the settings that is under way
// when a removal batch or an expunge commits is waited for, and seen:
// nothing commits under the settings it replaces, and the batch's files
// go.
func TestSettingsChangedAtCommit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		before, after periods
	}{
		{"removal", periods{0, time.Hour, 0}, periods{0, 720 * time.Hour, 0}},
		{"expunge", periods{time.Hour, 0, 0}, periods{720 * time.Hour, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.retain(t, tt.before[0], tt.before[1], tt.before[2])
			m := b.settle(t, lifecycle.Delivered("200"))
			b.clock.Advance(time.Hour)
			// The change as SetSettings writes its row, left uncommitted
			// until the pass waits for it.
			s := lifecycle.DefaultSettings()
			s.Retention = lifecycle.Retention{PayloadAfter: period(tt.after[0]), SettledAfter: period(tt.after[1]), ArchiveDir: b.dir}
			value, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := b.db.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(b.ctx)
			if _, err := tx.Exec(b.ctx, `UPDATE settings SET value = $1`, value); err != nil {
				t.Fatal(err)
			}
			type passed struct {
				res retention.Result
				err error
			}
			done := make(chan passed, 1)
			go func() {
				res, err := b.r.Pass(b.ctx)
				done <- passed{res, err}
			}()
			testpoll.Until(t, "the commit waits for the settings", func() bool {
				var waiting bool
				err := b.db.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting)
				return err == nil && waiting
			})
			if err := tx.Commit(b.ctx); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || got.res.Expunged+got.res.Removed() != 0 {
				t.Fatalf("pass: %+v, %v", got.res, got.err)
			}
			if live, payload := b.live(t, m.ID); !live || !payload {
				t.Errorf("message live %v, with its payload %v", live, payload)
			}
			if pending, _ := filepath.Glob(filepath.Join(b.dir, "*", "pending", "*")); len(pending) != 0 {
				t.Errorf("pending files left: %v", pending)
			}
			b.audit(t)
		})
	}
}

// TestAuditNamesACorruptedFile: the archive verifies, and every damage to
// it (a byte changed, a manifest gone, a file no batch records, a line
// that folds to nothing settled) is a violation naming the file.
func TestAuditNamesACorruptedFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	for range 3 {
		b.settle(t, lifecycle.Delivered("200"))
	}
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Batches != 1 {
		t.Fatalf("pass: %+v", r)
	}
	r, err := retention.VerifyArchive(b.ctx, b.db, b.dir)
	if err != nil || r.Files != 1 || r.Messages != 3 || r.Events != 12 || len(r.Violations) != 0 {
		t.Fatalf("archive: %+v, %v", r, err)
	}
	file := filepath.Join(r.Dirs[0], "000000", "batch-00000001.jsonl.gz")
	manifest := filepath.Join(r.Dirs[0], "000000", "batch-00000001.manifest.json")
	damage := []struct {
		name   string
		do     func() func()
		naming string
	}{
		{"a byte changed", func() func() {
			data, _ := os.ReadFile(file)
			bad := append([]byte{}, data...)
			bad[len(bad)/2] ^= 0xff
			os.WriteFile(file, bad, 0o640)
			return func() { os.WriteFile(file, data, 0o640) }
		}, "batch-00000001.jsonl.gz"},
		{"the manifest gone", func() func() {
			data, _ := os.ReadFile(manifest)
			os.Remove(manifest)
			return func() { os.WriteFile(manifest, data, 0o640) }
		}, "batch-00000001.manifest.json"},
		{"a file no batch records", func() func() {
			extra := filepath.Join(r.Dirs[0], "000000", "batch-00000002.jsonl.gz")
			os.WriteFile(extra, []byte("x"), 0o640)
			return func() { os.Remove(extra) }
		}, "batch-00000002.jsonl.gz"},
	}
	for _, d := range damage {
		undo := d.do()
		got, err := retention.VerifyArchive(b.ctx, b.db, b.dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Violations) == 0 || !strings.Contains(got.Violations[0].String(), d.naming) {
			t.Errorf("%s: violations %v", d.name, got.Violations)
		}
		undo()
	}
	if got, err := retention.VerifyArchive(b.ctx, b.db, b.dir); err != nil || len(got.Violations) != 0 {
		t.Errorf("mended: %+v, %v", got, err)
	}
}

// TestFeedHoldsRemovals: a message leaves only once every feed group's
// place is past its last event; a group named to wait for that has no
// place yet holds everything.
func TestFeedHoldsRemovals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	m := b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	held, err := retention.New(retention.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db,
		FeedGroups: []string{"alerts"}, Pause: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := held.Pass(b.ctx); err != nil || !r.HeldByFeed || r.Removed() != 0 {
		t.Fatalf("no feed place yet: %+v, %v", r, err)
	}
	last := b.lastMark(t, journal.MessageStream(m.ID))
	b.place(t, "alerts", last)
	b.place(t, "events", journal.Mark{TxID: last.TxID, Position: last.Position - 1})
	if r, err := held.Pass(b.ctx); err != nil || !r.HeldByFeed || r.Removed() != 0 {
		t.Fatalf("a group short of the last event: %+v, %v", r, err)
	}
	b.place(t, "events", last)
	if r, err := held.Pass(b.ctx); err != nil || r.HeldByFeed || r.Removed() != 1 {
		t.Fatalf("every group past it: %+v, %v", r, err)
	}
	b.audit(t)
}

// TestEveryStatusIsExpunged: one pass expunges the due payloads of every
// status that lets it, not only of the first.
func TestEveryStatusIsExpunged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, time.Second, 0, 0)
	delivered := b.settle(t, lifecycle.Delivered("200"))
	// No route takes crm's messages: not_routed.
	notRouted, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "crm", From: "acme", To: "globex", Payload: []byte("hello")})
	if err != nil || notRouted.Status != lifecycle.StatusNotRouted {
		t.Fatalf("ingest: %v, %v", notRouted, err)
	}
	b.clock.Advance(time.Second)
	if r := b.pass(t); r.Expunged != 2 {
		t.Errorf("pass: %+v", r)
	}
	for _, id := range []uuid.UUID{delivered.ID, notRouted.ID} {
		if live, payload := b.live(t, id); !live || payload {
			t.Errorf("message %s: live %v, payload %v", id, live, payload)
		}
	}
}

// TestOneProcessAtATime: while another session holds the lease, a pass
// only measures.
func TestOneProcessAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, time.Second, 0, 0)
	b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Second)
	conn, err := b.db.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var ok bool
	if err := conn.QueryRow(b.ctx, `SELECT pg_try_advisory_lock($1)`, int64(0x77617962696c6c30)).Scan(&ok); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if r := b.pass(t); !r.Skipped || r.Expunged != 0 {
		t.Errorf("beside the lease's holder: %+v", r)
	}
	if _, err := conn.Exec(b.ctx, `SELECT pg_advisory_unlock($1)`, int64(0x77617962696c6c30)); err != nil {
		t.Fatal(err)
	}
	if r := b.pass(t); r.Skipped || r.Expunged != 1 {
		t.Errorf("with the lease: %+v", r)
	}
}

// TestTheLoopRunsPasses: started, the service runs passes on its own and
// removes what is due; Stop ends it, twice.
func TestTheLoopRunsPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Second, 0)
	m := b.settle(t, lifecycle.Delivered("200"))
	b.clock.Advance(time.Second)
	if err := b.r.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the message removed", func() bool { live, _ := b.live(t, m.ID); return !live })
	b.r.Stop(b.ctx)
	b.r.Stop(b.ctx)
	if err := b.r.Start(b.ctx); err == nil {
		t.Error("Start after Stop")
	}
	b.audit(t)
}

func TestInterval(t *testing.T) {
	for _, tt := range []struct {
		r    lifecycle.Retention
		want time.Duration
	}{
		{lifecycle.Retention{}, time.Minute},
		{lifecycle.Retention{PayloadAfter: period(time.Second)}, time.Second},
		{lifecycle.Retention{PayloadAfter: period(30 * time.Second)}, 3 * time.Second},
		{lifecycle.Retention{SettledAfter: period(72 * time.Hour), PayloadAfter: period(time.Hour)}, time.Minute},
	} {
		if got := retention.Interval(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.r, got, tt.want)
		}
	}
}

func TestShard(t *testing.T) {
	for batch, want := range map[int64]string{1: "000000", 1000: "000000", 1001: "000001", 123456: "000123"} {
		if got := retention.Shard(batch); got != want {
			t.Errorf("batch %d in %s, want %s", batch, got, want)
		}
	}
}

// TestSentAlertsLeaveAfterTheLongestPeriod: a pass deletes the alerts
// raised longer ago than the longest removal period once every channel
// owed has taken them, a batch at a time; the others stay. The alerter's
// place is past their event.
func TestSentAlertsLeaveAfterTheLongestPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 2*time.Hour)
	b.place(t, alerts.AlerterGroup, b.lastMark(t, journal.ConfigStream))
	now := b.clock.Now()
	for _, a := range []struct {
		id                     string
		age                    time.Duration
		webhook, nats, webSent bool
	}{
		{"old-sent", 3 * time.Hour, false, true, false},
		{"old-webhook-sent", 3 * time.Hour, true, true, true},
		{"old-webhook-owed", 3 * time.Hour, true, true, false},
		{"old-nats-owed", 3 * time.Hour, false, false, false},
		{"within-failed-after", 90 * time.Minute, false, true, false},
	} {
		sent := func(yes bool) *time.Time {
			if !yes {
				return nil
			}
			return &now
		}
		if _, err := b.db.Exec(b.ctx, `INSERT INTO alerts (id, code, severity, key, position, raised_at, body, webhook,
			nats_sent_at, webhook_sent_at) VALUES ($1, 'message_failed', 'error', 'k', 1, $2, '{}', $3, $4, $5)`,
			a.id, now.Add(-a.age), a.webhook, sent(a.nats), sent(a.webSent)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	r, err := retention.New(retention.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db,
		Batch: 1, Pause: time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Pass(b.ctx)
	if err != nil || res.Alerts != 2 {
		t.Fatalf("pass: %+v, %v", res, err)
	}
	rows, err := b.db.Query(b.ctx, `SELECT id FROM alerts ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old-nats-owed", "old-webhook-owed", "within-failed-after"}; !slices.Equal(left, want) {
		t.Errorf("alerts left %v, want %v", left, want)
	}
	if got := metric(t, reg, "waybill_retention_alerts_removed_total"); got != 2 {
		t.Errorf("metric %v", got)
	}
}

// TestSentAlertsLeaveBehindTheAlerter: a sent alert, however old, is
// deleted only once the alerter's saved place has passed its event in the
// feed's (txid, position) order, or its event left the journal: the
// alerter may handle any other again, and would raise it twice. Without a
// place of the alerter every alert stays; another group's place does not
// count.
func TestSentAlertsLeaveBehindTheAlerter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	first := b.lastMark(t, journal.MessageStream(b.settle(t, lifecycle.Delivered("200")).ID))
	second := b.lastMark(t, journal.MessageStream(b.settle(t, lifecycle.Delivered("200")).ID))
	if second.TxID <= first.TxID || second.Position <= first.Position {
		t.Fatalf("marks %+v, %+v", first, second)
	}
	raised := b.clock.Now().Add(-3 * time.Hour)
	for id, position := range map[string]int64{"passed": first.Position, "ahead": second.Position, "event gone": second.Position + 1000} {
		if _, err := b.db.Exec(b.ctx, `INSERT INTO alerts (id, code, severity, key, position, raised_at, body, webhook,
			nats_sent_at) VALUES ($1, 'message_failed', 'error', 'k', $2, $3, '{}', false, $3)`, id, position, raised); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		t.Helper()
		rows, err := b.db.Query(b.ctx, `SELECT id FROM alerts ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, step := range []struct {
		name  string
		place func()
		left  []string
	}{
		{"no place", func() {}, []string{"ahead", "event gone", "passed"}},
		{"another group's place", func() { b.place(t, alerts.StreamGroup, second) }, []string{"ahead", "event gone", "passed"}},
		// Past the second event's position, but in an earlier
		// transaction than it: the second is still ahead.
		{"between the events", func() { b.place(t, alerts.AlerterGroup, journal.Mark{TxID: first.TxID, Position: second.Position + 1}) },
			[]string{"ahead"}},
		{"at the second event", func() { b.place(t, alerts.AlerterGroup, second) }, nil},
	} {
		step.place()
		if _, err := b.r.Pass(b.ctx); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := left(); !slices.Equal(got, step.left) {
			t.Errorf("%s: alerts left %v, want %v", step.name, got, step.left)
		}
	}
}
