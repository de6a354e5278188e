package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The statements of a run are read from pg_stat_statements, PostgreSQL's
// own statistics: no package of Waybill owns them, so their SQL is here.

// statementCost is one statement's line of pg_stat_statements.
type statementCost struct {
	query       string
	calls       int64
	totalMS     float64
	planMS      float64
	rows        int64
	sharedReads int64
}

// statementsSettings are the server settings --statements adds to the
// bench's own PostgreSQL.
var statementsSettings = map[string]string{"shared_preload_libraries": "pg_stat_statements",
	"pg_stat_statements.max": "1000", "pg_stat_statements.track_planning": "on"}

// resetStatements loads pg_stat_statements into db's database, if need be,
// and forgets what it counted so far.
func resetStatements(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	return nil
}

// topStatements reads the statements that took the most time.
func topStatements(ctx context.Context, db *pgxpool.Pool) ([]statementCost, error) {
	rows, err := db.Query(ctx, `SELECT regexp_replace(query, '\s+', ' ', 'g'), calls, total_exec_time, total_plan_time, rows,
			shared_blks_read
		FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`)
	if err != nil {
		return nil, err
	}
	var out []statementCost
	var s statementCost
	_, err = pgx.ForEachRow(rows, []any{&s.query, &s.calls, &s.totalMS, &s.planMS, &s.rows, &s.sharedReads}, func() error {
		// Statements that share a long start (the lock of a batch's
		// messages, their read) differ at their end: keep both.
		if len(s.query) > 200 {
			s.query = s.query[:110] + " … " + s.query[len(s.query)-90:]
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// printStatements prints what topStatements read during what.
func printStatements(w io.Writer, what string, statements []statementCost) {
	if len(statements) == 0 {
		return
	}
	fmt.Fprintf(w, "  statements by total time during %s:\n", what)
	for _, s := range statements {
		fmt.Fprintf(w, "    %9.0f ms %7.0f plan ms %8d calls %9d rows %8d reads  %s\n", s.totalMS, s.planMS, s.calls, s.rows,
			s.sharedReads, s.query)
	}
}
