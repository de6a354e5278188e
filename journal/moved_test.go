package journal_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/schema"
)

// build is how the servers of a kind of build append: pool gives the pool
// of such a server whose build has a projections version, add appends one
// event in tx as it does.
type build struct {
	pool func(version int) *pgxpool.Pool
	add  func(ctx context.Context, tx pgx.Tx, version int) error
}

// append appends one event in a transaction of its own.
func (b build) append(ctx context.Context, version int) error {
	return pgx.BeginFunc(ctx, b.pool(version), func(tx pgx.Tx) error { return b.add(ctx, tx, version) })
}

// thisBuild appends as this build does: the version rides in the
// append's statement (journal.Queue).
func thisBuild(_ *testing.T, _ string, db *pgxpool.Pool) build {
	return build{
		pool: func(int) *pgxpool.Pool { return db },
		add: func(ctx context.Context, tx pgx.Tx, version int) error {
			var b pgx.Batch
			e := journal.Event{RecordedAt: time.Now(), Stream: journal.MessageStream(uuid.New()), Version: 1,
				Actor: "system", Payload: &journal.MessageDispatched{}}
			if err := journal.QueueAs(&b, version, e); err != nil {
				return err
			}
			return tx.SendBatch(ctx, &b).Close()
		},
	}
}

// appendEvent appends an event as the builds before this one did, and as
// psql would.
const appendEvent = `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
	VALUES (now(), gen_random_uuid()::text, 1, 'test', 'test', '{}')`

// earlierBuild appends as the builds before this one did: each session
// declares its build's version in the setting waybill.projections, which
// the journal's trigger checks.
func earlierBuild(t *testing.T, url string, _ *pgxpool.Pool) build {
	pools := map[int]*pgxpool.Pool{}
	return build{
		pool: func(version int) *pgxpool.Pool {
			if _, ok := pools[version]; !ok {
				pools[version] = declaring(t, url, version)
			}
			return pools[version]
		},
		add: func(ctx context.Context, tx pgx.Tx, _ int) error {
			_, err := tx.Exec(ctx, appendEvent)
			return err
		},
	}
}

// declaring opens a pool on url whose sessions declare the projections
// version v, as a server of an earlier build does.
func declaring(t *testing.T, url string, v int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["waybill.projections"] = strconv.Itoa(v)
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func refusedAsMoved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == schema.CodeProjectionsMoved
}

// TestJournalRefusesAnotherBuildsWrites: an append of the database's
// projections version stands, one of another is refused
// (schema.CodeProjectionsMoved), whether the build names its version in
// its statement (this build) or in its session (the builds before), and a
// session that declares none appends unchecked. Across a switch that
// records a new version, an append made before it commits first (the
// switch waits for it), and one that meets it waits and is refused.
func TestJournalRefusesAnotherBuildsWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		make func(t *testing.T, url string, db *pgxpool.Pool) build
	}{
		{"this build", thisBuild},
		{"an earlier build", earlierBuild},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := dbtest.Pool(t)
			b := tc.make(t, db.Config().ConnString(), db)
			// The database's projections are the old build's, one
			// version below this one's, whose switch makes them this
			// build's.
			old, current := schema.ProjectionVersion-1, schema.ProjectionVersion
			if _, err := db.Exec(ctx, `UPDATE schema_version SET version = $1 WHERE part = 'projections'`, old); err != nil {
				t.Fatal(err)
			}
			if err := b.append(ctx, old); err != nil {
				t.Fatalf("an append of the database's version: %v", err)
			}
			if err := b.append(ctx, current); !refusedAsMoved(err) {
				t.Fatalf("an append of another version: %v", err)
			}
			if _, err := db.Exec(ctx, appendEvent); err != nil {
				t.Fatalf("an append that declares no version: %v", err)
			}

			if err := schema.CreateShadow(ctx, db, func(pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			before, err := b.pool(old).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = before.Rollback(context.Background()) }()
			if err := b.add(ctx, before, old); err != nil {
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
			go func() { met <- b.append(ctx, old) }()
			waiting("an append waiting for the switch", 1)
			close(release)
			if err := <-switched; err != nil {
				t.Fatal(err)
			}
			if err := <-met; !refusedAsMoved(err) {
				t.Fatalf("the old build's append that met the switch: %v", err)
			}
			if err := b.append(ctx, current); err != nil {
				t.Fatalf("an append of the new version after the switch: %v", err)
			}
		})
	}
}
