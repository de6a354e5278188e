package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/pgserver"
	"github.com/waybill/waybill/schema"
)

// What a run wrote in the projection tables is read from PostgreSQL's own
// statistics (pg_stat_user_tables, the row versions) and, on the bench's
// own server, from its write-ahead log (the index entries, which no
// statistics view counts): no package of Waybill owns them, so their SQL
// is here. The journal and the payloads are not projections and are left
// out.

// tableWrites is what pg_stat_user_tables counted of one table's rows:
// inserted, updated (hot of them heap-only, with no index entry), deleted.
type tableWrites struct{ ins, upd, hot, del int64 }

// versions is the row versions written: each insert and update writes one.
func (w tableWrites) versions() int64 { return w.ins + w.upd }

// projectionWrites is what a run wrote in each projection table.
type projectionWrites struct {
	rows map[string]tableWrites
	// entries are the b-tree entries inserted in each table's indexes,
	// nil when the log could not be read; uncounted then says why.
	entries   map[string]int64
	uncounted string
	// walBytes is the length of the log the run wrote, all tables.
	walBytes int64
}

// writesMark is where a run's writes start: the tables' counts and the
// place in the log.
type writesMark struct {
	rows map[string]tableWrites
	lsn  string
}

// markWrites reads the projection tables' counts and the log's place now.
func markWrites(ctx context.Context, db *pgxpool.Pool) (writesMark, error) {
	var m writesMark
	rows, err := readTableWrites(ctx, db)
	if err != nil {
		return m, err
	}
	m.rows = rows
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&m.lsn); err != nil {
		return m, fmt.Errorf("the log's place: %w", err)
	}
	return m, nil
}

// readTableWrites reads pg_stat_user_tables for the projection tables.
func readTableWrites(ctx context.Context, db *pgxpool.Pool) (map[string]tableWrites, error) {
	rows, err := db.Query(ctx, `SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = ANY($1)`, schema.ProjectionTables())
	if err != nil {
		return nil, fmt.Errorf("the tables' statistics: %w", err)
	}
	out := map[string]tableWrites{}
	var (
		name string
		w    tableWrites
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &w.ins, &w.upd, &w.hot, &w.del}, func() error {
		out[name] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the tables' statistics: %w", err)
	}
	return out, nil
}

// writesSince reads what the projections were written since from. Every
// other session must have ended first: a backend reports its counts to the
// statistics when it ends, or a second or more after its last report, so
// the caller stops the server and this waits for its sessions to go. With
// walDir, the bench's own server's log, it counts the index entries there.
func writesSince(ctx context.Context, db *pgxpool.Pool, from writesMark, walDir string) (*projectionWrites, error) {
	db.Reset()
	deadline := time.Now().Add(time.Minute)
	for {
		var others int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&others); err != nil {
			return nil, fmt.Errorf("the sessions left: %w", err)
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d sessions of the server still open a minute after it stopped", others)
		}
		time.Sleep(50 * time.Millisecond)
	}
	to, err := markWrites(ctx, db)
	if err != nil {
		return nil, err
	}
	w := &projectionWrites{rows: map[string]tableWrites{}}
	for name, a := range to.rows {
		b := from.rows[name]
		w.rows[name] = tableWrites{ins: a.ins - b.ins, upd: a.upd - b.upd, hot: a.hot - b.hot, del: a.del - b.del}
	}
	if err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, to.lsn, from.lsn).Scan(&w.walBytes); err != nil {
		return nil, fmt.Errorf("the log's length: %w", err)
	}
	// A run's other figures stand without the index entries: a long one
	// may write more log than the server keeps.
	w.uncounted = "the log of the bench's own server only"
	if walDir != "" {
		if w.entries, err = indexEntries(ctx, db, walDir, from.lsn, to.lsn); err != nil {
			w.uncounted = fmt.Sprintf("the run's log could not be read: %v", err)
		}
	}
	return w, nil
}

// leafInsert matches a b-tree record of pg_waldump that adds an entry to
// a leaf page, and the relation it names: an insert, an insert into a
// posting list, or a split of a leaf page, which carries the new entry.
var leafInsert = regexp.MustCompile(`desc: (?:INSERT_LEAF|INSERT_POST|SPLIT_[LR] level: 0)\b.*blkref #0: rel \d+/\d+/(\d+) `)

// indexEntries counts, by projection table, the b-tree entries the log in
// walDir holds between the places from and to, with pg_waldump.
func indexEntries(ctx context.Context, db *pgxpool.Pool, walDir, from, to string) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT pg_relation_filenode(i.indexrelid)::text, t.relname::text
		FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
		WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY($1)`, schema.ProjectionTables())
	if err != nil {
		return nil, fmt.Errorf("the projections' indexes: %w", err)
	}
	tableOf := map[string]string{}
	var node, table string
	if _, err := pgx.ForEachRow(rows, []any{&node, &table}, func() error {
		tableOf[node] = table
		return nil
	}); err != nil {
		return nil, fmt.Errorf("the projections' indexes: %w", err)
	}
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_waldump"), "--path", walDir, "--start", from, "--end", to, "--rmgr", "Btree")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w", err)
	}
	entries := map[string]int64{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := leafInsert.FindSubmatch(sc.Bytes()); m != nil {
			if t, ok := tableOf[string(m[1])]; ok {
				entries[t]++
			}
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return entries, nil
}

// print prints the writes per delivery of n, in all and by table, the
// tables that wrote most first.
func (w *projectionWrites) print(out io.Writer, n float64) {
	var all tableWrites
	var entries int64
	names := make([]string, 0, len(w.rows))
	for name, r := range w.rows {
		all.ins, all.upd, all.hot, all.del = all.ins+r.ins, all.upd+r.upd, all.hot+r.hot, all.del+r.del
		entries += w.entries[name]
		if r.versions()+r.del > 0 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return int(w.rows[b].versions()+w.entries[b]) - int(w.rows[a].versions()+w.entries[a])
	})
	fmt.Fprintf(out, "  per delivery, ingest and drain: %.2f row versions (%.2f HOT), ", float64(all.versions())/n, float64(all.hot)/n)
	if w.entries != nil {
		fmt.Fprintf(out, "%.2f index entries", float64(entries)/n)
	} else {
		fmt.Fprintf(out, "index entries not counted (%s)", w.uncounted)
	}
	fmt.Fprintf(out, " in the projections; %.0f bytes of log in all\n", float64(w.walBytes)/n)
	fmt.Fprint(out, "    by table (inserted/updated/HOT/deleted")
	if w.entries != nil {
		fmt.Fprint(out, "/index entries")
	}
	fmt.Fprint(out, "):")
	for i, name := range names {
		r := w.rows[name]
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(out, "%s %s %s/%s/%s/%s", sep, name, perDelivery(r.ins, n), perDelivery(r.upd, n), perDelivery(r.hot, n), perDelivery(r.del, n))
		if w.entries != nil {
			fmt.Fprintf(out, "/%s", perDelivery(w.entries[name], n))
		}
	}
	fmt.Fprintln(out)
}

// perDelivery is count/n to two places.
func perDelivery(count int64, n float64) string {
	return strconv.FormatFloat(float64(count)/n, 'f', 2, 64)
}
