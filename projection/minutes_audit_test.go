package projection_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/projection"
)

// TestAuditNamesAWrongMinuteCountAndRebuildMendsIt: the commands keep the
// outcomes by the minute as the journal makes them, the audit names a
// count that is not, a rebuild writes them anew, and retention's horizon
// takes the minutes before it out of the table and of the audit.
func TestAuditNamesAWrongMinuteCountAndRebuildMendsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := b.now
	b.lifecycles(t, 40, rand.New(rand.NewPCG(3, 4)))
	kept := func() []string {
		t.Helper()
		rows, err := b.db.Query(b.ctx, `SELECT target || ' ' || to_char(minute AT TIME ZONE 'UTC', 'HH24:MI') || ' ' ||
			outcome || ' ' || class || ' ' || bucket || ' ' || sum(n)
			FROM delivery_minute_counts GROUP BY target, minute, outcome, class, bucket HAVING sum(n) <> 0 ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := kept()
	joined := strings.Join(before, "\n")
	for _, want := range []string{" delivered 2xx ", " retrying 5xx -1 ", " failed 4xx -1 ", " awaiting_ack none -1 "} {
		if !strings.Contains(joined, want) {
			t.Fatalf("no count of %q in\n%s", want, joined)
		}
	}
	if r := b.audit(t); len(r.Violations) > 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO delivery_minute_counts VALUES ('alpha', $1, 'delivered', '2xx', 3, 9999, 2)`,
		start.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	var got []string
	for _, v := range r.Violations {
		got = append(got, v.String())
	}
	want := []string{"the count of delivered outcomes (2xx, latency bucket 3) of alpha in the minute from 2026-12-01T07:00:00Z is 2, the journal makes 0"}
	if !slices.Equal(got, want) {
		t.Fatalf("violations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v, %v", r, err)
	}
	if after := kept(); !slices.Equal(after, before) {
		t.Fatalf("counts after rebuild\n%s\nbefore\n%s", after, before)
	}

	// Tidied an hour after the first outcomes, every minute before the
	// last has one row for each key, and the counts are the same.
	// As the commands' many backends would leave them: in shards other
	// than 0, several for a key.
	if _, err := b.db.Exec(b.ctx, `UPDATE delivery_minute_counts SET shard = shard + 1;
		INSERT INTO delivery_minute_counts SELECT target, minute, outcome, class, bucket, shard + 100, 0 FROM delivery_minute_counts`); err != nil {
		t.Fatal(err)
	}
	pruned, folded, err := projection.TidyMinutes(b.ctx, b.db, b.now.Add(2*time.Minute))
	if err != nil || pruned != 0 || folded == 0 {
		t.Fatalf("tidy: %d pruned, %d folded, %v", pruned, folded, err)
	}
	var unfolded int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM delivery_minute_counts WHERE shard <> 0`).Scan(&unfolded); err != nil || unfolded > 0 {
		t.Fatalf("%d rows not folded, %v", unfolded, err)
	}
	if after := kept(); !slices.Equal(after, before) {
		t.Fatalf("counts after folding\n%s\nbefore\n%s", after, before)
	}

	// The minutes before the horizon go; a count below it is neither
	// written nor audited, and the rebuild leaves them out.
	horizon := start.Add(10 * time.Minute)
	pruned, _, err = projection.TidyMinutes(b.ctx, b.db, horizon.Add(projection.MinutesKept))
	if err != nil || pruned == 0 {
		t.Fatalf("prune: %d, %v", pruned, err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO delivery_minute_counts VALUES ('alpha', $1, 'failed', 'none', -1, 9999, -1)`,
		start); err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) > 0 {
		t.Fatalf("violations after the prune: %v", r.Violations)
	}
	if _, err := projection.Rebuild(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	var old int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM delivery_minute_counts WHERE minute < $1`, horizon).Scan(&old); err != nil || old > 0 {
		t.Fatalf("%d rows before the horizon after the rebuild, %v", old, err)
	}
	if _, _, err := projection.TidyMinutes(b.ctx, b.db, start.Add(projection.MinutesKept)); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	if err := b.db.QueryRow(b.ctx, `SELECT since FROM delivery_minutes_kept`).Scan(&since); err != nil || !since.Equal(horizon) {
		t.Fatalf("horizon %s, %v; want %s: it never moves back", since, err, horizon)
	}
}
