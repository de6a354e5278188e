package projection_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
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
		{"the lock by id", projection.LockMessagesSQL, `'{}'`},
		{"the read", projection.LoadManySQL, `'{}'`},
		{"the messages' update", projection.UpdateMessagesSQL, strings.Repeat(`'{}', `, 10) + `'{}'`},
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

// TestListMessagesFiltersWalkTheirIndex: a page of the messages list
// filtered by type, party or idempotency key walks that filter's index.
func TestListMessagesFiltersWalkTheirIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		index string
		f     projection.MessageFilter
	}{
		{"messages_type_created", projection.MessageFilter{Type: "invoice.created", Limit: 50}},
		{"messages_from_created", projection.MessageFilter{From: "acme", Limit: 50}},
		{"messages_to_created", projection.MessageFilter{To: "globex", Limit: 50}},
		{"messages_idempotency_key_created", projection.MessageFilter{IdempotencyKey: "k-1", Limit: 50}},
		{"messages_type_created", projection.MessageFilter{Type: "invoice.created", Limit: 50,
			After: &projection.Cursor{CreatedAt: time.Now(), ID: uuid.New()}}},
	} {
		sql, args := projection.ListSQL(c.f)
		text := explain(t, b, sql, args...)
		if !strings.Contains(text, "Scan using "+c.index+" ") || strings.Contains(text, "Sort") {
			t.Errorf("%+v: the plan does not walk %s:\n%s", c.f, c.index, text)
		}
	}
}

// TestClaimsHeldReadTheirIndex: the sweep's leases run out and the claim
// found by its token read deliveries_in_flight, which holds the claims
// held and nothing else, as the count of a target's attempts in flight
// does: the index's predicate is lifecycle.InFlightRule's states, the
// statements' LeaseExpiryRule's.
func TestClaimsHeldReadTheirIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"the leases run out", projection.ExpiredSQL, []any{time.Now(), 10}},
		{"the claim by its token", projection.ClaimHeldSQL, []any{uuid.New()}},
	} {
		if text := explain(t, b, c.sql, c.args...); !strings.Contains(text, "using deliveries_in_flight") {
			t.Errorf("%s's plan does not read deliveries_in_flight:\n%s", c.name, text)
		}
	}
}

// TestHeldKeysReadTheirIndex: the ingest's lookup of a source's
// idempotency keys reads the partial messages_source_idempotency_key, in
// its generic plan too, whose keys are a parameter: the planner must prove
// the key not null from the lookup's equality.
func TestHeldKeysReadTheirIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var text string
	err := pgx.BeginFunc(b.ctx, b.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			return err
		}
		if _, err := tx.Exec(b.ctx, `PREPARE held AS `+projection.HeldKeysSQL); err != nil {
			return err
		}
		text = dbtest.Explain(t, tx, `EXECUTE held('erp', '{k-1,k-2}')`)
		_, err := tx.Exec(b.ctx, `DEALLOCATE held`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "using messages_source_idempotency_key") {
		t.Errorf("the plan does not read messages_source_idempotency_key:\n%s", text)
	}
}

// explain gives the plan of sql with args as EXPLAIN prints it, with
// sequential scans off: the tables are empty, and a scan of them all
// would otherwise be as cheap as any.
func explain(t *testing.T, b *bundle, sql string, args ...any) string {
	t.Helper()
	tx, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	if _, err := tx.Exec(b.ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	return dbtest.Explain(t, tx, sql, args...)
}
