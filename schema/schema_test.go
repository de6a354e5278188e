package schema_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestEnsureIsIdempotentAndChecksVersions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 {
		if err := schema.Ensure(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE schema_version SET version = 99 WHERE part = 'projections'`); err != nil {
		t.Fatal(err)
	}
	var ve *schema.VersionError
	if err := schema.Ensure(ctx, db); !errors.As(err, &ve) || ve.Part != schema.PartProjections || ve.Stored != 99 {
		t.Fatalf("Ensure on another version: %v", err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatalf("Ensure after the reset: %v", err)
	}
}

func TestServerLockExcludesRebuild(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := schema.LockServer(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := schema.LockServer(ctx, db)
	if err != nil {
		t.Fatalf("two servers: %v", err)
	}
	if _, err := schema.LockExclusive(ctx, db); !errors.Is(err, schema.ErrDatabaseInUse) {
		t.Fatalf("exclusive beside servers: %v", err)
	}
	a.Release()
	b.Release()
	b.Release()
	x, err := schema.LockExclusive(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.LockServer(ctx, db); !errors.Is(err, schema.ErrDatabaseInUse) {
		t.Fatalf("server beside a rebuild: %v", err)
	}
	x.Release()
}

func TestAlertsSurviveAProjectionReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO alerts (id, code, severity, key, position, raised_at, body, webhook)
		VALUES ('a', 'delivery_stalled', 'critical', 'delivery_stalled:alpha', 1, now(), '{}', false)`); err != nil {
		t.Fatal(err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM alerts`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d alerts after the reset, %v", n, err)
	}
}
