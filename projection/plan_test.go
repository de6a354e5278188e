package projection_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
)

// TestWriterStatementsLookUpEachRow: under LookupPlanSQL the generic plans
// of the Writer's reads and writes find each row by an index, even when
// made on tables never analyzed, as the first batches of a new database
// make them.
func TestWriterStatementsLookUpEachRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO lanes (target, ordering_key, last_seq, head_settled, waiting, held)
		VALUES ('alpha', 'k', 1, false, 0, false)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sql, args string
	}{
		{"the lock", projection.LockSQL, `'{}', '{}', true`},
		{"the read", projection.LoadManySQL, `'{}'`},
		{"the messages' update", projection.UpdateMessagesSQL, strings.Repeat(`'{}', `, 11) + `'{}'`},
		{"the lanes' delete", projection.DeleteLanesSQL, `'{}', '{}'`},
	} {
		var plan []string
		err := pgx.BeginFunc(b.ctx, b.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, projection.LookupPlanSQL); err != nil {
				return err
			}
			// EXPLAIN EXECUTE shows the plan a prepared statement runs,
			// which under LookupPlanSQL is the generic one.
			if _, err := tx.Exec(b.ctx, `PREPARE planned AS `+c.sql); err != nil {
				return err
			}
			rows, err := tx.Query(b.ctx, `EXPLAIN EXECUTE planned(`+c.args+`)`)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			_, err = tx.Exec(b.ctx, `DEALLOCATE planned`)
			return err
		})
		if err != nil {
			t.Fatal(c.name, err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan") || strings.Contains(text, "Seq Scan") || strings.Contains(text, "Hash Join") {
			t.Errorf("%s's plan does not find each row by an index:\n%s", c.name, text)
		}
	}
}
