package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// inboxDDL is the upstream's table in the tests: ids from a sequence,
// text parties and body, and a processed time.
const inboxDDL = `CREATE TABLE inbox (
	id        bigserial PRIMARY KEY,
	sender    text,
	receiver  text,
	body      text,
	lane      text,
	processed timestamptz
)`

// inboxDB makes a second database on the test server, the upstream's, with
// the inbox table, and returns its URL and a pool on it.
func inboxDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := dbtest.URL(t)
	db, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Exec(t.Context(), inboxDDL); err != nil {
		t.Fatal(err)
	}
	return url, db
}

// inboxSource creates an inbox_table source on the inbox at url and
// returns its poller, resumed from its stored watermark.
func (f *fixture) inboxSource(t *testing.T, name, url string, config map[string]any) *inbox {
	t.Helper()
	cfg := map[string]any{"database_url": url, "table": "inbox", "id_column": "id", "payload_column": "body",
		"from_column": "sender", "to_column": "receiver", "processed_column": "processed"}
	for k, v := range config {
		cfg[k] = v
	}
	s := f.source(t, name, sources.KindInboxTable, cfg)
	ic, err := sources.Inbox(s)
	if err != nil {
		t.Fatal(err)
	}
	p := newInbox(name, testHolder, ic, f.w, f.db, f.base, lifecycle.DefaultMaxPayload)
	t.Cleanup(p.close)
	if _, held, err := sources.TakeLease(f.ctx, f.db, name, testHolder, f.clock.Now().Add(time.Hour), f.clock.Now()); err != nil || !held {
		t.Fatalf("take the lease of %s: %v, held %v", name, err, held)
	}
	p.resume(f.watermark(t, name))
	return p
}

// testHolder holds the leases of the tests' inbox pollers.
const testHolder = "test"

// restart is a new poller of the same source, as a process started after
// a crash makes it.
func (f *fixture) restart(t *testing.T, p *inbox) *inbox {
	t.Helper()
	q := newInbox(p.name, p.holder, p.cfg, p.w, p.db, f.base, p.maxPayload)
	t.Cleanup(q.close)
	q.resume(f.watermark(t, p.name))
	return q
}

func (f *fixture) watermark(t *testing.T, source string) int64 {
	t.Helper()
	var w int64
	if err := f.db.QueryRow(f.ctx, `SELECT watermark FROM source_state WHERE name = $1`, source).Scan(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

// insert adds a row in its own transaction and returns its id.
func insert(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, body string) int64 {
	t.Helper()
	var id int64
	if err := q.QueryRow(context.Background(), `INSERT INTO inbox (sender, receiver, body) VALUES ('ciims', 'aodb', $1) RETURNING id`, body).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// unmarked counts the rows without a processed marker.
func unmarked(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM inbox WHERE processed IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) poll(t *testing.T, p *inbox) report {
	t.Helper()
	rep, err := p.poll(f.ctx)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	return rep
}

// bodies lists the payloads of the source's messages, oldest first.
func (f *fixture) bodies(t *testing.T, source string) string {
	t.Helper()
	var out []string
	for _, m := range f.messages(t, source) {
		out = append(out, f.payload(t, m))
	}
	return strings.Join(out, ",")
}

// TestInboxWritersOutOfOrder: a row committed before one with a lower id
// is taken at once; the lower one, committed later but within
// max_commit_delay, is taken when it appears, and only then does the
// watermark pass both. Every row ends with its marker, and one message.
func TestInboxWritersOutOfOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	p := f.inboxSource(t, "ciims", url, nil)

	slow, err := up.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.Background())
	first := insert(t, slow, "first")
	second := insert(t, up, "second")
	if second != first+1 {
		t.Fatalf("ids %d, %d", first, second)
	}
	rep := f.poll(t, p)
	if rep.taken != 1 || f.watermark(t, "ciims") != 0 || len(p.gaps) != 1 {
		t.Fatalf("second row: %+v, watermark %d, gaps %v", rep, f.watermark(t, "ciims"), p.gaps)
	}
	f.clock.Advance(4 * time.Minute)
	if rep = f.poll(t, p); rep.taken != 0 || f.watermark(t, "ciims") != 0 {
		t.Fatalf("gap still open: %+v", rep)
	}
	if err := slow.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if rep = f.poll(t, p); rep.taken != 1 || f.watermark(t, "ciims") != second || len(p.gaps) != 0 {
		t.Fatalf("late row: %+v, watermark %d", rep, f.watermark(t, "ciims"))
	}
	if got := f.bodies(t, "ciims"); got != "second,first" {
		t.Errorf("messages %s", got)
	}
	if n := unmarked(t, up); n != 0 {
		t.Errorf("%d rows unmarked", n)
	}
	if rep.owed != 0 || rep.backlog != 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestInboxRolledBackIDIsPassed: an id whose transaction rolled back is a
// permanent hole: the watermark waits for it max_commit_delay, then it is
// journaled as passed and the watermark moves on over it.
func TestInboxRolledBackIDIsPassed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	p := f.inboxSource(t, "ciims", url, map[string]any{"max_commit_delay": "10m"})

	tx, err := up.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	hole := insert(t, tx, "never")
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	after := insert(t, up, "after")
	f.poll(t, p)
	f.clock.Advance(10*time.Minute - time.Second)
	f.poll(t, p)
	if w := f.watermark(t, "ciims"); w != 0 {
		t.Fatalf("watermark %d before max_commit_delay", w)
	}
	f.clock.Advance(time.Second)
	f.poll(t, p)
	if w := f.watermark(t, "ciims"); w != after {
		t.Fatalf("watermark %d, want %d", w, after)
	}
	events, err := journal.Stream(f.ctx, f.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1].Payload.(*journal.SourceHolePassed)
	if last.Source != "ciims" || last.From != hole || last.To != hole || last.MaxCommitDelay.D() != 10*time.Minute {
		t.Errorf("journaled %+v", last)
	}
	// A restart reads above the watermark only: nothing again.
	if rep := f.poll(t, f.restart(t, p)); rep.taken != 0 || rep.backlog != 0 {
		t.Errorf("after a restart: %+v", rep)
	}
	if got := f.bodies(t, "ciims"); got != "after" {
		t.Errorf("messages %s", got)
	}
}

// TestInboxHolePassedOnlyByItsHolder: a poller that stalled after it
// searched a gap, while another process took the source over and took the
// row that then appeared in it, does not pass that gap as a hole: only the
// lease's holder may, and the journal never holds a hole over a row taken.
func TestInboxHolePassedOnlyByItsHolder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	a := f.inboxSource(t, "ciims", url, map[string]any{"max_commit_delay": "10m"})
	slow, err := up.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.Background())
	late := insert(t, slow, "late")
	insert(t, up, "second")
	f.poll(t, a)
	f.clock.Advance(10 * time.Minute)
	now := f.clock.Now()
	var rep report
	if _, err := a.takeLate(f.ctx, &rep); err != nil || rep.taken != 0 {
		t.Fatalf("late rows: %+v, %v", rep, err)
	}

	// a stalls; its lease runs out and another process takes the source.
	f.clock.Advance(time.Hour)
	b := newInbox(a.name, "other", a.cfg, a.w, a.db, f.base, a.maxPayload)
	t.Cleanup(b.close)
	if _, held, err := sources.TakeLease(f.ctx, f.db, "ciims", "other", f.clock.Now().Add(time.Minute), f.clock.Now()); err != nil || !held {
		t.Fatalf("take over: %v, held %v", err, held)
	}
	b.resume(f.watermark(t, "ciims"))
	if err := slow.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if rep := f.poll(t, b); rep.taken != 1 {
		t.Fatalf("the late row: %+v", rep)
	}
	if err := a.passHoles(f.ctx, now); !errors.Is(err, commands.ErrSourceNotHeld) {
		t.Fatalf("the stalled poller passed %d as a hole: %v", late, err)
	}
	if got := f.bodies(t, "ciims"); got != "second,late" {
		t.Errorf("messages %s", got)
	}
}

// TestInboxAwayAndBack: while the inbox database is away every poll fails
// and takes nothing; once it is back the rows are taken and marked. A
// crash after the rows are stored and before their markers are written
// repeats the markers, never the messages.
func TestInboxAwayAndBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, up := inboxDB(t)
	proxy := dbtest.NewProxy(t, up)
	p := f.inboxSource(t, "ciims", proxy.URL(), nil)
	for i := range 3 {
		insert(t, up, fmt.Sprint(i))
	}
	proxy.Cut()
	for range 2 {
		if _, err := p.poll(f.ctx); err == nil {
			t.Fatal("a poll with the inbox away succeeded")
		}
	}
	proxy.Restore()

	// Stored, and the process dies before the markers.
	if err := p.connect(f.ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := p.read(f.ctx, p.sql.read, int64(0), 10)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if n, err := p.take(f.ctx, rows, &rep); err != nil || n != 3 || rep.taken != 3 {
		t.Fatalf("take %d: %v", n, err)
	}
	if unmarked(t, up) != 3 {
		t.Fatal("markers written before the poll")
	}
	q := f.restart(t, p)
	if rep := f.poll(t, q); rep.taken != 0 || rep.owed != 0 {
		t.Fatalf("after the restart: %+v", rep)
	}
	if n := unmarked(t, up); n != 0 || f.bodies(t, "ciims") != "0,1,2" || f.watermark(t, "ciims") != 3 {
		t.Fatalf("%d unmarked, messages %s", n, f.bodies(t, "ciims"))
	}
}

// TestInboxMarkers: a marker is written only where the column is empty;
// one that cannot be written is tried again after a back-off that
// doubles, and once owed for force_marker_after at every poll whatever
// its back-off.
func TestInboxMarkers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	p := f.inboxSource(t, "ciims", url, map[string]any{"processed_value": "not a time", "force_marker_after": "10s"})
	id := insert(t, up, "x")
	set := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	done := insert(t, up, "y")
	if _, err := up.Exec(f.ctx, `UPDATE inbox SET processed = $1 WHERE id = $2`, set, done); err != nil {
		t.Fatal(err)
	}
	tries := func() int {
		var n int
		if err := f.db.QueryRow(f.ctx, `SELECT tries FROM inbox_markers WHERE source = 'ciims' AND row_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := p.poll(f.ctx); err == nil || !strings.Contains(err.Error(), "write markers") {
		t.Fatalf("poll: %v", err)
	}
	if tries() != 1 {
		t.Fatalf("tries %d", tries())
	}
	_, _ = p.poll(f.ctx) // due in 1 s: not tried
	f.clock.Advance(time.Second)
	_, _ = p.poll(f.ctx)
	_, _ = p.poll(f.ctx) // due in 2 s: not tried
	if tries() != 2 {
		t.Fatalf("tries %d, want 2", tries())
	}
	f.clock.Advance(9 * time.Second) // owed for 10 s
	_, _ = p.poll(f.ctx)
	_, _ = p.poll(f.ctx)
	if tries() != 4 {
		t.Fatalf("tries %d, want 4: forced at every poll", tries())
	}

	// With a value the column takes: written, the other row untouched.
	p.cfg.ProcessedValue = ""
	if rep := f.poll(t, p); rep.owed != 0 {
		t.Fatalf("%+v", rep)
	}
	var got time.Time
	if err := up.QueryRow(f.ctx, `SELECT processed FROM inbox WHERE id = $1`, done).Scan(&got); err != nil || !got.Equal(set) {
		t.Errorf("a marker overwritten: %v %v", got, err)
	}
	if err := up.QueryRow(f.ctx, `SELECT processed FROM inbox WHERE id = $1`, id).Scan(&got); err != nil || !got.Equal(f.clock.Now()) {
		t.Errorf("marker %v, want the time of the write %v (%v)", got, f.clock.Now(), err)
	}
}

// TestInboxBacklog: a table far ahead is taken in batches, each poll
// asking for the next at once, with the rows behind, the oldest unread
// row's age and the markers measured.
func TestInboxBacklog(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	if _, err := up.Exec(f.ctx, `INSERT INTO inbox (sender, receiver, body) SELECT 'a', 'b', g::text FROM generate_series(1, 250) g`); err != nil {
		t.Fatal(err)
	}
	p := f.inboxSource(t, "ciims", url, map[string]any{"batch": 100})
	var reps []report
	for {
		reps = append(reps, f.poll(t, p))
		f.clock.Advance(time.Second)
		if !reps[len(reps)-1].more {
			break
		}
	}
	if len(reps) != 3 {
		t.Fatalf("%d polls", len(reps))
	}
	for i, want := range []struct {
		taken   int
		backlog int64
		lag     time.Duration
	}{{100, 150, 0}, {100, 50, time.Second}, {50, 0, 0}} {
		if r := reps[i]; r.taken != want.taken || r.backlog != want.backlog || r.lag != want.lag || r.owed != 0 {
			t.Errorf("poll %d: %+v, want %+v", i, r, want)
		}
	}
	if n := unmarked(t, up); n != 0 || f.watermark(t, "ciims") != 250 {
		t.Errorf("%d unmarked, watermark %d", n, f.watermark(t, "ciims"))
	}
}

// TestInboxRowThatCannotBeTaken stops the source at that row, whose id is
// never passed, until it is fixed.
func TestInboxRowThatCannotBeTaken(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	p := f.inboxSource(t, "ciims", url, map[string]any{"max_commit_delay": "1s"})
	insert(t, up, "a")
	var bad int64
	if err := up.QueryRow(f.ctx, `INSERT INTO inbox (sender, body) VALUES ('x', 'b') RETURNING id`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	insert(t, up, "c")
	for range 2 {
		_, err := p.poll(f.ctx)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("row %d cannot be taken: receiver is NULL", bad)) {
			t.Fatalf("poll: %v", err)
		}
		f.clock.Advance(time.Hour)
	}
	if w := f.watermark(t, "ciims"); w != bad-1 {
		t.Fatalf("watermark %d", w)
	}
	if _, err := up.Exec(f.ctx, `UPDATE inbox SET receiver = 'y' WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	f.poll(t, p)
	if got := f.bodies(t, "ciims"); got != "a,b,c" || f.watermark(t, "ciims") != bad+1 {
		t.Errorf("messages %s, watermark %d", got, f.watermark(t, "ciims"))
	}
}

func TestGaps(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var g gaps
	g.add(3, 2, at) // empty
	g.add(3, 5, at)
	g.add(8, 8, at.Add(time.Second))
	if g.watermark(10) != 2 || len(g) != 2 {
		t.Fatalf("%v", g)
	}
	g.take(4)
	if fmt.Sprint(g.bounds()) != "[3 5 8] [3 5 8]" {
		t.Fatalf("%v", g)
	}
	g.take(3)
	g.take(5)
	g.take(7)
	if g.watermark(10) != 7 || len(g) != 1 {
		t.Fatalf("%v", g)
	}
	g.take(8)
	if g.watermark(10) != 10 {
		t.Fatalf("%v", g)
	}
}

// TestInboxOrderingKeys: the ordering_key_column gives each message its
// ordering key; NULL gives none.
func TestInboxOrderingKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	if _, err := up.Exec(f.ctx, `INSERT INTO inbox (sender, receiver, body, lane) VALUES
		('a', 'b', '1', 'patient-7'), ('a', 'b', '2', NULL), ('a', 'b', '3', 'patient-7')`); err != nil {
		t.Fatal(err)
	}
	p := f.inboxSource(t, "ciims", url, map[string]any{"ordering_key_column": "lane"})
	if rep := f.poll(t, p); rep.taken != 3 {
		t.Fatalf("%+v", rep)
	}
	var keys []string
	for _, m := range f.messages(t, "ciims") {
		keys = append(keys, m.OrderingKey)
	}
	if strings.Join(keys, ",") != "patient-7,,patient-7" {
		t.Errorf("ordering keys %q", keys)
	}
}

// TestInboxRowWhoseKeyIsHeld: a row whose key a message with other
// content holds is passed as a failure, which the report names, without
// its marker; the rows after it are taken and the watermark passes it.
func TestInboxRowWhoseKeyIsHeld(t *testing.T) {
	t.Parallel()
	f := setup(t)
	url, up := inboxDB(t)
	p := f.inboxSource(t, "ciims", url, nil)
	held := insert(t, up, "a")
	if _, _, err := f.w.Ingest(f.ctx, commands.NewMessage{Source: "ciims", From: "ciims", To: "aodb", Payload: []byte("forged"),
		IdempotencyKey: RowKey(held)}); err != nil {
		t.Fatal(err)
	}
	last := insert(t, up, "b")
	rep := f.poll(t, p)
	if rep.taken != 1 || rep.failed != 1 || !strings.Contains(rep.problem, fmt.Sprintf("row %d passed", held)) ||
		!strings.Contains(rep.problem, "another payload") {
		t.Fatalf("%+v", rep)
	}
	if got := f.bodies(t, "ciims"); got != "forged,b" || f.watermark(t, "ciims") != last {
		t.Errorf("messages %s, watermark %d", got, f.watermark(t, "ciims"))
	}
	testpoll.Until(t, "the taken row's marker", func() bool {
		_ = p.writeMarkers(f.ctx)
		return unmarked(t, up) == 1
	})
}

// TestInboxCreatedAgain: a source deleted and created again knows the rows
// its earlier self took by their ids: pointed at the same ids in another
// table, it passes a row of the same content as found stored and refuses
// one of other content, and the audit accounts for both.
func TestInboxCreatedAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first, upFirst := inboxDB(t)
	p := f.inboxSource(t, "erp", first, nil)
	insert(t, upFirst, "a1")
	insert(t, upFirst, "a2")
	if rep := f.poll(t, p); rep.taken != 2 {
		t.Fatalf("%+v", rep)
	}
	p.close()
	if err := f.w.DeleteSource(f.ctx, "erp", admin); err != nil {
		t.Fatal(err)
	}

	second, upSecond := inboxDB(t)
	q := f.inboxSource(t, "erp", second, nil)
	insert(t, upSecond, "b1")
	insert(t, upSecond, "a2")
	rep := f.poll(t, q)
	if rep.taken != 0 || rep.failed != 1 || !strings.Contains(rep.problem, "row 1 passed") {
		t.Fatalf("%+v", rep)
	}
	if got := f.bodies(t, "erp"); got != "a1,a2" || f.watermark(t, "erp") != 2 {
		t.Errorf("messages %s, watermark %d", got, f.watermark(t, "erp"))
	}
}
