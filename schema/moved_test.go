package schema_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/schema"
)

// declaring opens a pool on url whose sessions declare the projections
// version v, as a server of a build of that version does.
func declaring(t *testing.T, url string, v int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams[schema.ProjectionsParam] = strconv.Itoa(v)
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

const appendEvent = `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
	VALUES (now(), gen_random_uuid()::text, 1, 'test', 'test', '{}')`

func refusedAsMoved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == schema.CodeProjectionsMoved
}

// TestJournalRefusesAnotherBuildsWrites: a session that declares the
// database's projections version appends, one that declares another is
// refused (schema.CodeProjectionsMoved), one that declares none appends.
// Across a switch that records a new version, an append made before it
// commits first (the switch waits for it), and one that meets it waits
// and is refused.
func TestJournalRefusesAnotherBuildsWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.URL(t)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	// The database's projections are the old build's, one version below
	// this one's, whose switch makes them this build's.
	old := schema.ProjectionVersion - 1
	if _, err := db.Exec(ctx, `UPDATE schema_version SET version = $1 WHERE part = 'projections'`, old); err != nil {
		t.Fatal(err)
	}
	oldDB, newDB := declaring(t, url, old), declaring(t, url, schema.ProjectionVersion)
	if _, err := oldDB.Exec(ctx, appendEvent); err != nil {
		t.Fatalf("an append of the database's version: %v", err)
	}
	if _, err := newDB.Exec(ctx, appendEvent); !refusedAsMoved(err) {
		t.Fatalf("an append of another version: %v", err)
	}
	if _, err := db.Exec(ctx, appendEvent); err != nil {
		t.Fatalf("an append that declares no version: %v", err)
	}

	if err := schema.CreateShadow(ctx, db, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	before, err := oldDB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = before.Rollback(context.Background()) }()
	if _, err := before.Exec(ctx, appendEvent); err != nil {
		t.Fatal(err)
	}
	inApply, release := make(chan struct{}), make(chan struct{})
	switched := make(chan error, 1)
	go func() {
		_, err := schema.SwitchShadow(ctx, db, func(pgx.Tx) error {
			close(inApply)
			<-release
			return nil
		})
		switched <- err
	}()
	waiting := func(what string, n int) {
		t.Helper()
		testpoll.Until(t, what, func() bool {
			var waits int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waits); err != nil {
				t.Fatal(err)
			}
			return waits == n
		})
	}
	waiting("the switch waiting for the append before it", 1)
	if err := before.Commit(ctx); err != nil {
		t.Fatalf("the append before the switch: %v", err)
	}
	<-inApply
	met := make(chan error, 1)
	go func() {
		_, err := oldDB.Exec(ctx, appendEvent)
		met <- err
	}()
	waiting("an append waiting for the switch", 1)
	close(release)
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	if err := <-met; !refusedAsMoved(err) {
		t.Fatalf("the old build's append that met the switch: %v", err)
	}
	if _, err := newDB.Exec(ctx, appendEvent); err != nil {
		t.Fatalf("an append of the new version after the switch: %v", err)
	}
}
